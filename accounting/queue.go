// Package accounting is the gateway's accounting queue: a bounded,
// in-memory queue of accounting records that one writer goroutine drains
// into a store in batches, so that keeping a record never blocks the
// request that produced it.
//
// The request path pays for a short mutex and an append: the writer is
// woken when a full batch is waiting, otherwise on its flush interval,
// never once per record. Nothing is lost silently: a record that does not
// fit is dropped and counted, a batch that fails twice is counted as
// failed, and Close says how many records it could not write.
package accounting

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/spool"
)

// Writer keeps accounting records: a store.
//
// WriteRecords writes recs in one go and must be idempotent per
// RequestID: a batch may be written again after an error that happened
// after it was committed. It must return promptly once ctx is done; the
// Queue relies on that to stop. recs is only valid during the call.
type Writer interface {
	WriteRecords(ctx context.Context, recs []llmflow.Record) error
}

// Defaults for the zero fields of Options.
const (
	DefaultQueueSize     = 10000
	DefaultBatchSize     = 500
	DefaultFlushInterval = time.Second
	DefaultWriteTimeout  = 30 * time.Second
	DefaultWarnInterval  = 10 * time.Second
)

// Options configure a Queue. The zero value works.
type Options struct {
	// QueueSize bounds the records held, waiting or being written;
	// beyond it Enqueue drops and counts. 0 = DefaultQueueSize. The two
	// buffers the queue swaps grow to at most QueueSize records each and
	// are reused, so memory stays flat.
	QueueSize int
	// BatchSize is the most records written at once, and the number
	// waiting that wakes the writer before its flush interval. It is at
	// most QueueSize. 0 = DefaultBatchSize.
	BatchSize int
	// FlushInterval is the longest a partial batch waits before it is
	// written. 0 = DefaultFlushInterval.
	FlushInterval time.Duration
	// WriteTimeout bounds each attempt to write a batch.
	// 0 = DefaultWriteTimeout.
	WriteTimeout time.Duration
	// WarnInterval is the least time between two warnings about dropped
	// records, so a full queue does not flood the log.
	// 0 = DefaultWarnInterval.
	WarnInterval time.Duration
	// OnWrite, when set, is called by the writer goroutine after each
	// batch with the records written and failed (for metrics). It must
	// not block.
	OnWrite func(written, failed int)
	// Log receives the warnings (records dropped) and errors (a batch
	// lost after its retry). nil = discard.
	Log *slog.Logger
	// Spool, when set, makes the queue write-ahead (spooled.go): every
	// record is appended to it before Enqueue returns and the writer
	// takes records from it to the store, retrying while the store
	// fails, so nothing is lost to a crash, a slow or failing store or a
	// full queue. The queue owns it from New on and closes it in Close.
	Spool *spool.Spool
}

// Queue is the accounting queue. Create it with New, feed it with
// Enqueue from any goroutine, stop it with Close.
type Queue struct {
	w        Writer
	size     int
	batch    int
	interval time.Duration
	timeout  time.Duration
	warnGap  int64 // nanoseconds
	onWrite  func(written, failed int)
	log      *slog.Logger

	mu      sync.Mutex
	pending []llmflow.Record // waiting for the writer; swapped out whole
	spare   []llmflow.Record // the writer's last batch, emptied, reused as pending
	held    int              // records pending or being written
	closed  bool             // Close was called: Enqueue drops

	kick chan struct{} // 1-buffered: a full batch is waiting

	// ctx is the queue's lifetime: every write runs under a context
	// derived from it, and cancel ends the write in progress when Close
	// gives up.
	ctx     context.Context
	cancel  context.CancelFunc
	stop    chan struct{} // closed by Close: drain and return
	done    chan struct{} // closed when the writer goroutine has returned
	closing sync.Once

	written, failed, dropped atomic.Uint64
	abandoned                atomic.Uint64 // not written because Close's ctx ended
	storeErrors              atomic.Uint64 // failed WriteRecords calls
	lastWarn                 atomic.Int64  // unix nanoseconds of the last drop warning
	wakeups                  atomic.Uint64 // writer wake-ups, for tests

	// atRisk is set while neither the store nor the spool takes records
	// (AtRisk): kept by noteRisk under mu, read without it.
	atRisk atomic.Bool

	sp           *spool.Spool // nil: memory only
	spooledState              // spool mode (spooled.go), under mu
}

