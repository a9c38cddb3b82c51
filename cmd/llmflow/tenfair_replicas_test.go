package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// tenReservations are the reservations of the ten institutions of
// TestTenInstitutionsFairShare, of 40 slots.
var tenReservations = []int{10, 8, 6, 4, 3, 2, 2, 2, 2, 1}

// tenConfig writes replicasConfig's configuration with ten organisations
// (shares = tenReservations / 40, a team each) instead of etabA and
// etabB, on a pool of capacity 40; a redis block only when redisBody is
// not "".
func tenConfig(t testing.TB, dir, simURL, redisBody string) string {
	t.Helper()
	store := "store {\n  path = \"llmflow.db\"\n}\n"
	if redisBody != "" {
		store += "redis {\n" + redisBody + "}\n"
	}
	cfg := procConfig(t, dir, simURL, store)
	src, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var orgs strings.Builder
	for i, r := range tenReservations {
		fmt.Fprintf(&orgs, "org \"inst%d\" {\n  share = %g\n  team \"team%d\" {}\n}\n", i, float64(r)/40, i)
	}
	s := string(src)
	from, to := strings.Index(s, `org "etabA"`), strings.Index(s, `pool "sim"`)
	s = s[:from] + orgs.String() + strings.Replace(s[to:], `pool "sim" { capacity = 64 }`, `pool "sim" { capacity = 40 }`, 1)
	if err := os.WriteFile(filepath.Join(dir, "gateway.hcl"), []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tenRun floods one engine under KV pressure from the ten institutions,
// each with more clients than its reservation, sending round robin to
// the gateways reps; it returns each institution's fraction of the
// engine's running requests, sampled for dur, and the most within-share
// requests of an institution the engine ran at once over its reservation.
func tenRun(t *testing.T, sim *vllmsim.Server, reps []*proc, keys []string, salts map[string]int, dur time.Duration) (frac []float64, over int, borrowing float64) {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer c.CloseIdleConnections()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	n := 0
	for org, key := range keys {
		for range 2*tenReservations[org] + 2 {
			n++
			first := n
			wg.Go(func() {
				for i := first; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest(http.MethodPost, reps[i%len(reps)].base+"/v1/chat/completions",
						strings.NewReader(`{"model":"sim-llama","max_tokens":10,"messages":[{"role":"user","content":"`+heldPrompt(fmt.Sprint("inst", org), first, i)+`"}]}`))
					req.Header.Set("Authorization", "Bearer "+key)
					req.Header.Set("Content-Type", "application/json")
					resp, err := c.Do(req)
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failed.Add(1)
					}
				}
			})
		}
	}
	// the engine full: requests wait in it (KV pressure), then a steady state
	waitFor(t, time.Minute, "the engine holds requests waiting", func() bool { return sim.Stats().Waiting > 0 })
	time.Sleep(2 * time.Second)
	held := make([]int, len(keys))
	total, samples, borrowers := 0, 0, 0
	for range int(dur / (50 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond)
		by := sim.RunningBy(func(r *vllmsim.Received) string {
			s, _ := r.Body["cache_salt"].(string)
			w := "b"
			if r.Priority <= 1 {
				w = "w"
			}
			return fmt.Sprint(salts[s], w)
		})
		samples++
		for org := range keys {
			w, b := by[fmt.Sprint(org, "w")], by[fmt.Sprint(org, "b")]
			held[org] += w + b
			total += w + b
			borrowers += b
			over = max(over, w-tenReservations[org])
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d requests failed", failed.Load())
	}
	for org := range keys {
		frac = append(frac, float64(held[org])/float64(total))
	}
	return frac, over, float64(borrowers) / float64(samples)
}

// TestTenInstitutionsFairShare: ten institutions (reservations 10, 8, 6,
// 4, 3, 2, 2, 2, 2, 1 of 40 slots), every one saturating an engine under
// KV pressure, through three replicas behind a round-robin balancer:
// every institution's running fraction stays within 0.01 of its share,
// and the engine never runs more within-share requests of an institution
// than its reservation. One gateway alone is measured the same way first,
// for comparison.
//
// By default each runs once, sampled for 16 s, and three replicas must
// stay within 0.02 (the bound of the other replica tests): CI runs it
// with the race detector on 2 shared cores, where a Redis call can pass
// its timeout and a replica fall back to its slices for a beat, and a
// test must not need an idle machine. Sampled for 8 s, as issue 25
// measured, the fractions of one gateway alone vary from run to run by up
// to 0.009 on a loaded machine (which of the requests of equal priority
// the engine runs), as much as three replicas' do. LLMFLOW_TEN_RUNS=n
// measures the goal: each runs n times, sampled for 8 s, and three
// replicas must stay within 0.01 in every run:
//
//	LLMFLOW_TEN_RUNS=5 go test ./cmd/llmflow -run TestTenInstitutionsFairShare -v
func TestTenInstitutionsFairShare(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of a minute")
	}
	runs, window, bound := 1, 16*time.Second, 0.02
	if s := os.Getenv("LLMFLOW_TEN_RUNS"); s != "" {
		if _, err := fmt.Sscan(s, &runs); err != nil || runs < 1 {
			t.Fatalf("LLMFLOW_TEN_RUNS=%q: want a number of runs", s)
		}
		window, bound = 8*time.Second, 0.01
	}
	for _, n := range []int{1, 3} {
		for run := range runs {
			t.Run(fmt.Sprintf("%d-replicas/run-%d", n, run), func(t *testing.T) {
				// 64-token prompts, 10 output tokens: 5 blocks of 16 at full
				// length; 150 blocks hold about 30, fewer than the 40 reserved
				sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: 20 * time.Millisecond,
					Sched: vllmsim.SchedConfig{KVBlocks: 150, BlockSize: 16}})
				simSrv := httptest.NewServer(sim)
				defer func() { simSrv.Close(); sim.Close() }()
				dir := t.TempDir()
				var reps []*proc
				if n == 1 {
					reps = []*proc{startServe(t, tenConfig(t, dir, simSrv.URL, ""))}
				} else {
					rds := startRedis(t, freeAddr(t))
					reps = startReplicas(t, tenConfig(t, dir, simSrv.URL, redisAt(rds.addr)), dir, n)
					waitFor(t, time.Minute, fmt.Sprintf("every replica sees %d live replicas", n), func() bool {
						for _, r := range reps {
							if h := healthz(t, r.base); h.Shared == nil || h.Shared.Replicas != n {
								return false
							}
						}
						return true
					})
				}
				keys := make([]string, len(tenReservations))
				salts := map[string]int{}
				c := &http.Client{}
				for org := range keys {
					keys[org] = createTeamKey(t, reps[0].base, fmt.Sprint("team", org))
					if !shortRequest(c, reps[org%n].base, keys[org]) {
						t.Fatalf("inst%d: first request failed", org)
					}
					got := sim.Received()
					s, _ := got[len(got)-1].Body["cache_salt"].(string)
					salts[s] = org
				}
				if len(salts) != len(keys) {
					t.Fatal("institutions share a cache_salt")
				}
				frac, over, borrowing := tenRun(t, sim, reps, keys, salts, window)
				worst, at := 0.0, 0
				var line strings.Builder
				for org, f := range frac {
					share := float64(tenReservations[org]) / 40
					fmt.Fprintf(&line, " %.4f", f-share)
					if d := math.Abs(f - share); d > worst {
						worst, at = d, org
					}
				}
				t.Logf("%d replicas: running fraction − share per institution:%s; worst %.4f (inst%d); %.2f borrowers running on average",
					n, line.String(), worst, at, borrowing)
				if over > 0 {
					t.Errorf("the engine ran %d within-share requests over an institution's reservation", over)
				}
				// a replica that lost Redis admits against its slice of each
				// reservation until its next beat: say so, it explains a miss
				var fallbacks []string
				for i, r := range reps {
					for line := range strings.Lines(r.logs.String()) {
						if strings.Contains(line, "redis unreachable") {
							fallbacks = append(fallbacks, fmt.Sprintf("replica %d: %s", i, strings.TrimSpace(line)))
						}
					}
				}
				if len(fallbacks) > 0 {
					t.Logf("replicas fell back to their slices of the reservations (Redis slower than its timeout):\n%s", strings.Join(fallbacks, "\n"))
				}
				if n > 1 && worst > bound {
					t.Errorf("inst%d's running fraction is %.4f off its share: more than %g", at, worst, bound)
				}
			})
		}
	}
}
