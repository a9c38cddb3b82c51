package spool

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

func testRecord(i int) llmflow.Record {
	r := llmflow.Record{
		Time:      time.Date(2026, 12, 1, 5, 0, 0, i*1000, time.UTC),
		RequestID: fmt.Sprintf("req_%06d", i),
		KeyID:     "key1", Project: "p", Team: "t", Org: "o", Model: "m", Pool: "gpu", Upstream: "u1",
		PromptTokens: int64(i), CompletionTokens: 2 * int64(i), CachedTokens: 1, GPUHours: 0.001 * float64(i),
		Status: 200, Outcome: llmflow.Outcome("ok"), Stream: i%2 == 0, Priority: i % 7,
		Latency: time.Duration(i) * time.Millisecond, TTFB: time.Millisecond,
	}
	if i%3 == 0 {
		r.Tags = []string{"a", "b"}
		r.Estimated = true
		r.EstimateReason = llmflow.EstimateReason("no_usage")
	}
	return r
}

func open(t *testing.T, dir string, opts Options) (*Spool, *Recovery) {
	t.Helper()
	s, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, rec
}

// readAll reads every record from the spool's start.
func readAll(t *testing.T, s *Spool) ([]llmflow.Record, Cursor) {
	t.Helper()
	var out []llmflow.Record
	c := s.Start()
	for {
		n := len(out)
		var err error
		out, c, err = s.Read(c, 7, out)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) == n {
			return out, c
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	cases := []llmflow.Record{
		{},
		testRecord(0), testRecord(3), testRecord(1234567),
		{RequestID: "x", Time: time.Unix(-5, 999_999_999).UTC(), GPUHours: math.Inf(1), PromptTokens: -1, Priority: -3, Tags: []string{""}},
		{RequestID: strings.Repeat("é", 1000), Latency: math.MaxInt64, TTFB: math.MinInt64},
	}
	for i, r := range cases {
		b := appendFrame(nil, &r)
		got, n, err := nextFrame(b)
		if err != nil || n != len(b) {
			t.Fatalf("case %d: n=%d/%d err=%v", i, n, len(b), err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("case %d:\n got %+v\nwant %+v", i, got, r)
		}
	}
}

func TestAppendReadCommitReopen(t *testing.T) {
	dir := t.TempDir()
	s, rec := open(t, dir, Options{SegmentBytes: 1024})
	if rec.Records != 0 {
		t.Fatalf("fresh spool: %+v", rec)
	}
	for i := range 50 {
		r := testRecord(i)
		if err := s.Append(&r); err != nil {
			t.Fatal(err)
		}
	}
	if p, _ := s.Pending(); p != 50 {
		t.Fatalf("pending %d, want 50", p)
	}
	got, _ := readAll(t, s)
	if len(got) != 50 {
		t.Fatalf("read %d records, want 50", len(got))
	}
	for i, r := range got {
		if want := testRecord(i); !reflect.DeepEqual(r, want) {
			t.Fatalf("record %d: got %+v want %+v", i, r, want)
		}
	}
	// Commit the first 20, then crash (no Close): the 30 others come back.
	c := s.Start()
	var part []llmflow.Record
	for len(part) < 20 {
		var err error
		part, c, err = s.Read(c, 20-len(part), part)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(c, 20); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Pending(); p != 30 {
		t.Fatalf("pending after commit %d, want 30", p)
	}
	crash(s) // no final sync, no cleanup

	s2, rec := open(t, dir, Options{SegmentBytes: 1024})
	defer s2.Close()
	if rec.Records != 30 || len(rec.Corrupted) != 0 {
		t.Fatalf("recovery %+v, want 30 records, nothing cut", rec)
	}
	got, _ = readAll(t, s2)
	if len(got) != 30 || got[0].RequestID != testRecord(20).RequestID || got[29].RequestID != testRecord(49).RequestID {
		t.Fatalf("replayed %d records from %q", len(got), got[0].RequestID)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segExt))
	for _, p := range segs {
		if filepath.Base(p) < segName(c.Seg) {
			t.Errorf("segment %s before the checkpoint's (%d) kept", p, c.Seg)
		}
	}
	if c.Seg < 2 {
		t.Fatalf("the test needs the checkpoint past the first segment, it is in %d", c.Seg)
	}
}

func TestCloseAfterEverythingCommittedLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Options{})
	r := testRecord(1)
	s.Append(&r)
	got, c := readAll(t, s)
	if err := s.Commit(c, len(got)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segExt))
	if len(segs) != 0 {
		t.Errorf("segments left: %v", segs)
	}
	s2, rec := open(t, dir, Options{})
	defer s2.Close()
	if rec.Records != 0 {
		t.Errorf("records after a clean close: %d", rec.Records)
	}
}

