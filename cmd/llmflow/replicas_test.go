package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// redisProc is a redis-server of the test's own (the machine's shared
// Redis is never stopped), without persistence.
type redisProc struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis(t *testing.T, addr string) *redisProc {
	t.Helper()
	if os.Getenv("LLMFLOW_SKIP_REDIS") == "1" {
		t.Skip("LLMFLOW_SKIP_REDIS=1")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed (apt-get install redis-server; LLMFLOW_SKIP_REDIS=1 skips)")
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisProc{addr: addr, cmd: cmd}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for range 300 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("redis-server on %s did not start", addr)
	return nil
}

func (r *redisProc) kill() { r.cmd.Process.Kill(); r.cmd.Wait() }

// stream is a streamed completion held open.
type heldStream struct {
	body io.ReadCloser
}

func holdStream(t *testing.T, c *http.Client, base, key string) heldStream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"long"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return heldStream{body: resp.Body}
}

// TestThreeReplicasShareReservation: three real replicas on one Redis
// (a redis-server of the test's own), a round-robin client. Pool capacity
// 8, etabA's share 0.75: its reservation is 6. Of 12 streams of etabA
// held open across the three replicas exactly 6 get a within-share
// priority (0) and 6 borrow — one gateway would grant the same; three
// gateways with their own counters would grant 12. Redis killed under
// load: every request is still answered, each replica admits against its
// slice (reservation / live replicas), /healthz and llmflow_redis_fallback
// say so. Redis back, empty: the counts are rebuilt from what each
// replica has in flight (exactly the open streams), and are zero once they
// close (no leak, no double count).
func TestThreeReplicasShareReservation(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: 20 * time.Millisecond,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 256, KVBlocks: 1 << 16}})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(func() { simSrv.Close(); sim.Close() })
	dir := t.TempDir()
	// reclaim = "none": the borrowers go to the engine beyond the capacity
	// (under "preempt" they would wait in the gateways for a slot)
	reps := startReplicas(t, replicasConfig(t, dir, simSrv.URL, redisAt(rds.addr), "pool \"sim\" {\n  capacity = 8\n  reclaim  = \"none\"\n}"), dir, 3)
	key := createKey(t, reps[0].base)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	waitFor(t, 10*time.Second, "every replica sees 3 live replicas (leases)", func() bool {
		for _, r := range reps {
			if h := healthz(t, r.base); h.Shared == nil || h.Shared.Replicas != 3 {
				return false
			}
		}
		return true
	})

	open := func(n int) []heldStream {
		var out []heldStream
		for i := range n {
			out = append(out, holdStream(t, c, reps[i%3].base, key))
		}
		return out
	}
	closeAll := func(ss []heldStream) {
		for _, s := range ss {
			s.body.Close()
		}
	}
	// count classifies the priorities the engine got for the requests it
	// received after the first seen ones (the gateway sends no request
	// id upstream: headers are built from scratch).
	// Only streams are counted: the load of short requests during the
	// Redis outage is not streamed.
	seen := 0
	count := func(n int) (within, borrowing int) {
		var got []vllmsim.Received
		for range 500 { // the engine may see the last ones a moment later
			got = got[:0]
			for _, r := range sim.Received() {
				if r.Stream {
					got = append(got, r)
				}
			}
			if len(got) >= seen+n {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(got) < seen+n {
			t.Fatalf("the engine received %d of %d streams", len(got)-seen, n)
		}
		for _, r := range got[seen : seen+n] {
			switch {
			case r.Priority <= 1:
				within++
			case r.Priority >= 10:
				borrowing++
			}
		}
		seen += n
		return within, borrowing
	}

	first := open(12)
	if w, b := count(12); w != 6 || b != 6 {
		t.Fatalf("12 streams of etabA over 3 replicas: %d within share, %d borrowing; want 6 and 6 (its reservation is 6)", w, b)
	}
	// Redis killed under load: short requests of the other organisation
	// (so they take none of etabA's slots) keep coming through every
	// replica and all are answered.
	loadKey := createTeamKey(t, reps[1].base, "lab-chem")
	loadDone := make(chan struct{})
	var loadOK, loadFailed atomic.Int64
	var loadWG sync.WaitGroup
	for i := range 3 {
		loadWG.Go(func() {
			for n := 0; n < 400; n++ {
				select {
				case <-loadDone:
					return
				default:
				}
				if shortRequest(c, reps[(i+n)%3].base, loadKey) {
					loadOK.Add(1)
				} else {
					loadFailed.Add(1)
				}
			}
		})
	}
	rds.kill()
	// Each replica falls back to its slice: etabA's reservation of 6 over
	// the 3 live replicas last seen is 2 each, so of 9 new streams (3 per
	// replica) 6 are within and 3 borrow — never more within than one
	// gateway would grant.
	during := open(9)
	if w, b := count(9); w != 6 || b != 3 {
		t.Errorf("with Redis down: %d within, %d borrowing; want 6 and 3 (a slice of 2 per replica)", w, b)
	}
	for i, r := range reps {
		if h := healthz(t, r.base); h.Status != "degraded" || h.Shared == nil || h.Shared.Status != "fallback" || h.Shared.Replicas != 3 {
			t.Errorf("replica %d /healthz with Redis down: %+v %+v", i, h, h.Shared)
		}
	}
	if m := scrape(t, reps[0].base); !strings.Contains(m, "llmflow_redis_fallback 1\n") || !strings.Contains(m, "llmflow_redis_replicas 3\n") {
		t.Errorf("metrics with Redis down: %s", grepLines(m, "llmflow_redis_fallback", "llmflow_redis_replicas"))
	}
	startRedis(t, rds.addr) // empty: no persistence
	// The replicas rebuild the counts from what each has in flight: the
	// 12 + 9 streams (load requests may add a few at any instant).
	waitFor(t, 10*time.Second, "the replicas leave the fallback and rebuild 21 streams in flight", func() bool {
		for _, r := range reps {
			if h := healthz(t, r.base); h.Shared == nil || h.Shared.Status != "ok" {
				return false
			}
		}
		n := poolInFlight(t, reps[1].base)
		return n >= 21 && n <= 21+3
	})
	close(loadDone)
	loadWG.Wait()
	if loadFailed.Load() != 0 || loadOK.Load() == 0 {
		t.Errorf("load across the kill and restart: %d answered, %d failed", loadOK.Load(), loadFailed.Load())
	}
	t.Logf("load across the Redis kill and restart: %d answered, %d failed", loadOK.Load(), loadFailed.Load())
	closeAll(first)
	closeAll(during)
	waitFor(t, 10*time.Second, "nothing left in flight after the streams closed", func() bool {
		return poolInFlight(t, reps[2].base) == 0
	})
	again := open(12)
	if w, b := count(12); w != 6 || b != 6 {
		t.Fatalf("after Redis came back: %d within, %d borrowing; want 6 and 6", w, b)
	}
	closeAll(again)
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Go(func() { r.signal(syscall.SIGTERM) })
	}
	wg.Wait()
	for i, r := range reps {
		if code := r.exitCode(); code != 0 {
			t.Errorf("replica %d exit %d:\n%s", i, code, tail(r.logs.String(), 2000))
		}
	}
}

