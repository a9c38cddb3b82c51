package accounting

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/spool"
)

// Spool mode (Options.Spool): the queue is write-ahead.
//
// Enqueue appends the record to the spool (under the queue's mutex) and
// returns: from then on a crash of the process cannot lose it. It also
// keeps a copy in memory, the mirror, with its position in the spool:
// the writer goroutine takes the records from there, in order, writes
// batches to the store and commits the spool's checkpoint after each, so
// it never reads back nor decodes what it has in memory. The mirror holds
// at most QueueSize records; when the store falls that far behind, it is
// emptied and the writer reads the spool from its position instead, until
// it has caught up with the appends (then the mirror starts again). At a
// start the writer reads what a previous run left in the spool first.
// A batch the store refuses (down, locked, full, slow beyond
// WriteTimeout) stays in the spool and is tried again with a growing
// pause (up to maxRetryPause); it is never given up. At the next start
// whatever was not committed is read again; the store skips the records
// it already has (WriteRecords is idempotent by RequestID), so each is
// stored exactly once.
//
// When the spool itself cannot take a record (its disk is full, or it
// holds its MaxBytes) records are kept in memory (at most QueueSize,
// beyond that dropped and counted) and every later record too, so that
// the order stays: the writer moves them into the spool as soon as it
// takes appends again, or writes them to the store directly. Only these
// in-memory records can be lost, by a crash or by Close giving up.

// spooledState is the spool mode's part of Queue, guarded by Queue.mu
// (but the writer's own fields at the end).
type spooledState struct {
	sinceKick    int   // records appended since the writer was last woken
	spoolDown    error // the last failed append; nil when appends work
	storeErr     error // the last failed store write; nil after a success
	failingSince time.Time
	lastFailLog  time.Time
	lastErrLog   time.Time

	// While mirroring, mirror holds every record appended to the spool
	// and not taken by the writer, in order, and mirrorEnds the spool
	// position after each: the writer's position is that of mirror[0].
	// taken is how many the writer took and has not stored yet; mirror
	// and taken together stay within QueueSize.
	mirroring  bool
	mirror     []llmflow.Record
	mirrorEnds []spool.Cursor
	taken      int

	// The writer goroutine's own: the records it took from the mirror
	// (swapped out whole), their spool positions, and how many of them
	// are stored.
	took     []llmflow.Record
	tookEnds []spool.Cursor
	tookDone int
}

// maxRetryPause bounds the pause between two attempts at a failing store.
const maxRetryPause = 5 * time.Second

func (q *Queue) enqueueSpooled(rec *llmflow.Record) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.drop(rec.RequestID, true)
		return false
	}
	if len(q.pending) == 0 && q.spoolDown == nil {
		err := q.appendSpool(rec)
		if err == nil {
			q.sinceKick++
			kick := q.sinceKick >= q.batch
			if kick {
				q.sinceKick = 0
			}
			q.mu.Unlock()
			if kick {
				q.wake()
			}
			return true
		}
		q.spoolDown = err
		q.noteRisk()
		q.logSpoolDown(err)
	}
	if len(q.pending) >= q.size {
		q.mu.Unlock()
		q.drop(rec.RequestID, false)
		return false
	}
	q.pending = append(q.pending, *rec)
	full := len(q.pending)%q.batch == 0
	q.mu.Unlock()
	if full {
		q.wake()
	}
	return true
}

// appendSpool appends rec to the spool and, while mirroring, to the
// mirror. q.mu is held.
func (q *Queue) appendSpool(rec *llmflow.Record) error {
	end, err := q.sp.AppendCursor(rec)
	if err != nil || !q.mirroring {
		return err
	}
	if len(q.mirror)+q.taken >= q.size {
		// The store is a whole queue behind: the writer reads the spool
		// from its position on instead.
		q.stopMirror()
		return nil
	}
	q.mirror = append(q.mirror, *rec)
	q.mirrorEnds = append(q.mirrorEnds, end)
	return nil
}

// stopMirror empties the mirror and stops it. q.mu is held.
func (q *Queue) stopMirror() {
	q.mirroring = false
	clear(q.mirror) // drop the references to the records' strings
	q.mirror, q.mirrorEnds = q.mirror[:0], q.mirrorEnds[:0]
}

