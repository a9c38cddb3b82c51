package gateway

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admission"
)

// queueKey groups waiting requests that always have the same priority:
// the same leaf of the account tree and the same class.
type queueKey struct {
	org, team, project, owner string
	class                     int
}

// waiter is one request waiting for a slot.
type waiter struct {
	key     queueKey
	arrival uint64        // admission order, for (priority, arrival)
	ready   chan struct{} // closed when the slot is granted
	granted bool
	elem    *list.Element
}

// queue is a pool's gateway-side admission queue, for engines without a
// priority scheduler (scheduler = "gateway"): at most capacity requests in
// flight; the others wait and are served in (priority, arrival) order.
// Nothing has been sent for a waiting request, so its priority is asked
// again at every dispatch: a request whose organisation dropped back under
// its reservation moves ahead at once.
//
// Waiters are kept in one FIFO per (leaf, class), so a dispatch compares
// only the heads: O(leaves), not O(waiting).
//
// With replicas sharing the pool's counters (share set), each replica's
// queue lets through only its part of the capacity, so that all replicas
// together send the engine no more than one gateway would; the part
// follows the live replicas without a restart (read at each acquire and
// release, and by the waiters when it changes: a part that grows
// dispatches them at once).
type queue struct {
	total    int                     // the pool's capacity
	share    admission.CapacityShare // nil: alone, capacity = total
	capacity int                     // this replica's part of total (mu)
	settled  bool                    // capacity is final, not 0 while joining (mu)
	maxWait  int
	timeout  time.Duration
	priority func(k queueKey) int // current priority of a leaf and class

	mu       sync.Mutex
	inflight int
	waiting  int
	seq      uint64
	fifos    map[queueKey]*list.List

	// waitSeconds observes how long granted requests waited; may be nil.
	waitSeconds func(d time.Duration)
}

func newQueue(capacity, maxWait int, timeout time.Duration, priority func(queueKey) int) *queue {
	return &queue{total: capacity, capacity: capacity, settled: true, maxWait: maxWait, timeout: timeout, priority: priority, fifos: make(map[queueKey]*list.List)}
}

var errQueueFull = llmflow.Errorf(llmflow.EUNAVAILABLE, "the pool's queue is full; retry later")

// errNoShare refuses at once, rather than after the queue timeout, a
// request to a replica that holds none of the pool's capacity (fewer
// slots than live replicas): another replica may have a slot now.
var errNoShare = llmflow.Errorf(llmflow.EUNAVAILABLE,
	"the pool's capacity is shared among the gateway replicas and this one holds none of it (fewer slots than replicas); retry later")

// follow sets the capacity to this replica's current part and dispatches
// waiters if it grew; it returns the channel closed at the next change
// (nil, never closed, without a share). Called with mu.
func (q *queue) follow() <-chan struct{} {
	if q.share == nil {
		return nil
	}
	part, settled, changed := q.share.Share(q.total)
	q.settled = settled
	if part != q.capacity {
		q.capacity = part
		q.dispatch()
	}
	return changed
}

// acquire returns once the request may be sent: at once while fewer than
// capacity requests are in flight and nobody waits, else after waiting its
// turn. It fails with 503 (and Retry-After) when the queue is full or the
// queue timeout passes, and with ctx's error when the client leaves.
func (q *queue) acquire(ctx context.Context, k queueKey, now func() time.Time) error {
	return q.acquireOr(ctx, k, now, nil)
}

// acquireOr is acquire; beforeWait, when not nil, runs when the request
// would have to wait (no free slot) and refuses it with its error instead.
func (q *queue) acquireOr(ctx context.Context, k queueKey, now func() time.Time, beforeWait func() error) error {
	q.mu.Lock()
	changed := q.follow()
	if q.inflight < q.capacity && q.waiting == 0 {
		q.inflight++
		q.mu.Unlock()
		return nil
	}
	if q.capacity == 0 && q.settled {
		q.mu.Unlock()
		return withRetryAfter(errNoShare, time.Second)
	}
	if q.waiting >= q.maxWait {
		q.mu.Unlock()
		return withRetryAfter(errQueueFull, time.Second)
	}
	if beforeWait != nil {
		if err := beforeWait(); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	q.seq++
	w := &waiter{key: k, arrival: q.seq, ready: make(chan struct{})}
	f := q.fifos[k]
	if f == nil {
		f = list.New()
		q.fifos[k] = f
	}
	w.elem = f.PushBack(w)
	q.waiting++
	q.mu.Unlock()

	start := now()
	t := time.NewTimer(q.timeout)
	defer t.Stop()
	for {
		select {
		case <-w.ready:
			if q.waitSeconds != nil {
				q.waitSeconds(now().Sub(start))
			}
			return nil
		case <-changed: // this replica's part changed: a larger one dispatches
			q.mu.Lock()
			changed = q.follow()
			q.mu.Unlock()
		case <-t.C:
			if q.leave(w) {
				return withRetryAfter(llmflow.Errorf(llmflow.EUNAVAILABLE,
					"the pool is saturated: no slot within the queue timeout of %s; retry later", q.timeout), q.timeout)
			}
			return nil // granted in the meantime
		case <-ctx.Done():
			if q.leave(w) {
				return ctx.Err()
			}
			q.release() // granted in the meantime: give the slot back
			return ctx.Err()
		}
	}
}

// leave removes a waiter that gave up; false when it was granted first.
func (q *queue) leave(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.granted {
		return false
	}
	f := q.fifos[w.key]
	f.Remove(w.elem)
	if f.Len() == 0 {
		delete(q.fifos, w.key)
	}
	q.waiting--
	return true
}

// release frees a slot and hands it to the best waiter, if any.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inflight--
	q.follow()
	q.dispatch()
}

// dispatch grants free slots in (priority, arrival) order. Called with mu.
func (q *queue) dispatch() {
	for q.inflight < q.capacity && q.waiting > 0 {
		var best *waiter
		bestPrio := 0
		for k, f := range q.fifos {
			w := f.Front().Value.(*waiter)
			p := q.priority(k)
			if best == nil || p < bestPrio || (p == bestPrio && w.arrival < best.arrival) {
				best, bestPrio = w, p
			}
		}
		f := q.fifos[best.key]
		f.Remove(best.elem)
		if f.Len() == 0 {
			delete(q.fifos, best.key)
		}
		q.waiting--
		q.inflight++
		best.granted = true
		close(best.ready)
	}
}

// lengths reports the requests in flight and waiting.
func (q *queue) lengths() (inflight, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight, q.waiting
}
