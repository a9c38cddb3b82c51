package gateway

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/fairshare"
)

// queueKey groups waiting requests that always have the same priority and
// limit: the same leaf of the account tree, the same class, and whether,
// borrowing, they must leave the pool's headroom free.
type queueKey struct {
	org, team, project, owner string
	class                     int
	// held: a borrower with this key is granted a slot only while the
	// pool's headroom stays free (reclaim = "holdback", or a request the
	// gateway cannot resume under "preempt").
	held bool
}

// waiter is one request waiting for a slot.
type waiter struct {
	key     queueKey
	arrival uint64        // admission order, for (priority, arrival)
	ready   chan struct{} // closed when the slot is granted
	granted bool
	top     bool // within its organisation's reservation when it began to wait
	elem    *list.Element
}

// queue counts a pool's engine slots held by this gateway and makes the
// requests that may not have one now wait, served in (priority, arrival)
// order. Engines without a priority scheduler (scheduler = "gateway") get
// every request through it: at most capacity in flight. Under reclaim =
// "preempt" or "holdback" the other pools get their borrowers through it
// (acquire) while requests within their organisation's reservation take a
// slot at once (take) and wait, if they must, in the engine, ahead of
// everyone. Nothing has been sent for a waiting request, so its priority is
// asked again at every dispatch: a request whose organisation dropped back
// under its reservation moves ahead at once.
//
// A borrower whose key is held is granted a slot only while headroom slots
// stay free: what a returning owner is sure to find at once.
//
// Waiters are kept in one FIFO per key, so a dispatch compares only the
// heads: O(leaves), not O(waiting).
//
// With replicas sharing the pool's counters (share set), each replica's
// queue lets through only its part of the capacity (and of the headroom),
// so that all replicas together send the engine no more than one gateway
// would; the part follows the live replicas without a restart (read at each
// acquire and release, and by the waiters when it changes: a part that
// grows dispatches them at once). Under reclaim (borrowRoom set), where
// requests within their organisation's reservation take a slot at once
// on whichever replica they reach, the borrowers get instead this
// replica's part of what those requests leave on all replicas
// (admission.BorrowRoom): the capacity is then tops + that room, followed
// while it changes (watch), and borrowers beyond it give their slots back
// (shed).
type queue struct {
	total    int                     // the pool's capacity
	headroom int                     // of total, kept free of held borrowers
	share    admission.CapacityShare // nil: alone, capacity = total
	capacity int                     // this replica's part of total, or tops + borrowers' room (mu)
	part     int                     // this replica's part of total (mu)
	room     int                     // this replica's part of headroom (mu)
	// borrowRoom, when not nil (with share, under reclaim), gives the
	// borrowers their part of the room the requests within reservations
	// leave on all replicas; shed, when not nil, takes a slot back from
	// one of this replica's borrowers running in the engine (false: none).
	borrowRoom admission.BorrowRoom
	shed       func() bool
	settled    bool // capacity is final, not 0 while joining (mu)
	maxWait    int
	timeout    time.Duration
	priority   func(k queueKey) int // current priority of a leaf and class
	// priorities is priority of every key of ks into out at once: one
	// read of shared counters for a whole dispatch (peekAll); newQueue
	// asks priority key by key.
	priorities func(ks []queueKey, out []int)
	heads      []queueKey // dispatch's scratch (mu)
	prios      []int

	mu       sync.Mutex
	inflight int
	tops     int // of inflight, the slots taken at once (takeReclaiming)
	waiting  int
	seq      uint64
	fifos    map[queueKey]*list.List
	// topWaiting counts the waiters within their organisation's
	// reservation; pending the slots of preempted requests not given back
	// yet (reclaim = "preempt": reclaim).
	topWaiting, pending int

	// waitSeconds observes how long granted requests waited; may be nil.
	waitSeconds func(d time.Duration)
}

func newQueue(capacity, maxWait int, timeout time.Duration, priority func(queueKey) int) *queue {
	return &queue{total: capacity, capacity: capacity, part: capacity, settled: true, maxWait: maxWait, timeout: timeout,
		priority: priority, fifos: make(map[queueKey]*list.List),
		priorities: func(ks []queueKey, out []int) {
			for i, k := range ks {
				out[i] = priority(k)
			}
		}}
}

// withHeadroom sets the slots held borrowers leave free.
func (q *queue) withHeadroom(h int) *queue {
	q.headroom, q.room = h, h
	return q
}

var errQueueFull = llmflow.Errorf(llmflow.EUNAVAILABLE, "the pool's queue is full; retry later")

// errNoShare refuses at once, rather than after the queue timeout, a
// request to a replica that holds none of the pool's capacity (fewer
// slots than live replicas): another replica may have a slot now.
var errNoShare = llmflow.Errorf(llmflow.EUNAVAILABLE,
	"the pool's capacity is shared among the gateway replicas and this one holds none of it (fewer slots than replicas); retry later")

