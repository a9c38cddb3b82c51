package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// BenchmarkOwnerReturn measures how long a returning owner waits for its
// reservation (issue 26): a real serve process in front of vllmsim over
// loopback, with KV to spare and max_num_seqs = the pool's capacity (16),
// 10 ms per token. etabB (share 0.25) fills all 16 slots with streams of
// the given length, 12 of them borrowed from etabA (share 0.75: 12
// reserved); then etabA sends 12 streams, and owner-reach-s is the time
// until the engine runs all 12. vLLM V1 never preempts a running request
// for a waiting one of higher priority, so today that is about as long as
// a borrower's answer. Each iteration is one such return (use -benchtime
// 1x):
//
//	go test -run '^$' -bench BenchmarkOwnerReturn -benchtime 1x ./cmd/llmflow/
func BenchmarkOwnerReturn(b *testing.B) {
	for _, tokens := range []int{1000, 4000} {
		b.Run(fmt.Sprintf("tokens=%d", tokens), func(b *testing.B) { benchOwnerReturn(b, tokens) })
	}
}

func benchOwnerReturn(b *testing.B, tokens int) {
	const capacity, reserved = 16, 12
	step := 10 * time.Millisecond
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: step,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: capacity, KVBlocks: 1 << 20}})
	srv := httptest.NewServer(sim)
	b.Cleanup(func() { srv.Close(); sim.Close() })
	dir := b.TempDir()
	cfg := procConfig(b, dir, srv.URL, "store {\n  path = \"llmflow.db\"\n}\n")
	src, err := os.ReadFile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(cfg, []byte(strings.Replace(string(src), `pool "sim" { capacity = 64 }`, fmt.Sprintf(`pool "sim" { capacity = %d }`, capacity), 1)), 0o600)
	p := startServe(b, cfg)
	keyA, keyB := createTeamKey(b, p.base, "lab-nlp"), createTeamKey(b, p.base, "lab-chem")
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * capacity}}
	who := func(r *vllmsim.Received) string {
		if strings.Contains(string(r.RawBody), `"content":"owner"`) {
			return "A"
		}
		return "B"
	}
	stream := func(ctx context.Context, key, content string) {
		body := fmt.Sprintf(`{"model":"sim-llama","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, tokens, content)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			if _, err := br.ReadSlice('\n'); err != nil && err != bufio.ErrBufferFull {
				return
			}
		}
	}
	until := func(limit time.Duration, what string, cond func() bool) {
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				b.Fatalf("not within %v: %s (engine: %+v)", limit, what, sim.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	answer := time.Duration(tokens) * step
	var reach time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		for range capacity {
			go stream(ctx, keyB, "borrower")
		}
		until(time.Minute, "the borrower runs every slot", func() bool { return sim.RunningBy(who)["B"] == capacity })
		start := time.Now()
		for range reserved {
			go stream(ctx, keyA, "owner")
		}
		until(2*answer+time.Minute, "the owner runs its reservation", func() bool { return sim.RunningBy(who)["A"] >= reserved })
		reach += time.Since(start)
		cancel()
		until(time.Minute, "the engine is idle", func() bool { st := sim.Stats(); return st.Running == 0 && st.Waiting == 0 })
	}
	b.ReportMetric(reach.Seconds()/float64(b.N), "owner-reach-s")
	b.ReportMetric(answer.Seconds(), "answer-s")
}