// TestRevocationReachesAllReplicas: a key used on three replicas (so each
// caches it) and revoked through one is refused by all three within a
// second; without the announcement through Redis the other two would
// accept it until their cache entry expires (a minute). A team created
// through one replica is in the others' trees within a second too.
func TestRevocationReachesAllReplicas(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	reps := startReplicas(t, replicasConfig(t, dir, sim, redisAt(rds.addr), `pool "sim" { capacity = 64 }`), dir, 3)
	req, _ := http.NewRequest(http.MethodPost, reps[0].base+"/admin/keys", strings.NewReader(`{"team":"lab-nlp","name":"x"}`))
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ ID, Key string }
	json.NewDecoder(resp.Body).Decode(&k)
	resp.Body.Close()
	status := func(base string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+k.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, r := range reps {
		if s := status(r.base); s != 200 {
			t.Fatalf("replica %d: key refused before revocation: %d", i, s)
		}
	}
	del, _ := http.NewRequest(http.MethodDelete, reps[0].base+"/admin/keys/"+k.ID, nil)
	del.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err = http.DefaultClient.Do(del)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
	revoked := time.Now()
	for i, r := range reps {
		for status(r.base) != http.StatusUnauthorized {
			if time.Since(revoked) > time.Second {
				t.Fatalf("replica %d still accepts the key a second after its revocation on replica 0", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("refused by all three replicas %v after the revocation", time.Since(revoked).Round(time.Millisecond))

	// An account created on one replica is in every replica's tree within
	// a second (the admin write is announced; the periodic check is 5 s).
	req, _ = http.NewRequest(http.MethodPost, reps[0].base+"/admin/teams", strings.NewReader(`{"name":"lab-new","org":"etabA"}`))
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode >= 300 {
		t.Fatalf("create team: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
	created := time.Now()
	hasTeam := func(base string) bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/teams", nil)
		req.Header.Set("Authorization", "Bearer "+procMasterKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"lab-new"`)
	}
	for i, r := range reps {
		for !hasTeam(r.base) {
			if time.Since(created) > time.Second {
				t.Fatalf("replica %d does not know the team created on replica 0 a second later", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("team known to all three replicas %v after its creation", time.Since(created).Round(time.Millisecond))
}

// shortRequest sends one small non-streaming completion; true when it was
// answered 200 with its whole body.
func shortRequest(c *http.Client, base, key string) bool {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-llama","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.StatusCode == 200
}

type healthBody struct {
	Status string `json:"status"`
	Shared *struct {
		Status   string `json:"status"`
		Replicas int    `json:"replicas"`
		Error    string `json:"error"`
	} `json:"shared"`
}

// healthz reads a replica's /healthz with the master key (details).
func healthz(t *testing.T, base string) healthBody {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h healthBody
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// poolInFlight is the sim pool's in-flight count as a replica reports it
// (/admin/fairshare: the shared totals).
func poolInFlight(t *testing.T, base string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/fairshare", nil)
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep struct {
		Pools []struct {
			Pool     string `json:"pool"`
			InFlight int    `json:"in_flight"`
		} `json:"pools"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Pools {
		if p.Pool == "sim" {
			return p.InFlight
		}
	}
	t.Fatalf("no pool sim in /admin/fairshare")
	return 0
}

// waitFor polls cond every 50 ms until it holds, failing after limit (a
// generous bound, not a timing assertion).
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestThreeReplicasHeldFractions: three replicas sharing one Redis, a
// round-robin client per request, both organisations flooding one engine
// (pool capacity 16: etabA reserves 12, etabB 4). The fractions of the
// engine's running requests each organisation holds, sampled over the run,
// stay within 0.02 of the shares (0.75 / 0.25); at no sample does the
// engine run more within-share requests of an organisation than its
// reservation — what one gateway would grant, not three times it (three
// gateways counting alone grant etabA up to 24, all its requests, and
// etabB 12).
//
// The engine is saturated the way a real vLLM is: bound by its KV cache,
// not by max_num_seqs (default 256). Each request has a distinct 64-token
// prompt and 10 output tokens (5 blocks of 16 at full length); 59 blocks
// hold about 11 of them, fewer than the 16 reserved, so within-share
// requests (priority 0) always wait in the engine and take any space that
// frees before a borrower (priority ≥ 10) can: vLLM admits waiting
// requests in priority order once KV blocks free. Borrowers then get no
// space, whatever the delay of the clients' next requests.
//
// Not tested here, because vLLM does not do it: taking a slot back from a
// running borrower. With an engine bound by max_num_seqs (16, with KV to
// spare: what this test ran against before) a slot freed while the owner's
// next request is on its way goes to a waiting borrower and stays with it
// until it finishes — vLLM V1 preempts a running request only when KV
// blocks run out, never for a waiting higher-priority one (vLLM issue
// #40004; vllmsim's TestWaitingHighPriorityNeverPreempts) — and the held
// fractions then depend on how fast clients resubmit: within 0.02 only
// while the next request reaches the engine before its next step, etabA
// off by up to 0.13 in CI runs under the race detector. Only the gateway
// holding borrowers back could keep the shares then.
func TestThreeReplicasHeldFractions(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s load test")
	}
	rds := startRedis(t, freeAddr(t))
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: 20 * time.Millisecond,
		Sched: vllmsim.SchedConfig{KVBlocks: 59, BlockSize: 16}})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(func() { simSrv.Close(); sim.Close() })
	dir := t.TempDir()
	reps := startReplicas(t, replicasConfig(t, dir, simSrv.URL, redisAt(rds.addr), `pool "sim" { capacity = 16 }`), dir, 3)
	keys := map[string]string{"etabA": createTeamKey(t, reps[0].base, "lab-nlp"), "etabB": createTeamKey(t, reps[1].base, "lab-chem")}
	// Each organisation's cache_salt (set by the gateway per organisation)
	// tells the engine's requests apart.
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	salts := map[string]string{}
	for org, key := range keys {
		if !shortRequest(c, reps[2].base, key) {
			t.Fatalf("%s: first request failed", org)
		}
		got := sim.Received()
		s, _ := got[len(got)-1].Body["cache_salt"].(string)
		if s == "" {
			t.Fatalf("%s: no cache_salt upstream", org)
		}
		salts[s] = org
	}
	if len(salts) != 2 {
		t.Fatalf("the two organisations share a cache_salt")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	n := 0
	for org, key := range keys {
		for range 24 {
			n++
			first := n
			wg.Go(func() {
				for i := first; i < first+200; i++ { // bounded: 200 requests each at most
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest(http.MethodPost, reps[i%3].base+"/v1/chat/completions",
						strings.NewReader(`{"model":"sim-llama","max_tokens":10,"messages":[{"role":"user","content":"`+heldPrompt(org, first, i)+`"}]}`))
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
	time.Sleep(2 * time.Second) // fill the engine
	held := map[string]int{}
	samples, running, borrowing := 0, 0, 0
	var kv float64
	for range 160 { // 8 s
		time.Sleep(50 * time.Millisecond)
		by := sim.RunningBy(func(r *vllmsim.Received) string {
			s, _ := r.Body["cache_salt"].(string)
			if r.Priority <= 1 {
				return salts[s] + "/within"
			}
			return salts[s] + "/borrowing"
		})
		if by["etabA/within"] > 12 || by["etabB/within"] > 4 {
			t.Errorf("the engine runs %d within-share requests of etabA (reservation 12), %d of etabB (reservation 4)",
				by["etabA/within"], by["etabB/within"])
		}
		held["etabA"] += by["etabA/within"] + by["etabA/borrowing"]
		held["etabB"] += by["etabB/within"] + by["etabB/borrowing"]
		borrowing += by["etabA/borrowing"] + by["etabB/borrowing"]
		st := sim.Stats()
		running += st.Running
		kv += st.KVUsage
		samples++
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d requests failed", failed.Load())
	}
	total := float64(held["etabA"] + held["etabB"])
	fa, fb := float64(held["etabA"])/total, float64(held["etabB"])/total
	mean := float64(running) / float64(samples)
	t.Logf("held fractions over %d samples: etabA %.4f (share 0.75), etabB %.4f (share 0.25); "+
		"on average %.1f running (%.2f borrowing), KV cache %.0f%% used",
		samples, fa, fb, mean, float64(borrowing)/float64(samples), 100*kv/float64(samples))
	if mean > 14 {
		t.Errorf("the engine ran %.1f requests on average: not bound by its KV cache below the 16 reserved, "+
			"so the fractions below depend on the clients' timing (see the test's comment)", mean)
	}
	if math.Abs(fa-0.75) > 0.02 || math.Abs(fb-0.25) > 0.02 {
		t.Errorf("held fractions etabA %.4f, etabB %.4f: not within 0.02 of the shares 0.75 / 0.25", fa, fb)
	}
}

// heldPrompt is the 256-byte text (64 simulated tokens) of one request of
// TestThreeReplicasHeldFractions: distinct per request from its start, so
// that no two requests could share prefix-cache blocks in a real vLLM.
func heldPrompt(org string, client, i int) string {
	p := fmt.Sprintf("%s client %d request %d ", org, client, i)
	return p + strings.Repeat("x", 256-len(p))
}

// TestCrashedReplicaReleasesItsShare: a replica holding 6 streams (all of
// etabA's reservation) is killed with SIGKILL; its lease expires and a
// live replica's beat takes its requests off the shared counts, so the
// reservation is free again for the others, and a clean SIGTERM of
// another replica gives its part up at once.
func TestCrashedReplicaReleasesItsShare(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, 20*time.Millisecond)
	dir := t.TempDir()
	reps := startReplicas(t, replicasConfig(t, dir, sim, redisAt(rds.addr), `pool "sim" { capacity = 8 }`), dir, 3)
	key := createKey(t, reps[0].base)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var held []heldStream
	for range 6 {
		held = append(held, holdStream(t, c, reps[0].base, key))
	}
	for range 2 {
		held = append(held, holdStream(t, c, reps[1].base, key))
	}
	if n := poolInFlight(t, reps[2].base); n != 8 {
		t.Fatalf("pool in flight %d, want 8", n)
	}
	reps[0].signal(syscall.SIGKILL)
	waitFor(t, 15*time.Second, "the killed replica's 6 streams leave the shared counts (lease of 3 s)", func() bool {
		return poolInFlight(t, reps[2].base) == 2
	})
	for _, h := range held {
		h.body.Close()
	}
	reps[1].signal(syscall.SIGTERM)
	if code := reps[1].exitCode(); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	waitFor(t, 15*time.Second, "the stopped replica's part is given up, one live replica left", func() bool {
		h := healthz(t, reps[2].base)
		return poolInFlight(t, reps[2].base) == 0 && h.Shared != nil && h.Shared.Replicas == 1
	})
}
