package spool

import (
	"bytes"
	"fmt"
	"github.com/go-llmflow/llmflow"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kill leaves s as a killed process would: the mapping's stores are in the
// page cache, its reserved tail is not cut, nothing is fsynced.
func kill(s *Spool) {
	if s.stopSync != nil {
		close(s.stopSync)
		<-s.syncDone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.m != nil {
		unmap(s.m) // what the kernel does at exit; the file keeps its size
		s.m = nil
	}
	s.closeFiles()
}

func needMap(t *testing.T) {
	if !canMap {
		t.Skip("appends are write(2)s on this system")
	}
}

// A killed process leaves the last segment at its reserved size, zeros
// after the last frame: Open keeps every record, cuts the zeros without a
// ".corrupt" file, and appends after them.
func TestMappedKillLeavesZeroTail(t *testing.T) {
	needMap(t)
	dir := t.TempDir()
	s, _ := open(t, dir, Options{})
	if s.m == nil {
		t.Skip("the file system cannot reserve space: no mapping to test")
	}
	for i := range 10 {
		if err := s.Append(ptr(testRecord(i))); err != nil {
			t.Fatal(err)
		}
	}
	seg := s.segs[len(s.segs)-1]
	frames := seg.size
	kill(s)
	fi, err := os.Stat(seg.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= frames {
		t.Fatalf("segment of %d bytes after the kill, frames end at %d: no reserved tail to test", fi.Size(), frames)
	}
	data, _ := os.ReadFile(seg.path)
	if recs, _ := Scan(data[:frames]); len(recs) != 10 {
		t.Fatalf("the killed segment holds %d good records, want 10", len(recs))
	}
	s2, rec := open(t, dir, Options{})
	defer s2.Close()
	if rec.Records != 10 || len(rec.Corrupted) != 0 || rec.CutBytes != 0 {
		t.Fatalf("recovery %+v, want 10 records and nothing moved aside", rec)
	}
	if fi, _ := os.Stat(seg.path); fi.Size() != frames {
		t.Errorf("recovered segment is %d bytes, want its %d bytes of frames", fi.Size(), frames)
	}
	s2.Append(ptr(testRecord(10)))
	got, _ := readAll(t, s2)
	if len(got) != 11 || got[10].RequestID != testRecord(10).RequestID {
		t.Fatalf("after recovery read %d records", len(got))
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.corrupt*")); len(m) != 0 {
		t.Errorf("files moved aside: %v", m)
	}
}

// Zeros after a torn frame are not a clean end: the bad frame and the
// zeros after it are moved aside.
func TestMappedTornFrameBeforeZeros(t *testing.T) {
	seg := []byte(segmentMagic)
	for i := range 3 {
		seg = appendFrame(seg, ptr(testRecord(i)))
	}
	torn := appendFrame(nil, ptr(testRecord(3)))
	data := append(bytes.Clone(seg), torn[:len(torn)/2]...)
	data = append(data, make([]byte, 4096)...)
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, segName(1)), data, 0o600)
	s, rec := open(t, d, Options{})
	defer s.Close()
	if rec.Records != 3 || len(rec.Corrupted) != 1 || rec.CutBytes != int64(len(data)-len(seg)) {
		t.Fatalf("recovery %+v, want 3 records and the torn frame with its zeros moved aside", rec)
	}
}

// Both ways of appending (a mapping, write(2)) give the same spool:
// segments, reads, commits, a crash and the replay.
func TestAppendWaysAgree(t *testing.T) {
	for _, noMap := range []bool{false, true} {
		t.Run(fmt.Sprintf("noMap=%v", noMap), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{SegmentBytes: 1024, noMap: noMap}
			s, _ := open(t, dir, o)
			if noMap != (s.m == nil) && canMap {
				t.Fatalf("noMap %v but mapping %v", noMap, s.m != nil)
			}
			var ends []Cursor
			for i := range 50 {
				c, err := s.AppendCursor(ptr(testRecord(i)))
				if err != nil {
					t.Fatal(err)
				}
				ends = append(ends, c)
			}
			got, c := readAll(t, s)
			if len(got) != 50 || c != ends[49] {
				t.Fatalf("read %d records to %v, last append ended at %v", len(got), c, ends[49])
			}
			if !s.AtEnd(c) || s.AtEnd(ends[48]) || s.AtEnd(s.Start()) {
				t.Fatal("AtEnd wrong")
			}
			// Commit the first 20 from the cursors Append gave, without
			// reading them.
			if err := s.Commit(ends[19], 20); err != nil {
				t.Fatal(err)
			}
			if p, _ := s.Pending(); p != 30 {
				t.Fatalf("pending %d, want 30", p)
			}
			crash(s)
			s2, rec := open(t, dir, o)
			defer s2.Close()
			if rec.Records != 30 || len(rec.Corrupted) != 0 {
				t.Fatalf("recovery %+v", rec)
			}
			got, _ = readAll(t, s2)
			if len(got) != 30 || got[0].RequestID != testRecord(20).RequestID {
				t.Fatalf("replayed %d records", len(got))
			}
			if ends[49].Seg < 3 {
				t.Fatalf("the test needs several segments, it used %d", ends[49].Seg)
			}
		})
	}
}

