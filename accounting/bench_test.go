package accounting_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/spool"
)

// discardWriter writes nothing, instantly.
type discardWriter struct{ calls atomic.Int64 }

func (d *discardWriter) WriteRecords(context.Context, []llmflow.Record) error {
	d.calls.Add(1)
	return nil
}

// benchRecord is a record of realistic size (strings shared, as the
// gateway's are).
var benchRecord = llmflow.Record{
	Time: time.Unix(1_700_000_000, 0), RequestID: "gw1-0000000000000001",
	KeyID: "key_0123456789abcdef", Team: "lab-nlp", Org: "etabA", Model: "sim-llama", Pool: "sim", Upstream: "sim0",
	PromptTokens: 21, CompletionTokens: 3, GPUHours: 1e-6, Status: 200, Outcome: llmflow.OutcomeOK,
}

// BenchmarkEnqueue measures Enqueue from parallel goroutines with an
// instant writer and the default sizes, against the previous design (a
// channel send per record, which wakes the writer each time it waits).
// Each goroutine yields after each Enqueue, as a request goroutine soon
// parks on the network: without it the producers starve the writer
// (both designs would then measure a full queue, not the hand-off). The
// yield costs the same in both, so compare the two, not the absolute
// figure. Records dropped are reported, not hidden.
//
//	go test -run '^$' -bench Enqueue -cpu 1,2 ./accounting
func BenchmarkEnqueue(b *testing.B) {
	b.Run("Queue", func(b *testing.B) {
		w := &discardWriter{}
		q := accounting.New(w, accounting.Options{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				q.Enqueue(benchRecord)
				runtime.Gosched()
			}
		})
		b.StopTimer()
		if err := q.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		_, _, dropped := q.Counts()
		b.ReportMetric(float64(dropped), "dropped")
		b.ReportMetric(float64(b.N)/float64(w.calls.Load()), "records/write")
	})
	for _, pol := range []spool.SyncPolicy{spool.SyncInterval, spool.SyncAlways} {
		b.Run("Spool-"+pol.String(), func(b *testing.B) {
			w := &discardWriter{}
			sp, _, err := spool.Open(b.TempDir(), spool.Options{Sync: pol})
			if err != nil {
				b.Fatal(err)
			}
			q := accounting.New(w, accounting.Options{Spool: sp})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					q.Enqueue(benchRecord)
					runtime.Gosched()
				}
			})
			b.StopTimer()
			if err := q.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
			_, _, dropped := q.Counts()
			b.ReportMetric(float64(dropped), "dropped")
		})
	}
	b.Run("Channel", func(b *testing.B) {
		w := &discardWriter{}
		q := newChanQueue(w, accounting.DefaultQueueSize, accounting.DefaultBatchSize, accounting.DefaultFlushInterval)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				q.enqueue(benchRecord)
				runtime.Gosched()
			}
		})
		b.StopTimer()
		q.close()
		b.ReportMetric(float64(q.dropped.Load()), "dropped")
		b.ReportMetric(float64(b.N)/float64(w.calls.Load()), "records/write")
	})
}

// chanQueue is the previous design, kept here only for comparison: every
// record is a channel send that wakes the writer goroutine.
type chanQueue struct {
	w        accounting.Writer
	q        chan llmflow.Record
	batch    int
	interval time.Duration
	dropped  atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

func newChanQueue(w accounting.Writer, size, batch int, interval time.Duration) *chanQueue {
	q := &chanQueue{w: w, q: make(chan llmflow.Record, size), batch: batch, interval: interval,
		stop: make(chan struct{}), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *chanQueue) enqueue(rec llmflow.Record) bool {
	select {
	case q.q <- rec:
		return true
	default:
		q.dropped.Add(1)
		return false
	}
}

func (q *chanQueue) run() {
	defer close(q.done)
	buf := make([]llmflow.Record, 0, q.batch)
	t := time.NewTimer(q.interval)
	defer t.Stop()
	for {
		select {
		case rec := <-q.q:
			buf = append(buf, rec)
			if len(buf) >= q.batch {
				buf = q.flush(buf)
			}
		case <-t.C:
			buf = q.flush(buf)
			t.Reset(q.interval)
		case <-q.stop:
			for {
				select {
				case rec := <-q.q:
					buf = append(buf, rec)
					if len(buf) >= q.batch {
						buf = q.flush(buf)
					}
				default:
					q.flush(buf)
					return
				}
			}
		}
	}
}

func (q *chanQueue) flush(buf []llmflow.Record) []llmflow.Record {
	if len(buf) > 0 {
		q.w.WriteRecords(context.Background(), buf)
	}
	clear(buf)
	return buf[:0]
}

func (q *chanQueue) close() {
	q.once.Do(func() { close(q.stop) })
	<-q.done
}
