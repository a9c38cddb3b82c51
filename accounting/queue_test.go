package accounting_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
)

// fakeWriter is a Writer made of parts a test switches on: it records
// what it is given, can block until released or cancelled, can sleep,
// and can fail.
type fakeWriter struct {
	release chan struct{} // nil = do not block; else wait for it (or ctx)
	sleep   time.Duration // per write
	fail    atomic.Bool

	calls    atomic.Int64  // WriteRecords calls
	active   atomic.Int64  // calls running now
	canceled atomic.Int64  // calls that returned because ctx ended
	started  chan struct{} // when non-nil, receives once per call (non-blocking)

	mu       sync.Mutex
	got      []llmflow.Record
	sizes    []int
	deadline bool // every call had a deadline
}

func (f *fakeWriter) WriteRecords(ctx context.Context, recs []llmflow.Record) error {
	f.calls.Add(1)
	f.active.Add(1)
	defer f.active.Add(-1)
	_, hasDeadline := ctx.Deadline()
	f.mu.Lock()
	f.sizes = append(f.sizes, len(recs))
	f.deadline = (len(f.sizes) == 1 || f.deadline) && hasDeadline
	f.mu.Unlock()
	if f.started != nil {
		select {
		case f.started <- struct{}{}:
		default:
		}
	}
	if f.sleep > 0 {
		time.Sleep(f.sleep)
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			f.canceled.Add(1)
			return fmt.Errorf("write records: %w", ctx.Err())
		}
	}
	if f.fail.Load() {
		return errors.New("write records: disk full")
	}
	f.mu.Lock()
	f.got = append(f.got, recs...) // recs is only valid during the call
	f.mu.Unlock()
	return nil
}

func (f *fakeWriter) stored() []llmflow.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]llmflow.Record(nil), f.got...)
}

func (f *fakeWriter) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.sizes...)
}

func rec(i int) llmflow.Record { return llmflow.Record{RequestID: fmt.Sprintf("r%d", i)} }

// logCounter is a slog handler that counts records per level.
type logCounter struct {
	mu     sync.Mutex
	levels map[slog.Level]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.levels == nil {
		l.levels = map[slog.Level]int{}
	}
	l.levels[r.Level]++
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }
func (l *logCounter) count(level slog.Level) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.levels[level]
}

// Close writes everything queued, in batches of at most BatchSize, once
// each; with a flush interval that never comes, only full batches and
// Close write.
func TestQueue_BatchesAndDrains(t *testing.T) {
	for _, tc := range []struct {
		name           string
		records, batch int
		queue          int
		minWrites      int
		maxWrites      int
	}{
		{name: "Empty", records: 0, batch: 10, queue: 100, minWrites: 0, maxWrites: 0},
		{name: "OnePartialBatch", records: 100, batch: 1000, queue: 10000, minWrites: 1, maxWrites: 1},
		{name: "ExactBatches", records: 100, batch: 10, queue: 1000, minWrites: 10, maxWrites: 19},
		{name: "PartialTail", records: 95, batch: 10, queue: 1000, minWrites: 10, maxWrites: 19},
		{name: "BatchLargerThanQueue", records: 8, batch: 100, queue: 8, minWrites: 1, maxWrites: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &fakeWriter{}
			q := accounting.New(w, accounting.Options{QueueSize: tc.queue, BatchSize: tc.batch, FlushInterval: time.Hour})
			for i := range tc.records {
				if !q.Enqueue(rec(i)) {
					t.Fatalf("record %d dropped with room in the queue", i)
				}
			}
			if err := q.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			written, failed, dropped := q.Counts()
			if int(written) != tc.records || failed != 0 || dropped != 0 {
				t.Errorf("written %d failed %d dropped %d, want %d written", written, failed, dropped, tc.records)
			}
			got := w.stored()
			if len(got) != tc.records {
				t.Fatalf("stored %d records, want %d", len(got), tc.records)
			}
			for i, r := range got {
				if r.RequestID != rec(i).RequestID {
					t.Fatalf("record %d is %s, want %s (in order, once each)", i, r.RequestID, rec(i).RequestID)
				}
			}
			sizes := w.batchSizes()
			if len(sizes) < tc.minWrites || len(sizes) > tc.maxWrites {
				t.Errorf("%d writes %v, want %d to %d", len(sizes), sizes, tc.minWrites, tc.maxWrites)
			}
			for _, n := range sizes {
				if n > min(tc.batch, tc.queue) || n == 0 {
					t.Errorf("a write of %d records (batch size %d)", n, tc.batch)
				}
			}
			if !w.deadline && len(sizes) > 0 {
				t.Error("a write ran without a deadline")
			}
			if q.Len() != 0 {
				t.Errorf("Len %d after Close", q.Len())
			}
		})
	}
}

