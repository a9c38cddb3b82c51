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
)

// blockingWriter holds every write until release is closed.
type blockingWriter struct {
	release chan struct{}
	fail    atomic.Bool
	calls   atomic.Int64
	mu      sync.Mutex
	got     []llmflow.Record
}

func (b *blockingWriter) WriteRecords(ctx context.Context, recs []llmflow.Record) error {
	b.calls.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if b.fail.Load() {
		return errors.New("disk full")
	}
	b.mu.Lock()
	b.got = append(b.got, recs...)
	b.mu.Unlock()
	return nil
}

func rec(i int) llmflow.Record { return llmflow.Record{RequestID: fmt.Sprintf("r%d", i)} }

func TestRecorder_BatchesAndDrains(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	close(w.release)
	r := NewRecorder(w, 1000, 10, time.Hour, nil)
	for i := range 95 {
		if !r.Enqueue(rec(i)) {
			t.Fatal("dropped with room in the queue")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	written, failed, dropped := r.Counts()
	if written != 95 || failed != 0 || dropped != 0 || len(w.got) != 95 {
		t.Fatalf("written %d failed %d dropped %d stored %d, want 95 written and stored", written, failed, dropped, len(w.got))
	}
	if c := w.calls.Load(); c != 10 {
		t.Errorf("%d writes for 95 records in batches of 10, want 10", c)
	}
}

func TestRecorder_FlushInterval(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	close(w.release)
	r := NewRecorder(w, 100, 50, 10*time.Millisecond, nil)
	defer r.Close(context.Background())
	r.Enqueue(rec(1))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if written, _, _ := r.Counts(); written == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a partial batch was not written after the flush interval")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestRecorder_FullQueueDropsAndCounts(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	r := NewRecorder(w, 4, 1, time.Millisecond, nil)
	// the writer takes one record and blocks; four more fill the queue
	r.Enqueue(rec(0))
	waitFor(t, func() bool { return w.calls.Load() == 1 })
	queued := 0
	for i := 1; i <= 10; i++ {
		if r.Enqueue(rec(i)) {
			queued++
		}
	}
	if queued != 4 {
		t.Errorf("%d queued, want 4 (the queue size)", queued)
	}
	if _, _, dropped := r.Counts(); dropped != 6 {
		t.Errorf("dropped %d, want 6", dropped)
	}
	close(w.release)
	r.Close(context.Background())
	if written, _, _ := r.Counts(); written != 5 {
		t.Errorf("written %d, want 5", written)
	}
}

func TestRecorder_FailedBatchRetriedOnceThenCounted(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	close(w.release)
	w.fail.Store(true)
	var failedSeen atomic.Int64
	r := NewRecorder(w, 10, 3, time.Hour, nil)
	r.OnWrite = func(_, failed int) { failedSeen.Add(int64(failed)) }
	for i := range 3 {
		r.Enqueue(rec(i))
	}
	r.Close(context.Background())
	written, failed, _ := r.Counts()
	if written != 0 || failed != 3 || failedSeen.Load() != 3 {
		t.Errorf("written %d failed %d (seen %d), want 0 and 3", written, failed, failedSeen.Load())
	}
	if c := w.calls.Load(); c != 2 {
		t.Errorf("%d write attempts, want 2 (one retry)", c)
	}
}

func TestRecorder_CloseBoundedByContext(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	r := NewRecorder(w, 10, 1, time.Millisecond, nil)
	r.timeout = time.Hour
	r.Enqueue(rec(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a stuck writer: %v, want deadline exceeded", err)
	}
	close(w.release)
}
