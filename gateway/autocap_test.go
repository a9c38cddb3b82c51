package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/autocap"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/redisstate"
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
	// the queue follows C in the same step, just after the fair-share
	// pool: wait for that step to end
	waitFor(t, "the queue to follow C", func() bool { total, h := queueTotal(); return total == 36 && h == 9 })
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
	rep := e.gw.FairshareReport().Pools[0]
	if a := rep.Auto; rep.Capacity != 30 || a == nil || a.Min != 4 || a.Max != 40 || !a.Leader || a.Decision == "" {
		t.Fatalf("fair-share report: capacity %d auto %+v, want 30 and min 4, max 40, leader", rep.Capacity, a)
	}
	if n := testutil.CollectAndCount(newCapacityCollector(e.gw)); n != int(autocap.Shrink)+2 {
		t.Fatalf("%d capacity series, want %d (decisions and leader)", n, autocap.Shrink+2)
	}
}

// Two replicas sharing Redis agree on one C: one decides, the other
// follows; when the leader stops, the other takes over from the C in force
// (not from min).
func TestAutoCapacityReplicas(t *testing.T) {
	if os.Getenv("LLMFLOW_SKIP_REDIS") == "1" {
		t.Skip("LLMFLOW_SKIP_REDIS=1")
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis at 127.0.0.1:6379: %v (LLMFLOW_SKIP_REDIS=1 skips)", err)
	}
	prefix := fmt.Sprintf("llmflow-gwtest:%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
		rdb.Close()
	})
	eng := &fakeEngine{}
	eng.set(0, 0, 0, 0)
	up := httptest.NewServer(eng)
	defer up.Close()
	var gws [2]*Gateway
	var cancels [2]context.CancelFunc
	for i, name := range []string{"a", "b"} {
		sh := redisstate.NewShared(rdb, redisstate.SharedOptions{Prefix: prefix, Replica: name})
		t.Cleanup(sh.Close)
		e := newEnv(t, []string{up.URL}, "", func(o *Options) {
			o.Admissions = sh
			p := &o.Config.Pools[0]
			p.Auto = &config.AutoCapacity{Min: 4, Max: 40, KVTarget: 0.9, Interval: 5 * time.Millisecond, Hold: 20 * time.Millisecond, Headroom: -1}
			p.Capacity, p.Headroom = 4, 1
		})
		var ctx context.Context
		ctx, cancels[i] = context.WithCancel(context.Background())
		defer cancels[i]()
		e.gw.Start(ctx)
		gws[i] = e.gw
	}
	capOf := func(i int) int { return gws[i].pools["p"].fs.Capacity() }
	leads := func(i int) bool { return gws[i].pools["p"].auto.leads.Load() }

	// The engine runs the agreed C at 10 % KV per 4 requests.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			eng.set(capOf(0), 0, min(float64(capOf(0))*0.025, 1), 0)
		}
	})
	waitFor(t, "both replicas at 36", func() bool { return capOf(0) == 36 && capOf(1) == 36 })
	close(stop)
	wg.Wait()
	waitFor(t, "one leader", func() bool { return leads(0) != leads(1) })
	leader := 0
	if leads(1) {
		leader = 1
	}
	other := 1 - leader
	cancels[leader]() // the leader stops deciding; its lease expires
	waitFor(t, "the other replica to lead", func() bool { return leads(other) })
	if c := capOf(other); c != 36 {
		t.Fatalf("the new leader's C = %d, want 36 (taken over, not restarted)", c)
	}
	eng.set(30, 6, 1, 5) // preemptions
	waitFor(t, "the new leader to shrink C to 30", func() bool { return capOf(other) == 30 })
	if v, err := rdb.Get(t.Context(), prefix+"counters:{p}:cap").Int(); err != nil || v != 30 {
		t.Fatalf("C in Redis = %d, %v; want 30", v, err)
	}
}

