package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
)

// RecordWriter is what the gateway needs of a store to keep accounting
// records. WriteRecords must be idempotent per RequestID.
type RecordWriter interface {
	WriteRecords(ctx context.Context, recs []llmflow.Record) error
}

// Recorder is the accounting queue: Enqueue never blocks the request path;
// a single writer drains the queue in batches. A record that does not fit
// in the queue is dropped and counted; a batch that fails twice is counted
// as failed. Nothing is lost silently.
type Recorder struct {
	w        RecordWriter
	log      *slog.Logger
	q        chan llmflow.Record
	batch    int
	interval time.Duration
	timeout  time.Duration

	written, failed, dropped atomic.Uint64

	// OnWrite, when set, is called by the writer goroutine after each batch
	// (for metrics). It must not block.
	OnWrite func(written, failed int)

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewRecorder starts the writer goroutine. Close drains the queue.
func NewRecorder(w RecordWriter, queueSize, batchSize int, interval time.Duration, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{
		w: w, log: log,
		q:        make(chan llmflow.Record, queueSize),
		batch:    batchSize,
		interval: interval,
		timeout:  30 * time.Second,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go r.run()
	return r
}

// Enqueue queues rec for writing, or drops and counts it when the queue is
// full. It reports whether the record was queued.
func (r *Recorder) Enqueue(rec llmflow.Record) bool {
	select {
	case r.q <- rec:
		return true
	default:
		r.dropped.Add(1)
		r.log.Warn("accounting queue full: record dropped", "request_id", rec.RequestID)
		return false
	}
}

// Len is the number of records waiting.
func (r *Recorder) Len() int { return len(r.q) }

// Counts returns the records written, failed and dropped so far.
func (r *Recorder) Counts() (written, failed, dropped uint64) {
	return r.written.Load(), r.failed.Load(), r.dropped.Load()
}

func (r *Recorder) run() {
	defer close(r.done)
	buf := make([]llmflow.Record, 0, r.batch)
	t := time.NewTimer(r.interval)
	defer t.Stop()
	for {
		select {
		case rec := <-r.q:
			buf = append(buf, rec)
			if len(buf) >= r.batch {
				buf = r.flush(buf)
			}
		case <-t.C:
			buf = r.flush(buf)
			t.Reset(r.interval)
		case <-r.stop:
			for {
				select {
				case rec := <-r.q:
					buf = append(buf, rec)
					if len(buf) >= r.batch {
						buf = r.flush(buf)
					}
				default:
					r.flush(buf)
					return
				}
			}
		}
	}
}

// flush writes buf, retrying once, and returns it emptied.
func (r *Recorder) flush(buf []llmflow.Record) []llmflow.Record {
	if len(buf) == 0 {
		return buf
	}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		err = r.w.WriteRecords(ctx, buf)
		cancel()
		if err == nil {
			break
		}
	}
	n := len(buf)
	if err != nil {
		r.failed.Add(uint64(n))
		r.log.Error("accounting batch lost after retry", "records", n, "err", err)
		if r.OnWrite != nil {
			r.OnWrite(0, n)
		}
	} else {
		r.written.Add(uint64(n))
		if r.OnWrite != nil {
			r.OnWrite(n, 0)
		}
	}
	clear(buf)
	return buf[:0]
}

// Close stops accepting work once the queue is drained and written, or
// when ctx ends first.
func (r *Recorder) Close(ctx context.Context) error {
	r.once.Do(func() { close(r.stop) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