func (q *Queue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// logSpoolDown logs a failed append at most once per WarnInterval.
// Called with mu held.
func (q *Queue) logSpoolDown(err error) {
	now := time.Now()
	if now.Sub(q.lastErrLog) < time.Duration(q.warnGap) {
		return
	}
	q.lastErrLog = now
	q.log.Error("accounting spool refuses records: keeping them in memory until it takes them again",
		"dir", q.sp.Dir(), "in_memory", len(q.pending), "max_in_memory", q.size, "err", err)
}

// runSpooled is the writer goroutine in spool mode.
func (q *Queue) runSpooled() {
	defer close(q.done)
	t := time.NewTicker(q.interval)
	defer t.Stop()
	cur := q.sp.Start()
	buf := make([]llmflow.Record, 0, q.batch)
	pause := time.Duration(0)
	for {
		all := true
		select {
		case <-q.kick:
			all = false
		case <-t.C:
		case <-q.stop:
			q.wakeups.Add(1)
			q.finishSpooled(&cur, &buf)
			return
		}
		q.wakeups.Add(1)
		if q.drainSpooled(&cur, &buf, all) {
			pause = 0
			continue
		}
		// The store failed: pause (growing) before the next attempt,
		// however many records arrive meanwhile.
		pause = min(max(2*pause, 100*time.Millisecond), maxRetryPause)
		select {
		case <-time.After(pause):
		case <-q.stop:
			q.wakeups.Add(1)
			q.finishSpooled(&cur, &buf)
			return
		}
	}
}

// drainSpooled writes to the store what is spooled, from the mirror or
// read back from the spool, then what is held in memory, in order. When
// all is false (the writer was woken by a full batch) it writes full
// batches from the mirror only, and leaves a partial one for the flush
// interval. It reports false when a store write failed (the records stay
// where they were).
func (q *Queue) drainSpooled(cur *spool.Cursor, buf *[]llmflow.Record, all bool) bool {
	q.rescue()
	for {
		if q.tookDone < len(q.took) {
			n := min(len(q.took)-q.tookDone, q.batch)
			if !q.storeBatch(cur, q.took[q.tookDone:q.tookDone+n], q.tookEnds[q.tookDone+n-1]) {
				return false
			}
			q.tookDone += n
			q.mu.Lock()
			q.taken -= n
			q.mu.Unlock()
			continue
		}
		q.mu.Lock()
		if q.mirroring {
			n := min(len(q.mirror), q.batch)
			if n == 0 {
				q.mu.Unlock()
				break // everything spooled is stored
			}
			if n < q.batch && !all {
				q.mu.Unlock()
				return true // a partial batch waits for the flush interval
			}
			// Take a batch from the mirror's front.
			clear(q.took)
			q.took = append(q.took[:0], q.mirror[:n]...)
			q.tookEnds = append(q.tookEnds[:0], q.mirrorEnds[:n]...)
			rest := copy(q.mirror, q.mirror[n:])
			clear(q.mirror[rest:])
			q.mirror = q.mirror[:rest]
			q.mirrorEnds = append(q.mirrorEnds[:0], q.mirrorEnds[n:]...)
			q.tookDone, q.taken = 0, n
			q.mu.Unlock()
			continue
		}
		if q.sp.AtEnd(*cur) {
			// Caught up with the appends, which wait for q.mu: mirror
			// from the next one on.
			q.mirroring = true
			q.mu.Unlock()
			break
		}
		q.mu.Unlock()
		recs, next, err := q.sp.Read(*cur, q.batch, (*buf)[:0])
		*buf = recs
		var ce *spool.CorruptError
		if errors.As(err, &ce) {
			// Only a file changed under the running spool gets here.
			q.log.Error("accounting spool: unreadable frame, the rest of its segment is moved aside and lost",
				"dir", q.sp.Dir(), "err", err)
			if *cur, err = q.sp.Skip(*cur); err == nil {
				continue
			}
		}
		if err != nil {
			q.noteStoreResult(fmt.Errorf("read spool: %w", err))
			return false
		}
		if len(recs) == 0 {
			if next == *cur {
				break // nothing to read: the next wake-up looks again
			}
			*cur = next // past the end of a segment: AtEnd says whether more comes
			continue
		}
		if !q.storeBatch(cur, recs, next) {
			return false
		}
		clear(recs)
	}
	for {
		q.mu.Lock()
		n := min(len(q.pending), q.batch)
		if n == 0 {
			q.spoolDown = nil // memory is empty: try the spool again
			q.noteRisk()
			q.mu.Unlock()
			return true
		}
		b := append((*buf)[:0], q.pending[:n]...)
		q.mu.Unlock()
		*buf = b
		if err := q.writeOnce(b); err != nil {
			q.noteStoreResult(err)
			return false
		}
		q.mu.Lock()
		q.pending = append(q.pending[:0], q.pending[n:]...)
		q.mu.Unlock()
		q.counted(n)
		clear(b)
	}
}

// storeBatch writes b, the spooled records from *cur to end, to the store
// and commits the spool's checkpoint at end. It reports false when the
// store write failed.
func (q *Queue) storeBatch(cur *spool.Cursor, b []llmflow.Record, end spool.Cursor) bool {
	if err := q.writeOnce(b); err != nil {
		q.noteStoreResult(err)
		return false
	}
	if err := q.sp.Commit(end, len(b)); err != nil {
		// Stored, and the next Commit saves a later position; at worst
		// these are read again after a crash and skipped.
		q.log.Warn("accounting spool checkpoint not saved", "err", err)
	}
	*cur = end
	q.counted(len(b))
	return true
}

// rescue moves the records held in memory into the spool, oldest first,
// as far as it takes them; when all went, appends go to the spool again.
func (q *Queue) rescue() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spoolDown == nil || len(q.pending) == 0 {
		return
	}
	i := 0
	for ; i < len(q.pending); i++ {
		if err := q.appendSpool(&q.pending[i]); err != nil {
			break
		}
	}
	q.pending = append(q.pending[:0], q.pending[i:]...)
	clear(q.pending[len(q.pending):cap(q.pending)])
	if len(q.pending) == 0 {
		q.spoolDown = nil
		q.noteRisk()
		q.log.Info("accounting spool takes records again", "dir", q.sp.Dir(), "moved_from_memory", i)
	}
}

