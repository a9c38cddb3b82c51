package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// fakeShare is an admission.CapacityShare whose part the test sets.
type fakeShare struct {
	mu      sync.Mutex
	part    int
	settled bool
	changed chan struct{}
	asked   int // the capacity last divided
}

func newFakeShare(part int, settled bool) *fakeShare {
	return &fakeShare{part: part, settled: settled, changed: make(chan struct{})}
}

func (f *fakeShare) Share(capacity int) (int, bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = capacity
	return f.part, f.settled, f.changed
}

func (f *fakeShare) set(part int, settled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.part, f.settled = part, settled
	close(f.changed)
	f.changed = make(chan struct{})
}

// TestQueue_FollowsShare: a queue whose replica holds a part of the
// pool's capacity lets through only that part; when the part grows, the
// waiters are dispatched at once (no release needed); when it shrinks,
// the requests in flight finish and no new one passes until the count is
// under the new part; a settled part of 0 refuses at once, a joining
// replica's 0 makes requests wait.
func TestQueue_FollowsShare(t *testing.T) {
	sh := newFakeShare(2, true)
	q := newQueue(8, 100, time.Minute, func(queueKey) int { return 0 })
	q.share = sh
	ctx := context.Background()
	for range 2 {
		if err := q.acquire(ctx, queueKey{}, time.Now); err != nil {
			t.Fatal(err)
		}
	}
	if sh.asked != 8 {
		t.Fatalf("the share divided %d, want the pool's capacity 8", sh.asked)
	}
	granted := make(chan error, 10)
	for i := range 3 {
		go func() { granted <- q.acquire(ctx, queueKey{}, time.Now) }()
		gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == i+1 })
	}
	if in, _ := q.lengths(); in != 2 {
		t.Fatalf("in flight %d with a part of 2", in)
	}
	sh.set(4, true) // another replica left: 2 of the 3 waiters go at once
	for range 2 {
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
	}
	if in, w := q.lengths(); in != 4 || w != 1 {
		t.Fatalf("after the part grew to 4: in flight %d, waiting %d; want 4 and 1", in, w)
	}
	sh.set(1, true) // replicas joined: the 4 in flight finish, the waiter waits
	for range 3 {
		q.release(false)
	}
	select {
	case err := <-granted:
		t.Fatalf("granted (%v) with 1 in flight and a part of 1", err)
	case <-time.After(20 * time.Millisecond):
	}
	q.release(false)
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if in, w := q.lengths(); in != 1 || w != 0 {
		t.Fatalf("in flight %d, waiting %d; want 1 and 0", in, w)
	}

	// fewer slots than replicas, and this one holds none: refused at once
	sh.set(0, true)
	q.release(false)
	err := q.acquire(ctx, queueKey{}, time.Now)
	var ra *retryAfter
	if llmflow.ErrorCode(err) != llmflow.EUNAVAILABLE || !errors.As(err, &ra) || !strings.Contains(err.Error(), "holds none") {
		t.Fatalf("no part: %v, want 503 with Retry-After at once", err)
	}

	// joining: 0 for now, the request waits and goes when the part comes
	sh.set(0, false)
	go func() { granted <- q.acquire(ctx, queueKey{}, time.Now) }()
	gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == 1 })
	sh.set(3, true)
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if in, w := q.lengths(); in != 1 || w != 0 {
		t.Fatalf("in flight %d, waiting %d; want 1 and 0", in, w)
	}
}

// sharedSource is the in-process state with a part of each capacity, as
// redisstate.Shared gives replicas.
type sharedSource struct {
	*admission.MemSource
	sh *fakeShare
}

func (s sharedSource) Pool(name string, hl time.Duration, ledger *budgets.Mem) admission.Pool {
	p := s.MemSource.Pool(name, hl, ledger)
	p.Share = s.sh
	return p
}