// A frame larger than what is left of a mapped segment's reservation, or
// than a whole reservation, starts a segment with room for it.
func TestMappedLargeFrame(t *testing.T) {
	needMap(t)
	s, _ := open(t, t.TempDir(), Options{MaxBytes: 1000, SegmentBytes: 1 << 20})
	defer s.Close()
	big := testRecord(1)
	big.RequestID = strings.Repeat("x", 20000)
	for i, r := range []llmflow.Record{testRecord(0), big} {
		if err := s.Append(&r); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	got, _ := readAll(t, s)
	if len(got) != 2 || got[1].RequestID != big.RequestID {
		t.Fatalf("read %d records back", len(got))
	}
	if len(s.segs) < 2 {
		t.Fatalf("%d segments: the large frame did not start one", len(s.segs))
	}
}

// A store into the mapping that faults (the file was cut under the
// spool) fails the append instead of crashing the process; the next
// append starts a new segment.
func TestMappedFaultIsAnError(t *testing.T) {
	needMap(t)
	s, _ := open(t, t.TempDir(), Options{})
	defer s.Close()
	if s.m == nil {
		t.Skip("no mapping")
	}
	s.Append(ptr(testRecord(0)))
	seg := s.segs[len(s.segs)-1]
	if err := os.Truncate(seg.path, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ptr(testRecord(1))); err == nil {
		t.Fatal("append into a cut mapping: no error")
	}
	if err := s.Append(ptr(testRecord(2))); err != nil {
		t.Fatalf("append after the fault: %v", err)
	}
	if len(s.segs) < 2 {
		t.Fatal("no new segment after the fault")
	}
}

func TestCheckpointFormat(t *testing.T) {
	for _, c := range []Cursor{{}, {Seg: 1, Off: 8}, {Seg: 1<<64 - 1, Off: 1<<63 - 1}} {
		b := formatCheckpoint(c)
		if len(b) != len(formatCheckpoint(Cursor{})) {
			t.Errorf("%v: %d bytes, not a fixed length", c, len(b))
		}
		if got, ok := parseCheckpoint(b); !ok || got != c {
			t.Errorf("%q read as %v %v", b, got, ok)
		}
		for i := range b[:len(b)-1] {
			bad := bytes.Clone(b)
			bad[i] ^= 0x04
			if got, ok := parseCheckpoint(bad); ok && got != c {
				t.Fatalf("%q (byte %d changed) read as %v", bad, i, got)
			}
		}
	}
	// Written by earlier versions: no checksum.
	if c, ok := parseCheckpoint([]byte("llmflow-spool-checkpoint 3 1234\n")); !ok || c != (Cursor{3, 1234}) {
		t.Errorf("old checkpoint read as %v %v", c, ok)
	}
	// read only in the form it is written: lowercase checksum, no sign
	b := formatCheckpoint(Cursor{Seg: 7, Off: 12345})
	upper := string(b[:len(b)-9]) + strings.ToUpper(string(b[len(b)-9:]))
	for _, bad := range []string{"", "llmflow-spool-checkpoint 3 1234", "llmflow-spool-checkpoint 3 -1\n", "x 3 4\n",
		"llmflow-spool-checkpoint 3 +1234\n", upper} {
		if c, ok := parseCheckpoint([]byte(bad)); ok {
			t.Errorf("%q read as %v", bad, c)
		}
	}
}

// The checkpoint is rewritten in place, and a reopened spool starts there.
func TestCheckpointInPlace(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, Options{})
	var ends []Cursor
	for i := range 5 {
		c, _ := s.AppendCursor(ptr(testRecord(i)))
		ends = append(ends, c)
	}
	s.Commit(ends[1], 2)
	path := filepath.Join(dir, checkpointName)
	before, _ := os.Stat(path)
	s.Commit(ends[3], 2)
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Error("the checkpoint file was replaced, not rewritten")
	}
	crash(s)
	s2, rec := open(t, dir, Options{})
	defer s2.Close()
	if rec.Records != 1 {
		t.Fatalf("reopened with %d records, want 1", rec.Records)
	}
}