// writeOnce is one attempt at a batch, bounded by WriteTimeout.
func (q *Queue) writeOnce(b []llmflow.Record) error {
	if err := q.ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(q.ctx, q.timeout)
	defer cancel()
	return q.w.WriteRecords(ctx, b)
}

func (q *Queue) counted(n int) {
	q.written.Add(uint64(n))
	if q.onWrite != nil {
		q.onWrite(n, 0)
	}
	q.noteStoreResult(nil)
}

// noteStoreResult keeps the store's state for Health and logs a change
// (a failure at most once per WarnInterval).
func (q *Queue) noteStoreResult(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	if err == nil {
		if q.storeErr != nil {
			pending, _ := q.sp.Pending()
			q.log.Info("accounting store writes again", "failed_for", now.Sub(q.failingSince).Round(time.Millisecond).String(),
				"spooled", pending)
		}
		q.storeErr = nil
		q.noteRisk()
		return
	}
	if q.storeErr == nil {
		q.failingSince = now
	}
	q.storeErr = err
	q.noteRisk()
	q.storeErrors.Add(1)
	if now.Sub(q.lastFailLog) >= time.Duration(q.warnGap) {
		q.lastFailLog = now
		pending, _ := q.sp.Pending()
		q.log.Error("accounting store write failed: records stay in the spool and are retried",
			"spooled", pending, "in_memory", len(q.pending), "err", err)
	}
}

// finishSpooled runs at Close: it writes what it can; what the store does
// not take stays in the spool for the next start. Only records held in
// memory that neither the spool nor the store takes are given up.
func (q *Queue) finishSpooled(cur *spool.Cursor, buf *[]llmflow.Record) {
	if q.ctx.Err() == nil && !q.drainSpooled(cur, buf, true) {
		// The store fails: nothing in the spool is at risk, stop trying;
		// move what memory holds into the spool if it takes it now.
		q.rescue()
	}
	q.mu.Lock()
	lost := len(q.pending)
	q.pending = nil
	q.mu.Unlock()
	if lost > 0 {
		q.failed.Add(uint64(lost))
		q.abandoned.Add(uint64(lost))
		q.log.Error("accounting records held in memory given up at close (neither spool nor store took them)", "records", lost)
		if q.onWrite != nil {
			q.onWrite(0, lost)
		}
	}
	if n, _ := q.sp.Pending(); n > 0 {
		q.log.Warn("accounting records left in the spool: written at the next start", "records", n, "dir", q.sp.Dir())
	}
	if err := q.sp.Close(); err != nil {
		q.log.Error("accounting spool close", "err", err)
	}
}

// Health is the queue's state for /healthz and metrics.
type Health struct {
	Spool        bool   // spool mode
	SpoolDir     string `json:",omitempty"`
	SpoolRecords int64  // spooled, not yet in the store
	SpoolBytes   int64
	SpoolError   string    // why the spool refuses records; "" when it takes them
	InMemory     int       // records held in memory (memory mode: waiting; spool mode: the spool refused them)
	StoreError   string    // the last store write error; "" after a success
	FailingSince time.Time // when store writes started failing
	StoreErrors  uint64    // failed store writes so far
	Dropped      uint64
	Failed       uint64 // records given up
}

// noteRisk updates AtRisk after a change of the spool's or the store's
// state. q.mu is held.
func (q *Queue) noteRisk() {
	q.atRisk.Store(q.storeErr != nil && (q.sp == nil || q.spoolDown != nil))
}

// AtRisk reports whether neither the store nor the spool takes records
// now: store writes fail and there is no spool, or it refuses appends
// (its disk is full, it holds its maximum). Records are then held in
// memory only, and dropped once it is full. It reads one atomic word.
func (q *Queue) AtRisk() bool { return q.atRisk.Load() }

// Health returns the queue's state.
func (q *Queue) Health() Health {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := Health{Spool: q.sp != nil, InMemory: len(q.pending), StoreErrors: q.storeErrors.Load(),
		Dropped: q.dropped.Load(), Failed: q.failed.Load()}
	if q.sp == nil {
		h.InMemory = q.held
		return h
	}
	h.SpoolDir = q.sp.Dir()
	h.SpoolRecords, h.SpoolBytes = q.sp.Pending()
	if q.spoolDown != nil {
		h.SpoolError = q.spoolDown.Error()
	}
	if q.storeErr != nil {
		h.StoreError = q.storeErr.Error()
		h.FailingSince = q.failingSince
	}
	return h
}
