package accounting_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/spool"
)

// In spool mode too, Enqueue does not wake the writer per record: records
// below the batch size cause no wake-up, and a thousand records in batches
// of 100 wake it about ten times; every batch the store gets is full.
func TestSpooled_NoWakeupPerRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWriter{}
		q := accounting.New(w, accounting.Options{BatchSize: 100, FlushInterval: time.Hour,
			Spool: openSpool(t, t.TempDir(), spool.Options{Sync: spool.SyncNever})})
		for i := range 99 {
			q.Enqueue(rec(i))
		}
		synctest.Wait()
		if n := accounting.Wakeups(q); n != 0 {
			t.Fatalf("%d writer wake-ups for 99 records below the batch size, want 0", n)
		}
		for i := 99; i < 1000; i++ {
			q.Enqueue(rec(i))
			if i%7 == 0 {
				synctest.Wait() // let the writer run now and then
			}
		}
		synctest.Wait()
		if n := accounting.Wakeups(q); n == 0 || n > 10 {
			t.Errorf("%d wake-ups for 1000 records in batches of 100, want 1 to 10", n)
		}
		if err := q.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, n := range w.batchSizes() {
			if n != 100 {
				t.Errorf("batch %d of %d records, want 100", i, n)
			}
		}
		got := w.stored()
		if len(got) != 1000 || !slices.IsSortedFunc(got, func(a, b llmflow.Record) int { return idNum(a) - idNum(b) }) {
			t.Fatalf("%d records stored, or out of order", len(got))
		}
	})
}

func idNum(r llmflow.Record) int {
	n := 0
	for _, c := range r.RequestID[1:] {
		n = 10*n + int(c-'0')
	}
	return n
}

// The writer takes what Enqueue spooled from memory: the store gets the
// records themselves (their tags are the very slices enqueued), not
// copies read back and decoded from the spool.
func TestSpooled_WriterDoesNotReadBack(t *testing.T) {
	w := &fakeWriter{}
	q := accounting.New(w, accounting.Options{BatchSize: 10, FlushInterval: time.Hour,
		Spool: openSpool(t, t.TempDir(), spool.Options{})})
	tags := make([][]string, 30)
	for i := range tags {
		r := rec(i)
		tags[i] = []string{"t"}
		r.Tags = tags[i]
		q.Enqueue(r)
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := w.stored()
	if len(got) != 30 {
		t.Fatalf("%d stored", len(got))
	}
	for i, r := range got {
		if &r.Tags[0] != &tags[i][0] {
			t.Fatalf("record %d was read back from the spool, not taken from memory", i)
		}
	}
}

// When the store falls a whole queue behind, the mirror stops and the
// writer reads the spool; once it has caught up the mirror starts again.
// Every record is stored once, in order, throughout.
func TestSpooled_MirrorOverflowReadsSpool(t *testing.T) {
	w := &dedupWriter{}
	w.down.Store(true)
	q := accounting.New(w, accounting.Options{QueueSize: 20, BatchSize: 5, FlushInterval: 5 * time.Millisecond,
		Spool: openSpool(t, t.TempDir(), spool.Options{SegmentBytes: 1024})})
	if !accounting.Mirroring(q) {
		t.Fatal("an empty spool does not start mirroring")
	}
	for i := range 100 {
		if !q.Enqueue(rec(i)) {
			t.Fatalf("record %d refused: the spool takes it", i)
		}
	}
	if accounting.Mirroring(q) {
		t.Fatal("100 records held for a store that is down, and the mirror (QueueSize 20) still on")
	}
	w.down.Store(false)
	waitFor(t, "the spool drained and the mirror back", func() bool { return q.Len() == 0 && accounting.Mirroring(q) })
	for i := 100; i < 150; i++ {
		q.Enqueue(rec(i))
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantInOrder(t, w.stored(), 150)
	if written, failed, dropped := q.Counts(); written != 150 || failed != 0 || dropped != 0 {
		t.Fatalf("counts %d %d %d", written, failed, dropped)
	}
}

// A restart replays what the spool holds by reading it, then mirrors.
func TestSpooled_ReplayThenMirror(t *testing.T) {
	dir := t.TempDir()
	w := &dedupWriter{}
	w.down.Store(true)
	q := accounting.New(w, accounting.Options{BatchSize: 10, FlushInterval: time.Hour, Spool: openSpool(t, dir, spool.Options{})})
	for i := range 25 {
		q.Enqueue(rec(i))
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	q2 := accounting.New(w, accounting.Options{BatchSize: 10, FlushInterval: 5 * time.Millisecond, Spool: openSpool(t, dir, spool.Options{})})
	if accounting.Mirroring(q2) {
		t.Fatal("mirroring with 25 records to replay")
	}
	waitFor(t, "a failed replay", func() bool { return q2.Health().StoreErrors > 0 })
	if accounting.Mirroring(q2) {
		t.Fatal("mirroring before the replay")
	}
	w.down.Store(false)
	waitFor(t, "the replay", func() bool { return len(w.stored()) == 25 && accounting.Mirroring(q2) })
	for i := 25; i < 40; i++ {
		q2.Enqueue(rec(i))
	}
	if err := q2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantInOrder(t, w.stored(), 40)
}