// TestGatewayQueuePoolShare: a gateway-queue pool whose counters divide
// the capacity among replicas uses this replica's part: none refuses at
// once, a part of one lets a request through.
func TestGatewayQueuePoolShare(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	sh := newFakeShare(0, true)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.Pools[0].Capacity = 2
		o.Config.Pools[0].Engine, _ = engine.For("gateway", "")
		o.Config.Pools[0].QueueTimeout = time.Minute
		o.Admissions = sharedSource{admission.NewMemSource(), sh}
	})
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "holds none") {
		t.Fatalf("no part of the capacity: %d %s, want 503 at once", resp.StatusCode, b)
	}
	sh.set(1, true)
	resp = e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with a part of 1: %d", resp.StatusCode)
	}
	if sh.asked != 2 {
		t.Fatalf("the share divided %d, want the pool's capacity 2", sh.asked)
	}
}

// fakeRoom is an admission.BorrowRoom whose room the test sets; it keeps
// what the queue last told it.
type fakeRoom struct {
	mu                     sync.Mutex
	room                   int
	changed                chan struct{}
	capacity, tops, borrow int
}

func (f *fakeRoom) Room(capacity, tops, borrowers int) (int, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.capacity, f.tops, f.borrow = capacity, tops, borrowers
	return f.room, f.changed
}

func (f *fakeRoom) set(room int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.room = room
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeRoom) told() (capacity, tops, borrowers int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity, f.tops, f.borrow
}

// TestQueue_FollowsBorrowRoom: under reclaim with replicas, the requests
// within their reservation take slots at once and the borrowers get the
// room the replicas' counts leave them, whatever this replica's part:
// a room that grows dispatches waiting borrowers with no release here, one
// that shrinks below the borrowers held takes slots back from them (shed)
// at once, and the queue tells the room what it holds.
func TestQueue_FollowsBorrowRoom(t *testing.T) {
	q := newQueue(8, 100, time.Minute, func(queueKey) int { return fairshare.PriorityBorrowBase })
	q.share = newFakeShare(4, true)
	room := &fakeRoom{room: 1, changed: make(chan struct{})}
	q.borrowRoom = room
	var shedMu sync.Mutex
	sheds, victims := 0, 2
	q.shed = func() bool {
		shedMu.Lock()
		defer shedMu.Unlock()
		if victims == 0 {
			return false
		}
		victims--
		sheds++
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.watch(ctx)
	var a uint64
	for range 5 { // beyond the part of 4: owners always take a slot
		if q.takeReclaiming(&a, nil) {
			t.Fatal("picked without a pick")
		}
	}
	if c, tops, b := room.told(); c != 8 || tops != 5 || b != 0 {
		t.Fatalf("told capacity %d, tops %d, borrowers %d; want 8, 5, 0", c, tops, b)
	}
	if err := q.acquire(ctx, queueKey{org: "b"}, time.Now); err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 2)
	for i := range 2 {
		go func() { granted <- q.acquire(ctx, queueKey{org: "b"}, time.Now) }()
		gatewaytest.WaitFor(t, func() bool { _, w := q.lengths(); return w == i+1 })
	}
	room.set(2) // another replica's owners left: one waiter goes
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if _, _, b := room.told(); b != 3 {
		t.Fatalf("told %d borrowers, want 3 (1 holding, 2 waiting)", b)
	}
	if in, w := q.lengths(); in != 7 || w != 1 {
		t.Fatalf("in flight %d, waiting %d; want 7 and 1", in, w)
	}
	room.set(0) // owners arrived elsewhere: both borrowers give their slots back
	gatewaytest.WaitFor(t, func() bool { shedMu.Lock(); defer shedMu.Unlock(); return sheds == 2 })
	q.release(true)
	q.release(true)
	if in, w := q.lengths(); in != 5 || w != 1 || q.pending != 0 {
		t.Fatalf("in flight %d, waiting %d, pending %d; want 5, 1, 0", in, w, q.pending)
	}
	for range 5 {
		q.releaseTop(false)
	}
	room.set(1) // the last waiter goes
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if _, tops, b := room.told(); tops != 0 || b != 1 {
		t.Fatalf("told tops %d, borrowers %d; want 0 and 1", tops, b)
	}
}
