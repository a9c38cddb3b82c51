package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// The figures of issue 26 ("Owners never wait"), each from a real serve
// process in front of vllmsim over loopback, with KV to spare and
// max_num_seqs = the pool's capacity (16), 10 ms per token:
//
//	go test -run '^$' -bench 'BenchmarkOwnerReturn|BenchmarkLoneTenant' -benchtime 1x ./cmd/llmflow/
//
// BenchmarkOwnerReturn: etabB (3 reserved) fills all 16 slots with answers
// of the given length, 13 of them borrowed from etabA (13 reserved); then
// etabA, a quarter into their answers, sends 13 requests. owner-reach-s is the time until the engine runs
// all 13. vLLM V1 never preempts a running request for a waiting one of
// higher priority, so under reclaim = "none" that is about as long as a
// borrower's answer; under "preempt" the gateway takes the slots back. Every
// borrower's answer is then read to its end: borrower-errors counts those
// that failed or came back incomplete. recompute-tokens is what the engine
// prefilled again to resume them, recompute-share its share of the tokens
// the engine processed during the run.
func BenchmarkOwnerReturn(b *testing.B) {
	for _, reclaim := range []string{"preempt", "none"} {
		for _, stream := range []bool{true, false} {
			for _, tokens := range []int{1000, 4000} {
				name := fmt.Sprintf("reclaim=%s/stream=%v/tokens=%d", reclaim, stream, tokens)
				b.Run(name, func(b *testing.B) { benchOwnerReturn(b, reclaim, stream, tokens) })
			}
		}
	}
}

const (
	benchCapacity = 16
	ownerReserved = 13
	benchStep     = 10 * time.Millisecond
)

// benchGateway starts vllmsim (max_num_seqs = benchCapacity) and a serve
// process whose pool has capacity benchCapacity and the given reclaim;
// etabA holds 13 of its slots, etabB 3.
func benchGateway(b *testing.B, reclaim string) (*vllmsim.Server, *proc) {
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: benchStep,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: benchCapacity, KVBlocks: 1 << 20}})
	srv := httptest.NewServer(sim)
	b.Cleanup(func() { srv.Close(); sim.Close() })
	dir := b.TempDir()
	cfg := procConfig(b, dir, srv.URL, "store {\n  path = \"llmflow.db\"\n}\n")
	src, err := os.ReadFile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s := strings.NewReplacer(
		`pool "sim" { capacity = 64 }`, fmt.Sprintf("pool \"sim\" {\n  capacity = %d\n  reclaim  = %q\n}", benchCapacity, reclaim),
		"share = 0.75", "share = 0.8125", // 13 of 16
		"share = 0.25", "share = 0.1875", // 3 of 16
	).Replace(string(src))
	if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
		b.Fatal(err)
	}
	return sim, startServe(b, cfg)
}

// benchAsk sends one request of n tokens and reports whether its answer
// came back complete.
func benchAsk(ctx context.Context, c *http.Client, base, key, who string, stream bool, n int) bool {
	body := fmt.Sprintf(`{"model":"sim-llama","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, stream, n, who)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	last := fmt.Sprintf("tok%d ", n-1)
	return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(got), last) &&
		(!stream || strings.Contains(string(got), "data: [DONE]"))
}

func until(b *testing.B, sim *vllmsim.Server, limit time.Duration, what string, cond func() bool) {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("not within %v: %s (engine: %+v)", limit, what, sim.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func benchOwnerReturn(b *testing.B, reclaim string, stream bool, tokens int) {
	sim, p := benchGateway(b, reclaim)
	keyA, keyB := createTeamKey(b, p.base, "lab-nlp"), createTeamKey(b, p.base, "lab-chem")
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchCapacity}}
	who := func(r *vllmsim.Received) string {
		if strings.Contains(string(r.RawBody), `"content":"owner"`) {
			return "A"
		}
		return "B"
	}
	answer := time.Duration(tokens) * benchStep
	var reach time.Duration
	var failed atomic.Int64
	var recomputed, processed int64
	b.ResetTimer()
	for range b.N {
		before := sim.Stats()
		var wg sync.WaitGroup
		for range benchCapacity {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !benchAsk(context.Background(), c, p.base, keyB, "borrower", stream, tokens) {
					failed.Add(1)
				}
			}()
		}
		until(b, sim, time.Minute, "the borrower runs every slot", func() bool { return sim.RunningBy(who)["B"] == benchCapacity })
		time.Sleep(answer / 4) // the owner returns a quarter into the borrowers' answers
		start := time.Now()
		for range ownerReserved {
			wg.Add(1)
			go func() { defer wg.Done(); benchAsk(context.Background(), c, p.base, keyA, "owner", stream, 200) }()
		}
		until(b, sim, 2*answer+time.Minute, "the owner runs its reservation", func() bool { return sim.RunningBy(who)["A"] >= ownerReserved })
		reach += time.Since(start)
		wg.Wait()
		after := sim.Stats()
		processed += after.PromptTokens + after.GenerationTokens - before.PromptTokens - before.GenerationTokens
		for _, r := range sim.Received() {
			if r.Body["continue_final_message"] == true {
				if u, ok := r.Body["messages"].([]any); ok && len(u) > 0 {
					recomputed += int64(tokensOf(u))
				}
			}
		}
		sim.ResetReceived()
	}
	b.ReportMetric(reach.Seconds()/float64(b.N), "owner-reach-s")
	b.ReportMetric(answer.Seconds(), "answer-s")
	b.ReportMetric(float64(failed.Load()), "borrower-errors")
	b.ReportMetric(float64(recomputed)/float64(b.N), "recompute-tokens")
	if processed > 0 {
		b.ReportMetric(float64(recomputed)/float64(processed), "recompute-share")
	}
}

// tokensOf is how many prompt tokens vllmsim counts for a resumed request's
// messages: the answer so far (one token per "tok<i> ") and the user's
// words, as its usage reports them (a bound for what was recomputed).
func tokensOf(msgs []any) int {
	n := 0
	for _, m := range msgs {
		if mm, ok := m.(map[string]any); ok {
			if s, ok := mm["content"].(string); ok {
				n += len(strings.Fields(s)) + 1
			}
		}
	}
	return n
}

// BenchmarkLoneTenant: etabB alone (3 of 16 slots reserved) keeps 32
// streams of 100-token answers going for 5 s; utilisation is the mean share
// of the engine's 16 slots running, by reclaim. Under "holdback" borrowers
// leave the headroom (a quarter of the capacity) free; under "preempt" only
// those the gateway cannot resume do.
func BenchmarkLoneTenant(b *testing.B) {
	for _, reclaim := range []string{"preempt", "holdback", "none"} {
		b.Run("reclaim="+reclaim, func(b *testing.B) {
			sim, p := benchGateway(b, reclaim)
			key := createTeamKey(b, p.base, "lab-chem")
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var util float64
			b.ResetTimer()
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				var wg sync.WaitGroup
				for range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for ctx.Err() == nil {
							benchAsk(ctx, c, p.base, key, "lone", true, 100)
						}
					}()
				}
				time.Sleep(500 * time.Millisecond) // ramp up
				var sum, n float64
				for ctx.Err() == nil {
					sum += float64(sim.Stats().Running)
					n++
					time.Sleep(10 * time.Millisecond)
				}
				wg.Wait()
				cancel()
				util += sum / n / benchCapacity
			}
			b.ReportMetric(util/float64(b.N), "utilisation")
		})
	}
}
