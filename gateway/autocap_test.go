package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/go-llmflow/llmflow/autocap"
	"github.com/go-llmflow/llmflow/config"
)

// fakeEngine serves /metrics as set, or fails with 500 when down.
type fakeEngine struct {
	mu   sync.Mutex
	text string
	down bool
	auth string // the last Authorization header
}

func (f *fakeEngine) set(running, waiting int, kv float64, pre int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.text = fmt.Sprintf("vllm:num_requests_running{engine=\"0\"} %d\nvllm:num_requests_waiting{engine=\"0\"} %d\nvllm:kv_cache_usage_perc{engine=\"0\"} %g\nvllm:num_preemptions_total{engine=\"0\"} %d\n",
		running, waiting, kv, pre)
	f.down = false
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = r.Header.Get("Authorization")
	if r.URL.Path == "/health" {
		return
	}
	if r.URL.Path != "/metrics" || f.down {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Write([]byte(f.text))
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pool with capacity = "auto" grows while its engine runs below the KV
// target, shrinks when it preempts, and holds while the metrics cannot be
// read; the reservations and the queue follow C.
func TestAutoCapacity(t *testing.T) {
	eng := &fakeEngine{}
	eng.set(0, 0, 0, 0)
	up := httptest.NewServer(eng)
	defer up.Close()
	e := newEnv(t, []string{up.URL}, "", func(o *Options) {
		p := &o.Config.Pools[0]
		p.Auto = &config.AutoCapacity{Min: 4, Max: 40, KVTarget: 0.9, Interval: 5 * time.Millisecond, Hold: 20 * time.Millisecond, Headroom: -1}
		p.Capacity, p.Headroom = 4, 1
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.gw.Start(ctx)
	pl := e.gw.pools["p"]
	capacity := func() int { return pl.fs.Capacity() }
	queueTotal := func() (int, int) {
		pl.queue.mu.Lock()
		defer pl.queue.mu.Unlock()
		return pl.queue.total, pl.queue.headroom
	}
	decisions := func(d autocap.Decision) int64 { return pl.auto.decisions[d].Load() }

	// The engine runs what the gateway sends at 10 % KV per 4 requests.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			c := capacity()
			eng.mu.Lock()
			frozen := eng.down
			eng.mu.Unlock()
			if !frozen {
				eng.set(c, 0, min(float64(c)*0.025, 1), 0)
			}
		}
	})
	waitFor(t, "C to grow to the KV target (36)", func() bool { return capacity() == 36 })
	close(stop)
	wg.Wait()
	if total, h := queueTotal(); total != 36 || h != 9 {
		t.Fatalf("queue total %d headroom %d, want 36 and 9", total, h)
	}
	s := pl.fs.Snapshot(time.Now())
	if s.Capacity != 36 || s.Reserved != 36 {
		t.Fatalf("snapshot capacity %d reserved %d, want 36 and 36 (0.75 / 0.25 of it)", s.Capacity, s.Reserved)
	}
	for _, r := range s.Rows {
		if want := map[string]int64{"etabA": 27, "etabB": 9}[strings.Join(r.Path, "/")]; len(r.Path) == 1 && r.Reserved != want {
			t.Errorf("%v reserved %d, want %d", r.Path, r.Reserved, want)
		}
	}

	// Unreadable metrics: C holds, never read as zero load.
	eng.mu.Lock()
	eng.down = true
	eng.mu.Unlock()
	before := decisions(autocap.Unknown)
	waitFor(t, "three unknown samples", func() bool { return decisions(autocap.Unknown) >= before+3 })
	if c := capacity(); c != 36 {
		t.Fatalf("C = %d with unreadable metrics, want 36 (held)", c)
	}

	// Preemptions: C shrinks to what the engine ran.
	eng.set(30, 6, 1, 5)
	waitFor(t, "C to shrink to 30", func() bool { return capacity() == 30 })
	if total, h := queueTotal(); total != 30 || h != 7 {
		t.Fatalf("queue total %d headroom %d, want 30 and 7", total, h)
	}
	if !pl.auto.leads.Load() {
		t.Fatal("alone, the gateway does not lead")
	}
	if n := testutil.CollectAndCount(newCapacityCollector(e.gw)); n != int(autocap.Shrink)+2 {
		t.Fatalf("%d capacity series, want %d (decisions and leader)", n, autocap.Shrink+2)
	}
}