// TestTornTail cuts the last segment inside every byte of its last frame
// and flips a byte in it: Open keeps the good records before it, moves the
// bad tail aside and appends after it.
func TestTornTail(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Options{})
	for i := range 10 {
		r := testRecord(i)
		s.Append(&r)
	}
	seg := s.segs[len(s.segs)-1].path
	crash(s)
	whole, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	last := len(appendFrame(nil, ptr(testRecord(9))))
	for cut := len(whole) - last + 1; cut < len(whole); cut += 7 {
		for _, flip := range []bool{false, true} {
			name := fmt.Sprintf("cut%d-flip%v", cut, flip)
			t.Run(name, func(t *testing.T) {
				d := t.TempDir()
				data := bytes.Clone(whole[:cut])
				if flip {
					data = bytes.Clone(whole)
					data[cut] ^= 0x40
				}
				os.WriteFile(filepath.Join(d, filepath.Base(seg)), data, 0o600)
				s, rec := open(t, d, Options{})
				defer s.Close()
				if rec.Records != 9 || len(rec.Corrupted) != 1 {
					t.Fatalf("recovery %+v, want 9 records and one cut", rec)
				}
				moved, _ := os.ReadFile(rec.Corrupted[0])
				if int64(len(moved)) != rec.CutBytes || len(moved) == 0 {
					t.Errorf("moved %d bytes, reported %d", len(moved), rec.CutBytes)
				}
				r := testRecord(100)
				if err := s.Append(&r); err != nil {
					t.Fatal(err)
				}
				got, _ := readAll(t, s)
				if len(got) != 10 || got[8].RequestID != testRecord(8).RequestID || got[9].RequestID != r.RequestID {
					t.Fatalf("after recovery read %d records", len(got))
				}
			})
		}
	}
}

func ptr[T any](v T) *T { return &v }

// crash stops s as a killed process would: no final fsync, no cleanup.
func crash(s *Spool) {
	if s.stopSync != nil {
		close(s.stopSync)
		<-s.syncDone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.closeFiles()
}

func TestOneProcessPerDirectory(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Options{})
	if _, _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v, want in use", err)
	}
	s.Close()
	s2, _ := open(t, dir, Options{})
	s2.Close()
}

func TestRefusesSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	if _, _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("Open of a 0777 directory: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, _, err := Open(f, Options{}); err == nil {
		t.Fatal("Open of a file succeeded")
	}
}

func TestFull(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{MaxBytes: 500})
	defer s.Close()
	var err error
	n := 0
	for ; n < 100; n++ {
		if err = s.Append(ptr(testRecord(n))); err != nil {
			break
		}
	}
	if err != ErrFull || n == 0 || n == 100 {
		t.Fatalf("after %d appends: %v, want ErrFull", n, err)
	}
	got, c := readAll(t, s)
	if len(got) != n {
		t.Fatalf("read %d, appended %d", len(got), n)
	}
	s.Commit(c, n)
	if err := s.Append(ptr(testRecord(1000))); err != nil {
		t.Fatalf("append after commit: %v", err)
	}
}