// Enqueue does not wake the writer per record: 100 records under the
// batch size and a flush interval of an hour cause no wake-up at all, and
// Close writes them in one batch.
func TestQueue_NoWakeupPerRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		q := accounting.New(w, accounting.Options{QueueSize: 10000, BatchSize: 1000, FlushInterval: time.Hour})
		for i := range 100 {
			q.Enqueue(rec(i))
		}
		synctest.Wait() // the writer is durably blocked: it would have run by now
		if n := accounting.Wakeups(q); n != 0 {
			t.Errorf("%d writer wake-ups for 100 records below the batch size, want 0", n)
		}
		if n := q.Len(); n != 100 {
			t.Errorf("Len %d, want 100", n)
		}
		if err := q.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if c := w.calls.Load(); c != 1 {
			t.Errorf("%d writes, want exactly 1", c)
		}
		if n := accounting.Wakeups(q); n != 1 {
			t.Errorf("%d wake-ups, want 1 (Close)", n)
		}
	})
}

// With a batch size of 10, 1000 records wake the writer at most once per
// full batch (100 times), not once per record.
func TestQueue_WakeupPerBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		q := accounting.New(w, accounting.Options{QueueSize: 10000, BatchSize: 10, FlushInterval: time.Hour})
		for i := range 1000 {
			q.Enqueue(rec(i))
			if i%7 == 0 {
				synctest.Wait() // let the writer run now and then
			}
		}
		synctest.Wait()
		if n := accounting.Wakeups(q); n == 0 || n > 100 {
			t.Errorf("%d wake-ups for 1000 records in batches of 10, want 1 to 100", n)
		}
		if err := q.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if written, _, _ := q.Counts(); written != 1000 {
			t.Errorf("written %d, want 1000", written)
		}
	})
}

// A partial batch is written after the flush interval.
func TestQueue_FlushInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		q := accounting.New(w, accounting.Options{QueueSize: 100, BatchSize: 50, FlushInterval: time.Second})
		defer q.Close(context.Background())
		q.Enqueue(rec(1))
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if written, _, _ := q.Counts(); written != 0 {
			t.Fatalf("written %d before the flush interval", written)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if written, _, _ := q.Counts(); written != 1 {
			t.Fatalf("written %d after the flush interval, want 1", written)
		}
	})
}

// The queue holds at most QueueSize records, counting those being
// written; beyond, records are dropped, counted, and warned about once
// per warn interval, not once each.
func TestQueue_FullQueueDropsAndCounts(t *testing.T) {
	w := &fakeWriter{release: make(chan struct{}), started: make(chan struct{}, 1)}
	logs := &logCounter{}
	q := accounting.New(w, accounting.Options{QueueSize: 4, BatchSize: 1, FlushInterval: time.Hour, Log: slog.New(logs)})
	// the writer takes one record and blocks; three more fill the queue
	q.Enqueue(rec(0))
	<-w.started
	queued := 0
	for i := 1; i <= 10; i++ {
		if q.Enqueue(rec(i)) {
			queued++
		}
	}
	if queued != 3 {
		t.Errorf("%d queued, want 3 (queue size 4, one being written)", queued)
	}
	if n := q.Len(); n != 4 {
		t.Errorf("Len %d, want 4", n)
	}
	if _, _, dropped := q.Counts(); dropped != 7 {
		t.Errorf("dropped %d, want 7", dropped)
	}
	if n := logs.count(slog.LevelWarn); n != 1 {
		t.Errorf("%d warnings for 7 drops, want 1", n)
	}
	close(w.release)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if written, _, _ := q.Counts(); written != 4 {
		t.Errorf("written %d, want 4", written)
	}
	if q.Enqueue(rec(99)) {
		t.Error("Enqueue after Close queued a record")
	}
	if _, _, dropped := q.Counts(); dropped != 8 {
		t.Errorf("dropped %d after an Enqueue past Close, want 8", dropped)
	}
}

// A failing batch is retried once, then counted as failed, reported to
// OnWrite and logged; the queue goes on.
func TestQueue_FailedBatchRetriedOnceThenCounted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     bool
		attempts int64
		written  uint64
		failed   uint64
	}{
		{name: "OK", fail: false, attempts: 1, written: 3},
		{name: "ErrWrite", fail: true, attempts: 2, failed: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &fakeWriter{}
			w.fail.Store(tc.fail)
			var seenWritten, seenFailed atomic.Int64
			logs := &logCounter{}
			q := accounting.New(w, accounting.Options{
				QueueSize: 10, BatchSize: 3, FlushInterval: time.Hour, Log: slog.New(logs),
				OnWrite: func(written, failed int) { seenWritten.Add(int64(written)); seenFailed.Add(int64(failed)) },
			})
			for i := range 3 {
				q.Enqueue(rec(i))
			}
			if err := q.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v (failures are counted, not returned)", err)
			}
			written, failed, _ := q.Counts()
			if written != tc.written || failed != tc.failed {
				t.Errorf("written %d failed %d, want %d and %d", written, failed, tc.written, tc.failed)
			}
			if seenWritten.Load() != int64(tc.written) || seenFailed.Load() != int64(tc.failed) {
				t.Errorf("OnWrite saw %d written %d failed", seenWritten.Load(), seenFailed.Load())
			}
			if c := w.calls.Load(); c != tc.attempts {
				t.Errorf("%d write attempts, want %d", c, tc.attempts)
			}
			if n := logs.count(slog.LevelError); (n == 1) != tc.fail {
				t.Errorf("%d errors logged", n)
			}
		})
	}
}