// FuzzCheckpoint: any bytes give a position or none, never a panic; a
// position read back is what the same text gives when written again
// (for the current format).
func FuzzCheckpoint(f *testing.F) {
	f.Add(formatCheckpoint(Cursor{Seg: 7, Off: 12345}))
	f.Add([]byte("llmflow-spool-checkpoint 3 1234\n"))
	f.Add([]byte("llmflow-spool-checkpoint 00000000000000000003 00000000000000001234 deadbeef\n"))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := parseCheckpoint(b)
		if !ok {
			return
		}
		if c.Off < 0 {
			t.Fatalf("negative offset %v", c)
		}
		line, _, _ := bytes.Cut(b, []byte("\n"))
		if bytes.Count(line, []byte(" ")) == 3 && !bytes.Equal(formatCheckpoint(c), append(line, '\n')) {
			t.Fatalf("%q read as %v, which is written %q", b, c, formatCheckpoint(c))
		}
	})
}

// tmpfs mounts a tmpfs of size bytes for the test, or skips it.
func tmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			return
		}
	}
}

// A full disk: the records appended into a segment's reservation are
// kept, the append that finds no room fails cleanly (never a crash), and
// appends work again once there is room.
func TestFullDisk(t *testing.T) {
	mnt := tmpfs(t, 1<<20)
	dir := filepath.Join(mnt, "spool")
	s, _ := open(t, dir, Options{SegmentBytes: 256 << 10, Sync: SyncNever})
	defer s.Close()
	fill(t, filepath.Join(mnt, "filler"))
	n := 0
	var err error
	for ; n < 100000; n++ {
		if err = s.Append(ptr(testRecord(n))); err != nil {
			break
		}
	}
	if err == nil || n == 0 {
		t.Fatalf("%d appends on a full disk, then %v", n, err)
	}
	t.Logf("%d records appended on a full disk (mapped: %v), then: %v", n, canMap, err)
	got, _ := readAll(t, s)
	if len(got) != n {
		t.Fatalf("read %d records, appended %d", len(got), n)
	}
	if err := s.Append(ptr(testRecord(n))); err == nil {
		t.Fatal("an append succeeded with the disk still full")
	}
	os.Remove(filepath.Join(mnt, "filler"))
	if err := s.Append(ptr(testRecord(n))); err != nil {
		t.Fatalf("append once there is room: %v", err)
	}
	got, _ = readAll(t, s)
	if len(got) != n+1 || got[n].RequestID != testRecord(n).RequestID {
		t.Fatalf("read %d records after the disk had room again", len(got))
	}
}

// A disk without room for a segment's reservation: the spool opens and
// appends with write(2)s.
func TestNoRoomForReservation(t *testing.T) {
	mnt := tmpfs(t, 256<<10)
	s, _ := open(t, filepath.Join(mnt, "spool"), Options{})
	defer s.Close()
	if s.m != nil {
		t.Fatal("a 16 MiB reservation on a 256 KiB disk")
	}
	for i := range 10 {
		if err := s.Append(ptr(testRecord(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := readAll(t, s); len(got) != 10 {
		t.Fatalf("read %d", len(got))
	}
}