// New starts a Queue writing to w. Every option is in opts, so nothing
// changes once its writer goroutine runs.
func New(w Writer, opts Options) *Queue {
	q := &Queue{
		w:        w,
		size:     opts.QueueSize,
		batch:    opts.BatchSize,
		interval: opts.FlushInterval,
		timeout:  opts.WriteTimeout,
		warnGap:  int64(opts.WarnInterval),
		onWrite:  opts.OnWrite,
		log:      opts.Log,
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if q.size <= 0 {
		q.size = DefaultQueueSize
	}
	if q.batch <= 0 {
		q.batch = DefaultBatchSize
	}
	q.batch = min(q.batch, q.size)
	if q.interval <= 0 {
		q.interval = DefaultFlushInterval
	}
	if q.timeout <= 0 {
		q.timeout = DefaultWriteTimeout
	}
	if q.warnGap <= 0 {
		q.warnGap = int64(DefaultWarnInterval)
	}
	if q.log == nil {
		q.log = slog.New(slog.DiscardHandler)
	}
	q.pending = make([]llmflow.Record, 0, q.batch)
	q.spare = make([]llmflow.Record, 0, q.batch)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	if opts.Spool != nil {
		q.sp = opts.Spool
		// What a previous run left is read from the spool; the mirror
		// starts once the writer has caught up (or now, with nothing left).
		q.mirroring = q.sp.AtEnd(q.sp.Start())
		if !q.mirroring {
			q.wake() // what a previous run left is written at once
		}
		go q.runSpooled()
		return q
	}
	go q.run()
	return q
}

// Enqueue queues rec for writing and reports whether it was queued. It
// never blocks on the writer: when the queue holds QueueSize records, or
// after Close, rec is dropped and counted. It wakes the writer only when
// a full batch is waiting.
func (q *Queue) Enqueue(rec llmflow.Record) bool {
	if q.sp != nil {
		return q.enqueueSpooled(&rec)
	}
	q.mu.Lock()
	if q.closed || q.held >= q.size {
		closed := q.closed
		q.mu.Unlock()
		q.drop(rec.RequestID, closed)
		return false
	}
	q.pending = append(q.pending, rec)
	q.held++
	full := len(q.pending) == q.batch
	q.mu.Unlock()
	if full {
		select {
		case q.kick <- struct{}{}:
		default: // already signalled
		}
	}
	return true
}

// drop counts a dropped record and warns at most once per WarnInterval.
func (q *Queue) drop(requestID string, closed bool) {
	n := q.dropped.Add(1)
	now := time.Now().UnixNano()
	last := q.lastWarn.Load()
	if (last != 0 && now-last < q.warnGap) || !q.lastWarn.CompareAndSwap(last, now) {
		return
	}
	msg := "accounting queue full: records dropped"
	if closed {
		msg = "accounting queue closed: records dropped"
	}
	q.log.Warn(msg, "request_id", requestID, "dropped_total", n, "queue_size", q.size)
}

// Len is the number of records held: waiting or being written, in
// memory or in the spool.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sp != nil {
		n, _ := q.sp.Pending()
		return int(n) + len(q.pending)
	}
	return q.held
}

// Counts returns the records written, failed (including those Close gave
// up on) and dropped so far.
func (q *Queue) Counts() (written, failed, dropped uint64) {
	return q.written.Load(), q.failed.Load(), q.dropped.Load()
}

// NotWrittenError is returned by Close when its context ended before the
// queue was written: Records were given up (and counted as failed).
type NotWrittenError struct {
	Records int
	Err     error // the context's error
}

func (e *NotWrittenError) Error() string {
	return fmt.Sprintf("%d accounting records not written: %v", e.Records, e.Err)
}

func (e *NotWrittenError) Unwrap() error { return e.Err }

// Close stops intake (Enqueue drops from then on), writes every record
// still held and waits for the writer goroutine to return. When ctx ends
// first, Close cancels the write in progress, gives up what is left and
// returns a *NotWrittenError (wrapping ctx's error) with the number of
// records given up; it still returns only once the writer has stopped.
// Records that fail to be written while draining are counted and logged
// as failed, as at any other time, and are not part of the error.
//
// Close may be called more than once, from any goroutine.
func (q *Queue) Close(ctx context.Context) error {
	q.closing.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.mu.Unlock()
		close(q.stop)
	})
	stopCancel := context.AfterFunc(ctx, q.cancel)
	<-q.done
	stopCancel()
	q.cancel()
	if n := q.abandoned.Load(); n > 0 {
		err := ctx.Err()
		if err == nil {
			err = context.Canceled // another Close's ctx ended
		}
		return &NotWrittenError{Records: int(n), Err: err}
	}
	return nil
}

// run is the writer goroutine.
func (q *Queue) run() {
	defer close(q.done)
	t := time.NewTicker(q.interval)
	defer t.Stop()
	for {
		select {
		case <-q.kick:
		case <-t.C:
		case <-q.stop:
			// Intake is closed: what is pending now is all there is.
			q.wakeups.Add(1)
			q.writePending()
			return
		}
		q.wakeups.Add(1)
		q.writePending()
	}
}

// writePending swaps the pending records out and writes them in batches.
func (q *Queue) writePending() {
	q.mu.Lock()
	recs := q.pending
	q.pending, q.spare = q.spare, nil
	q.mu.Unlock()
	for b := recs; len(b) > 0; {
		n := min(len(b), q.batch)
		q.write(b[:n])
		b = b[n:]
		q.mu.Lock()
		q.held -= n
		q.mu.Unlock()
	}
	clear(recs) // drop references: the strings of written records can go
	q.mu.Lock()
	q.spare = recs[:0]
	q.mu.Unlock()
}

// write writes one batch, retrying once, and counts it. Once the queue's
// lifetime context is cancelled it writes nothing more and counts the
// batch as abandoned.
func (q *Queue) write(b []llmflow.Record) {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if err = q.ctx.Err(); err != nil {
			break
		}
		ctx, cancel := context.WithTimeout(q.ctx, q.timeout)
		err = q.w.WriteRecords(ctx, b)
		cancel()
		if err == nil {
			break
		}
	}
	n := len(b)
	q.mu.Lock()
	if err != nil && q.ctx.Err() == nil {
		if q.storeErr == nil {
			q.failingSince = time.Now()
		}
		q.storeErr = err
		q.storeErrors.Add(1)
	} else if err == nil {
		q.storeErr = nil
	}
	q.noteRisk()
	q.mu.Unlock()
	if err == nil {
		q.written.Add(uint64(n))
		if q.onWrite != nil {
			q.onWrite(n, 0)
		}
		return
	}
	q.failed.Add(uint64(n))
	if q.ctx.Err() != nil {
		q.abandoned.Add(uint64(n))
		q.log.Error("accounting batch given up at close", "records", n, "err", err)
	} else {
		q.log.Error("accounting batch lost after retry", "records", n, "err", err)
	}
	if q.onWrite != nil {
		q.onWrite(0, n)
	}
}