func TestSyncPolicies(t *testing.T) {
	for _, p := range []string{"always", "interval", "never"} {
		pol, err := ParseSyncPolicy(p)
		if err != nil || pol.String() != p {
			t.Fatalf("%s: %v %v", p, pol, err)
		}
		s, _ := open(t, t.TempDir(), Options{Sync: pol, SyncEvery: time.Millisecond})
		s.Append(ptr(testRecord(1)))
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if _, err := ParseSyncPolicy("sometimes"); err == nil {
		t.Fatal("sometimes accepted")
	}
}

// TestReadDetectsChangedFile: a frame damaged under a running spool is
// reported by Read, and Skip moves past it.
func TestReadDetectsChangedFile(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Options{})
	defer s.Close()
	for i := range 5 {
		s.Append(ptr(testRecord(i)))
	}
	seg := s.segs[len(s.segs)-1]
	f, _ := os.OpenFile(seg.path, os.O_WRONLY, 0)
	f.WriteAt([]byte{0xff}, seg.size-3)
	f.Close()
	got, c, err := s.Read(s.Start(), 100, nil)
	if len(got) != 4 || err != nil {
		t.Fatalf("first read: %d records, %v", len(got), err)
	}
	_, _, err = s.Read(c, 100, nil)
	var ce *CorruptError
	if !errorsAs(err, &ce) {
		t.Fatalf("second read: %v, want CorruptError", err)
	}
	next, err := s.Skip(c)
	if err != nil {
		t.Fatal(err)
	}
	s.Append(ptr(testRecord(9)))
	got, _, err = s.Read(next, 100, nil)
	if err != nil || len(got) != 1 || got[0].RequestID != testRecord(9).RequestID {
		t.Fatalf("after skip: %v %v", got, err)
	}
}

func errorsAs(err error, target **CorruptError) bool {
	ce, ok := err.(*CorruptError)
	if ok {
		*target = ce
	}
	return ok
}

// FuzzScan: any bytes after a header give the good frames before the
// first bad one and an error for it, never a panic; records read back
// encode to the same bytes. Seeds are real segments, cut and flipped.
func FuzzScan(f *testing.F) {
	seg := []byte(segmentMagic)
	for i := range 4 {
		seg = appendFrame(seg, ptr(testRecord(i)))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-5])
	f.Add(append(bytes.Clone(seg), 0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4))
	f.Add([]byte(segmentMagic))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Scan(data)
		if len(data) < len(segmentMagic) || string(data[:len(segmentMagic)]) != segmentMagic {
			if err == nil {
				t.Fatal("no header accepted")
			}
			return
		}
		b := []byte(segmentMagic)
		for i := range recs {
			b = appendFrame(b, &recs[i])
		}
		if !bytes.Equal(b, data[:len(b)]) {
			t.Fatal("records read back do not re-encode to the bytes they came from")
		}
		if (err == nil) != (len(b) == len(data)) {
			t.Fatalf("err %v with %d of %d bytes accepted", err, len(b), len(data))
		}
	})
}

// TestOpenAgreesWithScan: on damaged segments (bytes changed, cut,
// inserted at random), Open keeps exactly the records Scan accepts, moves
// the rest aside, and the spool appends after them.
func TestOpenAgreesWithScan(t *testing.T) {
	seg := []byte(segmentMagic)
	for i := range 4 {
		seg = appendFrame(seg, ptr(testRecord(i)))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		data := bytes.Clone(seg)
		for range rng.IntN(3) + 1 {
			switch p := rng.IntN(len(data)); rng.IntN(3) {
			case 0:
				data[p] = byte(rng.IntN(256))
			case 1:
				data = data[:p+1]
			default:
				data = slices.Insert(data, p, byte(rng.IntN(256)))
			}
		}
		recs, _ := Scan(data)
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, segName(1)), data, 0o600)
		s, rec, err := Open(d, Options{Sync: SyncNever})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Records != int64(len(recs)) {
			t.Fatalf("Open kept %d records, Scan %d, of %x", rec.Records, len(recs), data)
		}
		s.Append(ptr(testRecord(99)))
		got, _ := readAll(t, s)
		if len(got) != len(recs)+1 || got[len(got)-1].RequestID != testRecord(99).RequestID {
			t.Fatalf("after Open: %d records, want %d then the new one", len(got), len(recs))
		}
		s.Close()
	}
}

// FuzzPayload: decodePayload never panics, and what it accepts
// re-encodes to the same bytes (one encoding per record).
func FuzzPayload(f *testing.F) {
	for i := range 4 {
		f.Add(appendPayload(nil, ptr(testRecord(i))))
	}
	f.Add([]byte{1})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodePayload(b)
		if err != nil {
			return
		}
		if got := appendPayload(nil, &r); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, was %x", got, b)
		}
	})
}

// BenchmarkAppend is the cost the request path pays per record: encode
// and one write(2) (SyncInterval: the fsync is another goroutine's).
func BenchmarkAppend(b *testing.B) {
	s, _, err := Open(b.TempDir(), Options{SegmentBytes: 1 << 30, MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := testRecord(42)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Append(&r); err != nil {
			b.Fatal(err)
		}
	}
}
