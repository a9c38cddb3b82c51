package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// TestThreeReplicasGatewayQueue: three replicas on one Redis in front of
// an engine without a priority scheduler (scheduler = "gateway", capacity
// 4). 24 streams sent at once, 8 through each replica: the engine never
// runs more than 4 at a time — one gateway's capacity, divided among the
// replicas (2, 1, 1) — and every stream is answered in full (the others
// wait in the replicas' queues). Three gateways each with its own queue
// would send it 12.
func TestThreeReplicasGatewayQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three gateways and a redis-server")
	}
	rds := startRedis(t, freeAddr(t))
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: 10 * time.Millisecond,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 256, KVBlocks: 1 << 16}})
	var running, peak atomic.Int64
	simSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			sim.ServeHTTP(w, r)
			return
		}
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		// A request leaves the engine when its last event is written: the
		// gateway may free its slot as soon as it reads [DONE], before this
		// handler has returned.
		dw := &doneWriter{ResponseWriter: w, done: func() { running.Add(-1) }}
		defer dw.finish()
		sim.ServeHTTP(dw, r)
	}))
	t.Cleanup(func() { simSrv.Close(); sim.Close() })
	dir := t.TempDir()
	cfg := replicasConfig(t, dir, simSrv.URL, redisAt(rds.addr), "pool \"sim\" {\n  capacity  = 4\n  scheduler = \"gateway\"\n}")
	reps := startReplicas(t, cfg, dir, 3)
	key := createKey(t, reps[0].base)
	waitFor(t, 10*time.Second, "every replica sees 3 live replicas (leases)", func() bool {
		for _, r := range reps {
			if h := healthz(t, r.base); h.Shared == nil || h.Shared.Replicas != 3 {
				return false
			}
		}
		return true
	})

	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for i := range 24 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, reps[i%3].base+"/v1/chat/completions",
				strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"count"}]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil || !bytes.Contains(b, []byte("data: [DONE]")) {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %v %.200s", resp.StatusCode, err, b))
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of 24 streams not answered in full; first: %v", n, firstErr.Load())
	}
	if p := peak.Load(); p > 4 {
		t.Errorf("the engine ran %d requests at once, the pool's capacity is 4", p)
	} else if p < 2 {
		t.Errorf("the engine ran at most %d at once: the replicas hardly used the capacity", p)
	}
	t.Logf("peak at the engine: %d of capacity 4", peak.Load())
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

// doneWriter calls done once, before writing the stream's [DONE] (or when
// the handler returns without it).
type doneWriter struct {
	http.ResponseWriter
	done func()
	once sync.Once
}

func (d *doneWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("data: [DONE]")) {
		d.once.Do(d.done)
	}
	return d.ResponseWriter.Write(p)
}

func (d *doneWriter) Flush() {
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (d *doneWriter) finish() { d.once.Do(d.done) }