// follow sets the capacity to this replica's current part (with a
// borrowRoom: its top requests and the borrowers' room) and dispatches
// waiters if it grew, takes slots back from the borrowers beyond it
// (shed), and returns the channel closed at the next change (nil, never
// closed, without a share). Called with mu.
func (q *queue) follow() <-chan struct{} {
	if q.share == nil {
		return nil
	}
	part, settled, changed := q.share.Share(q.total)
	q.settled, q.part = settled, part
	capacity := part
	if q.borrowRoom != nil {
		var room int
		room, changed = q.borrowRoom.Room(q.total, q.tops, q.inflight-q.tops+q.waiting)
		capacity = q.tops + room
	}
	if room := q.headroom * part / max(q.total, 1); capacity != q.capacity || room != q.room {
		q.capacity, q.room = capacity, room
		q.dispatch()
	}
	for q.shed != nil && q.inflight-q.capacity-q.pending > 0 && q.shed() {
		q.pending++
	}
	return changed
}

// watch follows the borrowers' room until ctx ends, also while no request
// comes or goes here: a room that grows dispatches the waiters, one that
// shrinks takes slots back (follow).
func (q *queue) watch(ctx context.Context) {
	for {
		q.mu.Lock()
		changed := q.follow()
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// limit is how many slots in flight a waiter with key k and priority p may
// find busy and still be granted one. Called with mu.
func (q *queue) limit(k queueKey, p int) int {
	if k.held && p >= fairshare.PriorityBorrowBase {
		return q.capacity - q.room
	}
	return q.capacity
}

// acquire returns once the request may be sent: at once while fewer than
// capacity requests are in flight and nobody waits, else after waiting its
// turn. It fails with 503 (and Retry-After) when the queue is full or the
// queue timeout passes, and with ctx's error when the client leaves.
func (q *queue) acquire(ctx context.Context, k queueKey, now func() time.Time) error {
	return q.acquireOr(ctx, k, now, nil, nil)
}

// acquireOr is acquire; beforeWait, when not nil, runs (with the queue
// locked) when the request would have to wait, with its current priority,
// and refuses it with its error instead. arrival, when not nil, gets the
// request's order of admission (for resume).
func (q *queue) acquireOr(ctx context.Context, k queueKey, now func() time.Time, beforeWait func(prio int) error, arrival *uint64) error {
	q.mu.Lock()
	changed := q.follow()
	q.seq++
	if arrival != nil {
		*arrival = q.seq
	}
	if q.waiting == 0 && (q.inflight < q.capacity-q.room || (q.inflight < q.capacity && (!k.held || q.priority(k) < fairshare.PriorityBorrowBase))) {
		q.inflight++
		q.mu.Unlock()
		return nil
	}
	if q.part == 0 && q.settled {
		q.mu.Unlock()
		return withRetryAfter(errNoShare, time.Second)
	}
	if q.waiting >= q.maxWait {
		q.mu.Unlock()
		return withRetryAfter(errQueueFull, time.Second)
	}
	p := q.priority(k)
	if beforeWait != nil {
		if err := beforeWait(p); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	return q.wait(ctx, k, p, q.seq, q.timeout, changed, now)
}

// resume makes a request whose slot was taken back (reclaim = "preempt")
// wait for one again, ahead of the requests of its priority that arrived
// after it did (arrival is its first admission's order). It waits
// as long as ctx lets it: its client has been answering for a while.
func (q *queue) resume(ctx context.Context, k queueKey, arrival uint64, now func() time.Time) error {
	q.mu.Lock()
	changed := q.follow()
	return q.wait(ctx, k, q.priority(k), arrival, 0, changed, now)
}

// wait queues a waiter and waits for its slot, at most timeout (0: no
// limit but ctx). Called with mu, which it releases.
func (q *queue) wait(ctx context.Context, k queueKey, p int, arrival uint64, timeout time.Duration, changed <-chan struct{}, now func() time.Time) error {
	w := &waiter{key: k, arrival: arrival, ready: make(chan struct{}), top: p < fairshare.PriorityBorrowBase}
	f := q.fifos[k]
	if f == nil {
		f = list.New()
		q.fifos[k] = f
	}
	// Keep each FIFO in arrival order: a resumed request goes before the
	// later arrivals of its key.
	at := f.Back()
	for at != nil && at.Value.(*waiter).arrival > arrival {
		at = at.Prev()
	}
	if at == nil {
		w.elem = f.PushFront(w)
	} else {
		w.elem = f.InsertAfter(w, at)
	}
	q.waiting++
	if w.top {
		q.topWaiting++
	}
	q.dispatch() // a slot may be free for it (others waiting could not use it)
	q.mu.Unlock()

	start := now()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
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
		case <-expired:
			if q.leave(w) {
				return withRetryAfter(llmflow.Errorf(llmflow.EUNAVAILABLE,
					"the pool is saturated: no slot within the queue timeout of %s; retry later", q.timeout), q.timeout)
			}
			return nil // granted in the meantime
		case <-ctx.Done():
			if q.leave(w) {
				return ctx.Err()
			}
			q.release(false) // granted in the meantime: give the slot back
			return ctx.Err()
		}
	}
}

// takeReclaiming counts one more request in flight at once, whatever the
// count: a request within its organisation's reservation on an engine that
// queues by priority itself (it waits there, if it must, ahead of every
// borrower); releaseTop gives its slot back. arrival gets its order of
// admission. When the engine has no slot for it, beyond the slots already
// being taken back, pick (when not nil) may take one from a borrower:
// picked says whether it did. With replicas (borrowRoom), the slot may
// be one of another replica's borrowers: that replica's room shrinks,
// and it takes the slot back itself.
func (q *queue) takeReclaiming(arrival *uint64, pick func() bool) (picked bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	*arrival = q.seq
	q.inflight++
	q.tops++
	q.follow()
	if q.inflight-q.capacity-q.pending <= 0 {
		return false
	}
	if pick != nil && pick() {
		q.pending++
		return true
	}
	return false
}

// leave removes a waiter that gave up; false when it was granted first.
func (q *queue) leave(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.granted {
		return false
	}
	q.unlink(w)
	return true
}

// unlink takes w out of its FIFO. Called with mu.
func (q *queue) unlink(w *waiter) {
	f := q.fifos[w.key]
	f.Remove(w.elem)
	if f.Len() == 0 {
		delete(q.fifos, w.key)
	}
	q.waiting--
	if w.top {
		q.topWaiting--
	}
}

// release frees a slot and hands it to the best waiter, if any. victim is
// true for the slot of a request reclaim picked to give its slot back (it
// may have finished on its own meanwhile).
func (q *queue) release(victim bool) { q.free(victim, false) }

// releaseTop is release for the slot of a request takeReclaiming counted.
func (q *queue) releaseTop(victim bool) { q.free(victim, true) }

// free gives a slot back: victim when it was counted as coming back (a
// preempted request), top when takeReclaiming counted it.
func (q *queue) free(victim, top bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inflight--
	if victim {
		q.pending--
	}
	if top {
		q.tops--
	}
	q.follow()
	q.dispatch()
}

// reclaiming counts one more slot being taken back. Called with mu (from
// acquireOr's beforeWait).
func (q *queue) reclaiming() { q.pending++ }

// shortOfSlots is how many waiters within their organisation's reservation
// (the one about to wait included when it is one) would still wait once the
// slots being taken back are free. Called with mu.
func (q *queue) shortOfSlots(self bool) int {
	n := q.topWaiting - q.pending
	if self {
		n++
	}
	return n
}

// dispatch grants free slots in (priority, arrival) order, skipping the
// held borrowers while the headroom is all that is free. Called with mu.
//
// The priorities are asked once per dispatch, for every waiting key at
// once (priorities): a slot it grants is counted by its request after the
// queue's lock is let go, so no grant of this dispatch could change them.
func (q *queue) dispatch() {
	if q.waiting == 0 || q.inflight >= q.capacity {
		return
	}
	ks := q.heads[:0]
	for k := range q.fifos {
		ks = append(ks, k)
	}
	if cap(q.prios) < len(ks) {
		q.prios = make([]int, len(ks))
	}
	ps := q.prios[:len(ks)]
	q.priorities(ks, ps)
	for q.waiting > 0 && q.inflight < q.capacity {
		var best *waiter
		bestPrio := 0
		for i, k := range ks {
			f := q.fifos[k]
			if f == nil {
				continue // emptied by this dispatch
			}
			w := f.Front().Value.(*waiter)
			p := ps[i]
			if q.inflight >= q.limit(k, p) {
				continue
			}
			if best == nil || p < bestPrio || (p == bestPrio && w.arrival < best.arrival) {
				best, bestPrio = w, p
			}
		}
		if best == nil {
			break // only held borrowers wait, and only the headroom is free
		}
		q.unlink(best)
		q.inflight++
		best.granted = true
		close(best.ready)
	}
	clear(ks)
	q.heads = ks
}

// lengths reports the requests in flight and waiting.
func (q *queue) lengths() (inflight, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight, q.waiting
}

// peekAll is a queue's priorities over fs: one read of its counters for
// every waiting key. It is called with the queue's lock, which also
// guards its buffers.
func peekAll(fs *fairshare.Pool) func(ks []queueKey, out []int) {
	var (
		paths   []fairshare.Path
		classes []int
		scratch fairshare.PeekScratch
	)
	return func(ks []queueKey, out []int) {
		paths, classes = paths[:0], classes[:0]
		for _, k := range ks {
			paths = append(paths, fairshare.Path{Org: k.org, Team: k.team, Project: k.project, User: k.owner})
			classes = append(classes, k.class)
		}
		fs.PeekAll(paths, classes, out, &scratch)
		clear(paths)
	}
}
