package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// grantOrder acquires a slot for each key in turn (each after the previous one
// is queued) and returns the order in which they were granted.
func grantOrder(t *testing.T, q *queue, keys []queueKey) []string {
	t.Helper()
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for _, k := range keys {
		_, waitingBefore := q.lengths()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.acquire(context.Background(), k, time.Now); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, k.team)
			mu.Unlock()
		}()
		gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == waitingBefore+1 })
	}
	for i := range keys {
		q.release(false) // the slot goes to the best waiter, who keeps it
		gatewaytest.WaitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == i+1 })
	}
	wg.Wait()
	return order
}

func TestQueue_PriorityThenArrival(t *testing.T) {
	prio := map[string]int{"a": 10, "b": 0, "c": 10}
	q := newQueue(1, 100, time.Minute, func(k queueKey) int { return prio[k.team] + k.class })
	if err := q.acquire(context.Background(), queueKey{team: "x"}, time.Now); err != nil {
		t.Fatal(err) // takes the only slot
	}
	keys := []queueKey{{team: "a"}, {team: "c"}, {team: "b", class: 1}, {team: "b"}}
	got := grantOrder(t, q, keys)
	want := []string{"b", "b", "a", "c"} // b (0) before b batch (1) before a, c (10) in arrival order
	if len(got) != len(want) {
		t.Fatalf("order %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}

// With priorities (shared counters: one read of Redis), a dispatch asks
// for every waiting key at once, once, and grants in the same order as
// when it asks key by key.
func TestQueue_OneReadPerDispatch(t *testing.T) {
	prio := map[string]int{"a": 10, "b": 0, "c": 10, "d": 5}
	q := newQueue(1, 100, time.Minute, func(k queueKey) int { return prio[k.team] + k.class })
	var mu sync.Mutex
	var reads []int // keys asked per read
	q.priorities = func(ks []queueKey, out []int) {
		mu.Lock()
		reads = append(reads, len(ks))
		mu.Unlock()
		for i, k := range ks {
			out[i] = prio[k.team] + k.class
		}
	}
	if err := q.acquire(context.Background(), queueKey{team: "x"}, time.Now); err != nil {
		t.Fatal(err)
	}
	keys := []queueKey{{team: "a"}, {team: "c"}, {team: "b", class: 1}, {team: "d"}, {team: "b"}}
	got := grantOrder(t, q, keys)
	want := []string{"b", "b", "d", "a", "c"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// Each waiter's arrival dispatches (nothing free: no read), then each
	// release reads every waiting key once: 5 keys, 4 (b's batch went), 3,
	// 2, 1.
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(reads) != "[5 4 3 2 1]" {
		t.Fatalf("keys per read %v, want [5 4 3 2 1] (one read per dispatch)", reads)
	}
}

// A waiting request's priority is asked again at dispatch: when its
// organisation's standing changes it moves ahead.
func TestQueue_PriorityRecomputedWhileWaiting(t *testing.T) {
	var aPrio atomic.Int64
	aPrio.Store(20)
	q := newQueue(1, 100, time.Minute, func(k queueKey) int {
		if k.team == "a" {
			return int(aPrio.Load())
		}
		return 10
	})
	q.acquire(context.Background(), queueKey{team: "x"}, time.Now)
	granted := make(chan string, 2)
	for _, team := range []string{"a", "b"} {
		go func() {
			q.acquire(context.Background(), queueKey{team: team}, time.Now)
			granted <- team
		}()
		gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return (team == "a" && w == 1) || w == 2 })
	}
	aPrio.Store(0) // a's organisation dropped back under its reservation
	q.release(false)
	if first := <-granted; first != "a" {
		t.Fatalf("%s granted first, want a (its priority improved while waiting)", first)
	}
	q.release(false)
	<-granted
}

func TestQueue_TimeoutAndFull(t *testing.T) {
	q := newQueue(1, 1, 20*time.Millisecond, func(queueKey) int { return 0 })
	q.acquire(context.Background(), queueKey{}, time.Now)
	errc := make(chan error, 1)
	go func() { errc <- q.acquire(context.Background(), queueKey{}, time.Now) }()
	gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == 1 })
	// the queue holds one: the next is refused at once
	err := q.acquire(context.Background(), queueKey{}, time.Now)
	var ra *retryAfter
	if llmflow.ErrorCode(err) != llmflow.EUNAVAILABLE || !errors.As(err, &ra) {
		t.Fatalf("full queue: %v, want 503 with Retry-After", err)
	}
	err = <-errc
	if llmflow.ErrorCode(err) != llmflow.EUNAVAILABLE || !errors.As(err, &ra) || ra.after != 20*time.Millisecond {
		t.Fatalf("timeout: %v, want 503 with Retry-After", err)
	}
	if in, w := q.lengths(); in != 1 || w != 0 {
		t.Fatalf("after timeout: in flight %d waiting %d, want 1 and 0", in, w)
	}
}

func TestQueue_ClientLeavesWhileWaiting(t *testing.T) {
	q := newQueue(1, 10, time.Minute, func(queueKey) int { return 0 })
	q.acquire(context.Background(), queueKey{}, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- q.acquire(ctx, queueKey{}, time.Now) }()
	gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want canceled", err)
	}
	q.release(false)
	if in, w := q.lengths(); in != 0 || w != 0 {
		t.Fatalf("in flight %d waiting %d, want 0 and 0", in, w)
	}
}

