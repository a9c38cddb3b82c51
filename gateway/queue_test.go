package gateway

import (
	"context"
	"errors"
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
