package accounting_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/spool"
)

// dedupWriter is a store in miniature: it keeps the first record of each
// RequestID (as the real stores do), counts the writes it was offered
// again, and fails while down is set. failAfterCommit makes a write
// commit and then report an error (a timeout after the commit).
type dedupWriter struct {
	down            atomic.Bool
	failAfterCommit atomic.Bool
	mu              sync.Mutex
	order           []string
	seen            map[string]int
}

func (d *dedupWriter) WriteRecords(ctx context.Context, rs []llmflow.Record) error {
	if d.down.Load() {
		return errors.New("store down")
	}
	d.mu.Lock()
	if d.seen == nil {
		d.seen = map[string]int{}
	}
	for _, r := range rs {
		if d.seen[r.RequestID] == 0 {
			d.order = append(d.order, r.RequestID)
		}
		d.seen[r.RequestID]++
	}
	d.mu.Unlock()
	if d.failAfterCommit.Load() {
		return errors.New("timeout after commit")
	}
	return nil
}

func (d *dedupWriter) stored() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.order...)
}

func openSpool(t *testing.T, dir string, o spool.Options) *spool.Spool {
	t.Helper()
	sp, _, err := spool.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func wantInOrder(t *testing.T, got []string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%d records stored, want %d", len(got), n)
	}
	for i, id := range got {
		if want := rec(i).RequestID; id != want {
			t.Fatalf("record %d is %s, want %s (order)", i, id, want)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

func TestSpooled_StoreDownThenBack(t *testing.T) {
	dir := t.TempDir()
	w := &dedupWriter{}
	w.down.Store(true)
	q := accounting.New(w, accounting.Options{BatchSize: 7, FlushInterval: 5 * time.Millisecond, Spool: openSpool(t, dir, spool.Options{})})
	for i := range 100 {
		if !q.Enqueue(rec(i)) {
			t.Fatalf("record %d refused", i)
		}
	}
	waitFor(t, "a failed write", func() bool { return q.Health().StoreError != "" })
	h := q.Health()
	if h.SpoolRecords != 100 || h.FailingSince.IsZero() || h.StoreErrors == 0 {
		t.Fatalf("health while the store is down: %+v", h)
	}
	w.down.Store(false)
	waitFor(t, "the spool to drain", func() bool { return q.Len() == 0 })
	if h := q.Health(); h.StoreError != "" || h.SpoolRecords != 0 {
		t.Fatalf("health after recovery: %+v", h)
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantInOrder(t, w.stored(), 100)
	if written, failed, dropped := q.Counts(); written != 100 || failed != 0 || dropped != 0 {
		t.Fatalf("counts %d %d %d", written, failed, dropped)
	}
}

// A restart with the store still down keeps everything in the spool; the
// next queue writes it, and a write committed but reported failed is
// offered again and stored once.
func TestSpooled_CloseWhileStoreDownThenRestart(t *testing.T) {
	dir := t.TempDir()
	w := &dedupWriter{}
	w.down.Store(true)
	q := accounting.New(w, accounting.Options{BatchSize: 10, FlushInterval: time.Hour, Spool: openSpool(t, dir, spool.Options{})})
	for i := range 35 {
		q.Enqueue(rec(i))
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatalf("close with the store down: %v (nothing is lost: it is spooled)", err)
	}
	if _, failed, _ := q.Counts(); failed != 0 {
		t.Fatalf("%d failed", failed)
	}
	w.down.Store(false)
	w.failAfterCommit.Store(true)
	sp, recov, err := spool.Open(dir, spool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if recov.Records != 35 {
		t.Fatalf("recovered %d records, want 35", recov.Records)
	}
	q2 := accounting.New(w, accounting.Options{BatchSize: 10, FlushInterval: time.Hour, Spool: sp}) // no tick: the start drains
	waitFor(t, "the first batch offered", func() bool { return len(w.stored()) >= 10 })
	w.failAfterCommit.Store(false)
	for i := 35; i < 50; i++ {
		q2.Enqueue(rec(i))
	}
	if err := q2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantInOrder(t, w.stored(), 50)
	w.mu.Lock()
	again := 0
	for _, n := range w.seen {
		again += n - 1
	}
	w.mu.Unlock()
	if again == 0 {
		t.Fatal("no batch was offered again after an ambiguous failure: the test did not test that")
	}
}

// When the spool refuses records (full here; a full disk alike), they are
// held in memory in order and moved back into the spool, or written
// straight to the store, once possible; beyond QueueSize they are dropped
// and counted.
func TestSpooled_SpoolRefusesThenMemory(t *testing.T) {
	dir := t.TempDir()
	w := &dedupWriter{}
	w.down.Store(true)
	q := accounting.New(w, accounting.Options{QueueSize: 50, BatchSize: 5, FlushInterval: 5 * time.Millisecond,
		Spool: openSpool(t, dir, spool.Options{MaxBytes: 1000})})
	queued := 0
	for i := range 200 {
		if q.Enqueue(rec(i)) {
			queued++
		}
	}
	h := q.Health()
	if h.SpoolError == "" || h.InMemory != 50 || h.Dropped != uint64(200-queued) || queued >= 200 {
		t.Fatalf("health with a full spool: %+v (queued %d)", h, queued)
	}
	w.down.Store(false)
	waitFor(t, "everything written", func() bool { return q.Len() == 0 })
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantInOrder(t, w.stored(), queued)
}

func TestSpooled_Concurrent(t *testing.T) {
	w := &dedupWriter{}
	q := accounting.New(w, accounting.Options{BatchSize: 64, FlushInterval: time.Millisecond,
		Spool: openSpool(t, t.TempDir(), spool.Options{SegmentBytes: 4096})})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				q.Enqueue(llmflow.Record{RequestID: fmt.Sprintf("g%d-%d", g, i)})
				if i%100 == 0 {
					w.down.Store(i%200 == 0)
				}
			}
		})
	}
	wg.Wait()
	w.down.Store(false)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(w.stored()); got != 4000 {
		t.Fatalf("%d stored, want 4000", got)
	}
}