// setTotal: a larger capacity dispatches the waiters at once; a smaller
// one lets none through until the count is under it; with replicas, the
// part of the new total is asked.
func TestQueueSetTotal(t *testing.T) {
	q := newQueue(2, 100, time.Minute, func(queueKey) int { return 0 })
	ctx := context.Background()
	for range 2 {
		if err := q.acquire(ctx, queueKey{}, time.Now); err != nil {
			t.Fatal(err)
		}
	}
	granted := make(chan error, 10)
	for i := range 3 {
		go func() { granted <- q.acquire(ctx, queueKey{}, time.Now) }()
		gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == i+1 })
	}
	q.setTotal(4, 1) // two of the three waiters go at once
	for range 2 {
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
	}
	if in, w := q.lengths(); in != 4 || w != 1 {
		t.Fatalf("in flight %d waiting %d, want 4 and 1", in, w)
	}
	q.setTotal(2, 0)
	q.release(false)
	q.release(false) // 2 in flight: still not under 2
	if in, w := q.lengths(); in != 2 || w != 1 {
		t.Fatalf("in flight %d waiting %d after shrinking to 2, want 2 and 1", in, w)
	}
	q.release(false)
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	sh := newFakeShare(3, true)
	q.share = sh
	q.setTotal(12, 4)
	if sh.asked != 12 || q.capacity != 3 || q.room != 1 {
		t.Fatalf("with a share: asked %d, part %d, room %d; want 12, 3, 1", sh.asked, q.capacity, q.room)
	}
}

// A reload carries an auto pool's capacity into the next generation
// (clamped to its bounds); a pool without one starts at min.
func TestAutoCapacityCarried(t *testing.T) {
	for _, tc := range []struct {
		carry map[string]int
		want  int
	}{{nil, 4}, {map[string]int{"p": 30}, 30}, {map[string]int{"p": 100}, 40}, {map[string]int{"q": 30}, 4}} {
		e := newEnv(t, []string{"http://127.0.0.1:1"}, "", func(o *Options) {
			p := &o.Config.Pools[0]
			p.Auto = &config.AutoCapacity{Min: 4, Max: 40, KVTarget: 0.9, Interval: time.Second, Hold: time.Second, Headroom: -1}
			p.Capacity, p.Headroom = 4, 1
			o.Capacities = tc.carry
		})
		pl := e.gw.pools["p"]
		pl.queue.mu.Lock()
		total := pl.queue.total
		pl.queue.mu.Unlock()
		if got := e.gw.Capacities()["p"]; got != tc.want || pl.fs.Capacity() != tc.want || total != tc.want {
			t.Errorf("carried %v: Capacities %d, pool %d, queue %d; want %d", tc.carry, got, pl.fs.Capacity(), total, tc.want)
		}
	}
}

// failingAgreement is a Redis that does not answer.
type failingAgreement struct{ calls int }

func (f *failingAgreement) Agree(context.Context, int, time.Duration) (int, bool, error) {
	f.calls++
	return 0, false, errors.New("redis: connection refused")
}

// When the replicas cannot agree, C holds, and what the controller would
// have decided alone is dropped: it starts again from the C applied.
func TestAutoCapacityAgreementFails(t *testing.T) {
	eng := &fakeEngine{}
	eng.set(4, 0, 0.1, 0) // far below the KV target: the controller would grow
	up := httptest.NewServer(eng)
	defer up.Close()
	e := newEnv(t, []string{up.URL}, "", func(o *Options) {
		p := &o.Config.Pools[0]
		p.Auto = &config.AutoCapacity{Min: 4, Max: 40, KVTarget: 0.9, Interval: time.Hour, Hold: time.Nanosecond, Headroom: -1}
		p.Capacity, p.Headroom = 4, 1
	})
	pl := e.gw.pools["p"]
	f := &failingAgreement{}
	pl.auto.agree = f
	for range 3 {
		e.gw.capacityTick(context.Background(), pl)
	}
	if f.calls != 3 || pl.fs.Capacity() != 4 || pl.auto.ctl.C() != 4 {
		t.Fatalf("%d calls, pool C %d, controller C %d; want 3, 4, 4", f.calls, pl.fs.Capacity(), pl.auto.ctl.C())
	}
	if n := pl.auto.decisions[autocap.Grow].Load(); n != 3 {
		t.Fatalf("%d grow decisions, want 3 (each dropped)", n)
	}
	pl.auto.agree = nil // alone again: the next step applies
	e.gw.capacityTick(context.Background(), pl)
	if c := pl.fs.Capacity(); c != 5 {
		t.Fatalf("alone: C = %d, want 5", c)
	}
}
