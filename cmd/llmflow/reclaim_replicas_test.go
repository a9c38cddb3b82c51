package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// TestReclaimAcrossReplicas: two replicas (real processes, one Redis) in
// front of vllmsim at max_num_seqs 4 with KV to spare. etabB fills the
// engine through both replicas (one request within its reservation of 1,
// three borrowed); etabA (3 reserved) returns through replica 0 alone.
// Replica 0 preempts its own two borrowers; its three owners leave the
// other replica no room for borrowers, so that one preempts the borrower
// it runs (redisstate's borrowers' room): etabA runs its three
// slots while every borrower's long answer is still under way, and each
// borrower's stream ends whole.
func TestReclaimAcrossReplicas(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: 5 * time.Millisecond,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 4, KVBlocks: 1 << 16}})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(func() { simSrv.Close(); sim.Close() })
	dir := t.TempDir()
	reps := startReplicas(t, replicasConfig(t, dir, simSrv.URL, redisAt(rds.addr), "pool \"sim\" {\n  capacity = 4\n  reclaim  = \"preempt\"\n}"), dir, 2)
	waitFor(t, 10*time.Second, "both replicas see 2 live replicas", func() bool {
		for _, r := range reps {
			if h := healthz(t, r.base); h.Shared == nil || h.Shared.Replicas != 2 {
				return false
			}
		}
		return true
	})
	keyA, keyB := createTeamKey(t, reps[0].base, "lab-nlp"), createTeamKey(t, reps[0].base, "lab-chem")
	who := func(r *vllmsim.Received) string {
		if strings.Contains(string(r.RawBody), `"content":"owner"`) {
			return "A"
		}
		return "B"
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	const n = 2000
	stream := func(base, key, content string, tokens int) (text string, done bool) {
		body := fmt.Sprintf(`{"model":"sim-llama","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, tokens, content)
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return "", false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var b strings.Builder
		for sc.Scan() {
			line := sc.Text()
			if line == "data: [DONE]" {
				return b.String(), true
			}
			if i := strings.Index(line, `"content":"`); i >= 0 {
				rest := line[i+len(`"content":"`):]
				b.WriteString(rest[:strings.IndexByte(rest, '"')])
			}
		}
		return b.String(), false
	}
	var wg sync.WaitGroup
	texts := make([]string, 4)
	dones := make([]bool, 4)
	var mu sync.Mutex
	finished := 0
	for i, rep := range []int{1, 1, 0, 0} { // etabB: within and one borrower on replica 1, two borrowers on replica 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			txt, done := stream(reps[rep].base, keyB, "borrower", n)
			mu.Lock()
			texts[i], dones[i] = txt, done
			finished++
			mu.Unlock()
		}()
		waitFor(t, time.Minute, "etabB's request runs", func() bool { return sim.RunningBy(who)["B"] == i+1 })
	}
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); stream(reps[0].base, keyA, "owner", 50) }()
	}
	waitFor(t, time.Minute, "etabA runs its 3 reserved slots", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return sim.RunningBy(who)["A"] == 3 || finished > 0
	})
	mu.Lock()
	early := finished
	mu.Unlock()
	if early > 0 {
		t.Fatalf("etabA got its slots only once %d of etabB's answers had ended", early)
	}
	wg.Wait()
	want := ""
	for i := range n {
		want += fmt.Sprintf("tok%d ", i)
	}
	for i := range texts {
		if !dones[i] || texts[i] != want {
			t.Errorf("borrower %d: done %v, %d bytes of %d", i, dones[i], len(texts[i]), len(want))
		}
	}
	if m := scrape(t, reps[1].base); !strings.Contains(m, `llmflow_preemptions_total{pool="sim"} 1`) {
		t.Errorf("replica 1 preempted no borrower for replica 0's owner:\n%s", grepLines(m, "llmflow_preemptions_total"))
	}
}