// Many goroutines through a small queue: never more than capacity in
// flight, everything returns to zero.
func TestQueue_Concurrent(t *testing.T) {
	const capacity = 3
	q := newQueue(capacity, 1000, time.Minute, func(k queueKey) int { return k.class })
	var cur, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.acquire(context.Background(), queueKey{team: "t", class: i % 2}, time.Now); err != nil {
				t.Error(err)
				return
			}
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Microsecond)
			cur.Add(-1)
			q.release(false)
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > capacity {
		t.Errorf("%d in flight at once, capacity %d", p, capacity)
	}
	if in, w := q.lengths(); in != 0 || w != 0 {
		t.Errorf("in flight %d waiting %d at the end", in, w)
	}
}

// Held borrowers (priority ≥ 10 with a held key) are granted a slot only
// while the headroom stays free; requests within their reservation and
// borrowers that are not held may use it.
func TestQueue_HeadroomForHeldBorrowers(t *testing.T) {
	prio := map[string]int{"owner": 0, "borrower": 12}
	q := newQueue(4, 100, time.Minute, func(k queueKey) int { return prio[k.team] }).withHeadroom(2)
	ctx := context.Background()
	held := queueKey{team: "borrower", held: true}
	for range 2 {
		if err := q.acquire(ctx, held, time.Now); err != nil {
			t.Fatal(err)
		}
	}
	granted := make(chan error, 4)
	go func() { granted <- q.acquire(ctx, held, time.Now) }()
	gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == 1 })
	// not held: the headroom is open to it
	if err := q.acquire(ctx, queueKey{team: "borrower"}, time.Now); err != nil {
		t.Fatal(err)
	}
	// an owner gets the last slot though the held borrower waits first
	if err := q.acquire(ctx, queueKey{team: "owner", held: true}, time.Now); err != nil {
		t.Fatal(err)
	}
	if in, w := q.lengths(); in != 4 || w != 1 {
		t.Fatalf("in flight %d, waiting %d: want 4, 1", in, w)
	}
	q.release(false)
	q.release(false) // 2 in flight: not below capacity − headroom
	select {
	case err := <-granted:
		t.Fatalf("a held borrower was granted a slot of the headroom (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	q.release(false) // 1 in flight: the held borrower goes
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
}

// A preempted request waiting to resume goes before the requests of its
// priority that arrived after it, not behind them.
func TestQueue_ResumeKeepsArrival(t *testing.T) {
	q := newQueue(1, 100, time.Minute, func(queueKey) int { return 10 })
	ctx := context.Background()
	k := queueKey{team: "a"}
	var first uint64
	if err := q.acquireOr(ctx, k, time.Now, nil, &first); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	go func() { q.acquire(ctx, k, time.Now); order <- "second" }()
	gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == 1 })
	// the first is preempted: its slot goes to the second, and it waits to
	// resume with its own arrival
	q.mu.Lock()
	q.reclaiming()
	q.mu.Unlock()
	q.release(true)
	if got := <-order; got != "second" {
		t.Fatal(got)
	}
	go func() { q.resume(ctx, k, first, time.Now); order <- "first, resumed" }()
	gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == 1 })
	go func() { q.acquire(ctx, k, time.Now); order <- "third" }()
	gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == 2 })
	q.release(false) // the second ends
	if got := <-order; got != "first, resumed" {
		t.Fatalf("%s got the slot before the resumed first", got)
	}
	q.release(false)
	<-order
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending != 0 || q.inflight != 1 || q.waiting != 0 {
		t.Errorf("pending %d, in flight %d, waiting %d", q.pending, q.inflight, q.waiting)
	}
}

// takeReclaiming takes a slot whatever the count and picks a victim only
// for what the engine lacks beyond the slots already coming back.
func TestQueue_TakeReclaiming(t *testing.T) {
	q := newQueue(2, 100, time.Minute, func(queueKey) int { return 0 })
	picks := 0
	pick := func() bool { picks++; return true }
	var a uint64
	for range 2 {
		if q.takeReclaiming(&a, pick) {
			t.Fatal("picked with a free slot")
		}
	}
	p1 := q.takeReclaiming(&a, pick)
	p2 := q.takeReclaiming(&a, pick)
	if !p1 || !p2 || picks != 2 {
		t.Fatalf("%d picks for two requests beyond the capacity", picks)
	}
	if q.takeReclaiming(&a, func() bool { return false }) {
		t.Fatal("no victim, but picked")
	}
	q.release(true)
	q.release(true)
	if in, _ := q.lengths(); in != 3 || q.pending != 0 {
		t.Fatalf("in flight %d, pending %d", in, q.pending)
	}
	// a victim that took its slot at once (a team borrowing within its
	// organisation's reservation) gives back a top slot and its pending
	q.releaseTop(false)
	if !q.takeReclaiming(&a, pick) {
		t.Fatal("no pick beyond the capacity")
	}
	q.releaseTop(true)
	if in, _ := q.lengths(); in != 2 || q.pending != 0 || q.tops != 4 {
		t.Fatalf("in flight %d, pending %d, tops %d; want 2, 0, 4", in, q.pending, q.tops)
	}
}