// Each attempt is bounded by WriteTimeout: a writer that hangs fails the
// batch after two timeouts and the queue goes on with the next one.
func TestQueue_WriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{release: make(chan struct{})} // never released
		q := accounting.New(w, accounting.Options{QueueSize: 10, BatchSize: 2, FlushInterval: time.Hour, WriteTimeout: time.Minute})
		q.Enqueue(rec(0))
		q.Enqueue(rec(1))
		time.Sleep(2*time.Minute + time.Second)
		synctest.Wait()
		if _, failed, _ := q.Counts(); failed != 2 {
			t.Errorf("failed %d after two timeouts, want 2", failed)
		}
		if c, cc := w.calls.Load(), w.canceled.Load(); c != 2 || cc != 2 {
			t.Errorf("%d calls, %d cancelled, want 2 and 2", c, cc)
		}
		close(w.release)
		q.Enqueue(rec(2))
		if err := q.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if written, _, _ := q.Counts(); written != 1 {
			t.Errorf("written %d after the writer recovered, want 1", written)
		}
	})
}

// When Close's context ends first, Close cancels the write in progress
// (the writer sees its context end), gives up the rest, says how many
// records were not written, and returns only once the writer goroutine
// is gone: synctest.Test fails on a goroutine left behind.
func TestQueue_CloseCancelsWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{release: make(chan struct{})} // never released
		q := accounting.New(w, accounting.Options{QueueSize: 10, BatchSize: 1, FlushInterval: time.Hour, WriteTimeout: time.Hour})
		for i := range 3 {
			q.Enqueue(rec(i))
		}
		synctest.Wait() // the writer is stuck in the first write
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := q.Close(ctx)
		var nw *accounting.NotWrittenError
		if !errors.As(err, &nw) || nw.Records != 3 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close with a stuck writer: %v, want 3 records not written, deadline exceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Close returned after %v, want 1s (its deadline)", d)
		}
		if a := w.active.Load(); a != 0 {
			t.Errorf("%d writes still running after Close", a)
		}
		if c, cc := w.calls.Load(), w.canceled.Load(); c != 1 || cc != 1 {
			t.Errorf("%d writes, %d cancelled, want 1 and 1 (no retry, no more writes after cancel)", c, cc)
		}
		if written, failed, _ := q.Counts(); written != 0 || failed != 3 {
			t.Errorf("written %d failed %d, want 0 and 3", written, failed)
		}
		// a second Close says the same at once
		if err := q.Close(context.Background()); !errors.As(err, &nw) || nw.Records != 3 {
			t.Errorf("second Close: %v", err)
		}
	})
}

// Close waits for real: a slow writer finishes every batch before Close
// returns when its context allows it.
func TestQueue_CloseWaitsForSlowWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{sleep: 10 * time.Second}
		q := accounting.New(w, accounting.Options{QueueSize: 100, BatchSize: 10, FlushInterval: time.Hour})
		for i := range 50 {
			q.Enqueue(rec(i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if err := q.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if written, _, _ := q.Counts(); written != 50 || len(w.stored()) != 50 {
			t.Errorf("written %d stored %d, want 50", written, len(w.stored()))
		}
	})
}

// Many goroutines enqueue while a slow writer drains: every record is
// written once or dropped, never both, never lost, and Len never exceeds
// the queue size. Run with -race.
func TestQueue_Concurrent(t *testing.T) {
	const workers, each, size = 8, 2000, 1000
	w := &fakeWriter{sleep: 100 * time.Microsecond}
	q := accounting.New(w, accounting.Options{QueueSize: size, BatchSize: 100, FlushInterval: time.Millisecond})
	var wg sync.WaitGroup
	var queued atomic.Int64
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				if q.Enqueue(rec(g*each + i)) {
					queued.Add(1)
				}
				if n := q.Len(); n > size {
					t.Errorf("Len %d > queue size %d", n, size)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	written, failed, dropped := q.Counts()
	if int64(written) != queued.Load() || failed != 0 || written+dropped != workers*each {
		t.Errorf("written %d failed %d dropped %d queued %d of %d", written, failed, dropped, queued.Load(), workers*each)
	}
	seen := map[string]bool{}
	for _, r := range w.stored() {
		if seen[r.RequestID] {
			t.Fatalf("%s written twice", r.RequestID)
		}
		seen[r.RequestID] = true
	}
	if len(seen) != int(written) {
		t.Errorf("%d distinct records stored, %d counted written", len(seen), written)
	}
}
