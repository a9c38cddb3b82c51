// Package spool is the accounting spool: an append-only, checksummed
// log of accounting records on disk, in segment files in one directory,
// with a checkpoint saying how far the store has taken them.
//
// The gateway appends every record before its response completes and a
// single reader (the accounting writer) takes them to the store in order,
// committing its position after each stored batch. What the store has not
// confirmed is still on disk after a crash and is read again at the next
// Open; the store drops records it already holds (idempotent by request
// id), so every record is stored exactly once.
//
// Durability (Options.Sync):
//
//   - An append puts the whole frame into the segment file's page cache
//     before it returns: on Linux by a copy into a shared mapping of the
//     segment (its space reserved beforehand with fallocate, so the copy
//     never needs a block the disk does not have: no system call on the
//     request path), elsewhere, or where the file system cannot reserve
//     space, or the disk has no room for a segment's reservation, by one
//     write(2). Once Append returns the record is in the kernel, so kill -9
//     (or any crash of the process) loses nothing, whatever the policy.
//   - A power loss or kernel crash loses what was not yet fsynced: with
//     SyncAlways nothing (each Append waits for fsync, a disk flush per
//     request); with SyncInterval the records of the last interval (default
//     100 ms); with SyncNever whatever the kernel had not written back
//     (typically up to 30 s).
//   - A write torn by a power loss leaves a frame whose length or CRC-32C
//     does not match. Open keeps every good frame before it, moves the rest
//     of the segment to a ".corrupt" file beside it (for inspection; never
//     replayed) and cuts the segment there. A tail of zeros (the unused
//     reservation of a mapped segment after a crash, or blocks a power loss
//     left unwritten) holds no frame: Open cuts it without a ".corrupt"
//     file.
//
// One process owns a spool directory at a time (an flock on its lock
// file): two gateways on one host need two directories.
package spool

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-llmflow/llmflow"
)

// SyncPolicy says when appended records are fsynced.
type SyncPolicy int

const (
	// SyncInterval fsyncs the segment being appended every Options.SyncEvery.
	SyncInterval SyncPolicy = iota
	// SyncAlways fsyncs after every append, before Append returns.
	SyncAlways
	// SyncNever leaves write-back to the kernel.
	SyncNever
)

// ParseSyncPolicy parses "interval", "always" or "never".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch s {
	case "", "interval":
		return SyncInterval, nil
	case "always":
		return SyncAlways, nil
	case "never":
		return SyncNever, nil
	}
	return 0, fmt.Errorf("spool sync %q: want interval, always or never", s)
}

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncNever:
		return "never"
	}
	return "interval"
}

// Defaults for the zero fields of Options.
const (
	DefaultSegmentBytes = 16 << 20
	DefaultMaxBytes     = 1 << 30
	DefaultSyncEvery    = 100 * time.Millisecond
)

// Options tune a spool. The zero value works.
type Options struct {
	Sync      SyncPolicy
	SyncEvery time.Duration // SyncInterval's period; 0 = DefaultSyncEvery
	// SegmentBytes is the size after which appends go to a new segment;
	// segments the store has fully taken are deleted. A mapped segment
	// reserves min(SegmentBytes, MaxBytes, 64 MiB) on disk when it starts,
	// and also ends when that is full. 0 = DefaultSegmentBytes.
	SegmentBytes int64
	// MaxBytes bounds the bytes not yet taken by the store: beyond it
	// Append refuses with ErrFull. 0 = DefaultMaxBytes.
	MaxBytes int64
	Log      *slog.Logger // nil = discard

	noMap bool // tests: every append a write(2)
}

// ErrFull is returned by Append when the spool holds MaxBytes not yet
// committed.
var ErrFull = errors.New("spool full")

// Cursor is a position in the spool: a segment and a byte offset in it.
type Cursor struct {
	Seg uint64
	Off int64
}

// Recovery says what Open found.
type Recovery struct {
	Records   int64    // records not yet committed, to be replayed
	Bytes     int64    // their size on disk
	Segments  int      // segment files kept
	Corrupted []string // files holding a cut-off bad tail (torn write or corruption)
	CutBytes  int64    // bytes moved to them
}

// segment is one segment file. size is the end of its last good frame:
// readers never look beyond it, appends go there (in the file, or in
// Spool.m for the last segment when it is mapped).
type segment struct {
	seq  uint64
	path string
	size int64
	r    *os.File // read handle, opened on first read
}

// Spool is an open spool directory. Append may be called from any
// goroutine; Read and Commit from one reader at a time.
type Spool struct {
	dir  string
	opts Options
	log  *slog.Logger
	lock *os.File

	mu        sync.Mutex
	segs      []*segment // ascending seq; the last is being appended
	w         *os.File   // append handle of the last segment
	m         []byte     // the last segment's shared mapping (its reserved space); nil: appends write(2)
	mapping   bool       // new segments are reserved and mapped (false once the file system cannot)
	cp        *os.File   // the checkpoint file, rewritten in place
	buf       []byte     // frame buffer, reused
	committed Cursor
	cpSeg     uint64 // the segment of the checkpoint read at Open
	pending   int64  // records appended (or found at Open) and not committed
	pendBytes int64
	dirty     bool // appended since the last fsync
	broken    error
	closed    bool

	stopSync chan struct{}
	syncDone chan struct{}
}

const (
	lockName       = "lock"
	checkpointName = "checkpoint"
	segExt         = ".spool"
)

func segName(seq uint64) string { return fmt.Sprintf("%016d%s", seq, segExt) }

// Open opens (creating it, mode 0700) the spool in dir: it takes the
// directory's lock, reads the checkpoint, checks every frame after it
// (cutting a bad tail, see the package comment), deletes the segments the
// store has taken and starts a new segment for appends.
func Open(dir string, opts Options) (*Spool, *Recovery, error) {
	if opts.SyncEvery <= 0 {
		opts.SyncEvery = DefaultSyncEvery
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	s := &Spool{dir: dir, opts: opts, log: opts.Log, mapping: canMap && !opts.noMap}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("spool: %w", err)
	}
	// Whoever can write the spool can add records (a CRC is no
	// signature): it must be the gateway's alone.
	if fi, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("spool: %w", err)
	} else if !fi.IsDir() {
		return nil, nil, fmt.Errorf("spool %s is not a directory", dir)
	} else if fi.Mode().Perm()&0o022 != 0 {
		return nil, nil, fmt.Errorf("spool %s is writable by group or others (mode %04o): chmod 700 it", dir, fi.Mode().Perm())
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("spool: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("spool %s is in use by another process (each gateway needs its own spool_dir): %w", dir, err)
	}
	s.lock = lock
	rec, err := s.recover()
	if err == nil {
		err = s.newSegment(0)
	}
	if err != nil {
		s.closeFiles()
		return nil, nil, err
	}
	if opts.Sync == SyncInterval {
		s.stopSync = make(chan struct{})
		s.syncDone = make(chan struct{})
		go s.syncLoop()
	}
	return s, rec, nil
}

// recover reads the checkpoint and the segments.
func (s *Spool) recover() (*Recovery, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	var seqs []uint64
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, segExt) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(name, segExt), 10, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	cp, err := s.readCheckpoint()
	if err != nil {
		return nil, err
	}
	rec := &Recovery{}
	for _, seq := range seqs {
		path := filepath.Join(s.dir, segName(seq))
		if seq < cp.Seg {
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("spool: %w", err)
			}
			continue
		}
		seg := &segment{seq: seq, path: path}
		from := int64(len(segmentMagic))
		if seq == cp.Seg {
			from = max(from, cp.Off)
		}
		n, good, cut, err := checkSegment(path, from)
		if err != nil {
			return nil, err
		}
		seg.size = good
		if cut != "" {
			rec.Corrupted = append(rec.Corrupted, cut)
			rec.CutBytes += n.cut
			s.log.Error("accounting spool: bad frame, tail moved aside (records before it kept)",
				"segment", path, "offset", good, "bytes", n.cut, "moved_to", cut)
		}
		rec.Records += n.records
		rec.Bytes += n.bytes
		s.segs = append(s.segs, seg)
	}
	rec.Segments = len(s.segs)
	s.committed = cp
	s.cpSeg = cp.Seg
	if len(s.segs) > 0 && s.segs[0].seq > cp.Seg {
		s.committed = Cursor{Seg: s.segs[0].seq, Off: int64(len(segmentMagic))}
	}
	if len(s.segs) > 0 && s.segs[0].seq == cp.Seg {
		s.committed.Off = min(max(cp.Off, int64(len(segmentMagic))), s.segs[0].size)
	}
	s.pending, s.pendBytes = rec.Records, rec.Bytes
	return rec, nil
}

type segCount struct{ records, bytes, cut int64 }

// checkSegment checks the frames of the segment at path from offset from.
// A bad frame (or a bad header) cuts the file there, after copying the
// rest to a ".corrupt" file whose name it returns. It returns the good
// records and bytes after from, and the end of the last good frame.
func checkSegment(path string, from int64) (segCount, int64, string, error) {
	var n segCount
	data, err := os.ReadFile(path)
	if err != nil {
		return n, 0, "", fmt.Errorf("spool: %w", err)
	}
	good := int64(len(segmentMagic))
	if len(data) < len(segmentMagic) || string(data[:len(segmentMagic)]) != segmentMagic {
		good = 0 // not a segment: keep nothing of it
		if len(data) == 0 {
			// Created, never written (a crash right after creating it).
			return n, 0, "", writeHeader(path)
		}
	} else {
		if from > int64(len(data)) {
			from = int64(len(data))
		}
		// from is a frame boundary (the checkpoint is written only
		// there): the frames before it were taken by the store already.
		recs, end := scan(data, from)
		good = end
		n.records = recs
		n.bytes = end - from
		if good == int64(len(data)) {
			return n, good, "", nil
		}
		if allZero(data[good:]) {
			// No frame: a mapped segment's unused reservation (a crash
			// before Close cut it), or blocks never written.
			if err := os.Truncate(path, good); err != nil {
				return n, 0, "", fmt.Errorf("spool: cut zero tail: %w", err)
			}
			return n, good, "", nil
		}
	}
	cut := fmt.Sprintf("%s.corrupt-%d", path, good)
	if err := os.WriteFile(cut, data[good:], 0o600); err != nil {
		return n, 0, "", fmt.Errorf("spool: keep bad tail: %w", err)
	}
	n.cut = int64(len(data)) - good
	if good == 0 {
		if err := writeHeader(path); err != nil {
			return n, 0, "", err
		}
		return n, int64(len(segmentMagic)), cut, nil
	}
	if err := os.Truncate(path, good); err != nil {
		return n, 0, "", fmt.Errorf("spool: cut bad tail: %w", err)
	}
	return n, good, cut, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// scan walks the frames of a segment's data from offset from and returns
// how many are good and the end of the last good one.
func scan(data []byte, from int64) (records, end int64) {
	off := from
	for off < int64(len(data)) {
		_, n, err := nextFrame(data[off:])
		if err != nil {
			break
		}
		records++
		off += int64(n)
	}
	return records, off
}

// Scan returns the records of one segment file's bytes in order, and the
// error of the first bad frame (nil when every byte is a good frame). It
// is what Open and Read accept, for tests and tools (Open also drops a
// tail of zeros silently: no frame starts with a zero length).
func Scan(data []byte) ([]llmflow.Record, error) {
	if len(data) < len(segmentMagic) || string(data[:len(segmentMagic)]) != segmentMagic {
		return nil, errors.New("not a spool segment (bad header)")
	}
	var out []llmflow.Record
	b := data[len(segmentMagic):]
	for len(b) > 0 {
		r, n, err := nextFrame(b)
		if err != nil {
			return out, fmt.Errorf("offset %d: %w", len(data)-len(b), err)
		}
		out = append(out, r)
		b = b[n:]
	}
	return out, nil
}

func writeHeader(path string) error {
	if err := os.WriteFile(path, []byte(segmentMagic), 0o600); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// checkpoint file: "llmflow-spool-checkpoint <seg> <off> <crc>\n", seg and
// off in 20 digits, crc the CRC-32C of what precedes it in 8 hex digits,
// rewritten in place (one pwrite of a fixed length, no rename: a rename
// over the old file makes ext4 write the new one back at once). A torn
// or otherwise unreadable checkpoint, like a lost or stale one, only
// means records are read again, which the store drops as duplicates. The
// line without crc (written by earlier versions) is read too.
const checkpointPrefix = "llmflow-spool-checkpoint"

func (s *Spool) readCheckpoint() (Cursor, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, checkpointName))
	if errors.Is(err, os.ErrNotExist) {
		return Cursor{}, nil
	}
	if err != nil {
		return Cursor{}, fmt.Errorf("spool: %w", err)
	}
	c, ok := parseCheckpoint(b)
	if !ok {
		// Unreadable: replay everything kept (duplicates are dropped).
		s.log.Warn("accounting spool: checkpoint unreadable, replaying every segment", "dir", s.dir)
		return Cursor{}, nil
	}
	return c, nil
}

// formatCheckpoint is the checkpoint file's content for c.
func formatCheckpoint(c Cursor) []byte {
	b := fmt.Appendf(nil, "%s %020d %020d", checkpointPrefix, c.Seg, c.Off)
	return fmt.Appendf(b, " %08x\n", crc32.Checksum(b, castagnoli))
}

// parseCheckpoint reads a checkpoint file's first line.
func parseCheckpoint(b []byte) (Cursor, bool) {
	line, _, found := strings.Cut(string(b), "\n")
	if !found {
		return Cursor{}, false
	}
	f := strings.Split(line, " ")
	if len(f) == 4 {
		sum, err := strconv.ParseUint(f[3], 16, 32)
		// read only in the form it is written: lowercase hex, no sign
		if err != nil || len(f[3]) != 8 || strings.Trim(f[3], "0123456789abcdef") != "" ||
			uint32(sum) != crc32.Checksum([]byte(line[:len(line)-9]), castagnoli) {
			return Cursor{}, false
		}
		f = f[:3]
	}
	if len(f) != 3 || f[0] != checkpointPrefix {
		return Cursor{}, false
	}
	seg, err1 := strconv.ParseUint(f[1], 10, 64)
	off, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || off < 0 || strings.Trim(f[2], "0123456789") != "" {
		return Cursor{}, false
	}
	return Cursor{Seg: seg, Off: off}, true
}

func (s *Spool) writeCheckpoint(c Cursor) error {
	if s.cp == nil {
		f, err := os.OpenFile(filepath.Join(s.dir, checkpointName), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return err
		}
		s.cp = f
	}
	_, err := s.cp.WriteAt(formatCheckpoint(c), 0)
	return err
}

// newSegment starts the next segment for appends, with room for a frame
// of need bytes when it is mapped. Called with mu held (or before the
// spool is shared).
func (s *Spool) newSegment(need int64) error {
	// Always past the checkpoint's segment: Open deletes the segments
	// before it.
	seq := s.cpSeg + 1
	if n := len(s.segs); n > 0 {
		seq = max(seq, s.segs[n-1].seq+1)
	}
	path := filepath.Join(s.dir, segName(seq))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("spool: new segment: %w", err)
	}
	if _, err := f.WriteAt([]byte(segmentMagic), 0); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("spool: new segment: %w", err)
	}
	var m []byte
	if s.mapping {
		m = s.mapSegment(f, need)
	}
	if s.w != nil {
		s.unmapAppend()
		if s.opts.Sync != SyncNever {
			s.w.Sync()
		}
		s.w.Close()
	}
	if s.opts.Sync != SyncNever {
		syncDir(s.dir)
	}
	s.w, s.m = f, m
	s.segs = append(s.segs, &segment{seq: seq, path: path, size: int64(len(segmentMagic))})
	if len(s.segs) == 1 {
		s.committed = Cursor{Seg: seq, Off: int64(len(segmentMagic))}
	}
	return nil
}

// maxReserve bounds a mapped segment's reservation: a segment larger than
// that starts the next one when its reservation is full.
const maxReserve = 64 << 20

// errNoPrealloc: the file system cannot reserve a file's space.
var errNoPrealloc = errors.New("file system cannot preallocate")

// mapSegment reserves the space of a new segment's file f (holding its
// header) and maps it for appends. It returns nil when it cannot, and the
// segment's appends are write(2)s: the file system cannot reserve space
// (then no later segment tries), the disk has no room for the reservation
// (a full disk fails the write(2)s cleanly, and a store into a mapping of
// space not reserved could not), or the mapping fails.
func (s *Spool) mapSegment(f *os.File, need int64) []byte {
	page := int64(os.Getpagesize())
	size := int64(len(segmentMagic)) + max(min(s.opts.SegmentBytes, s.opts.MaxBytes, maxReserve), need)
	size = (size + page - 1) / page * page
	err := preallocate(f, size)
	if err == errNoPrealloc {
		s.mapping = false
		s.log.Info("accounting spool: the file system cannot reserve space: appends are write(2)s", "dir", s.dir)
		return nil
	}
	var m []byte
	if err == nil {
		if m, err = mapFile(f, int(size)); err != nil {
			s.log.Warn("accounting spool: cannot map a segment: its appends are write(2)s", "err", err)
		}
	}
	if err != nil {
		f.Truncate(int64(len(segmentMagic))) // whatever was reserved
		return nil
	}
	return m
}

// unmapAppend ends the append segment's mapping and cuts its file back to
// its frames. Called with mu held.
func (s *Spool) unmapAppend() {
	if s.m == nil {
		return
	}
	unmap(s.m)
	s.m = nil
	if n := len(s.segs); n > 0 && s.w != nil {
		s.w.Truncate(s.segs[n-1].size)
	}
}

// copyMapped copies src to the start of dst, a mapping: a fault (the file
// was cut under the spool, or the disk could not back a page) is an
// error, not a crash.
func copyMapped(dst, src []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store into the mapped segment failed: %v", r)
		}
	}()
	copy(dst, src)
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Append writes r to the spool. It returns once the frame is in the kernel
// (and on disk with SyncAlways). A failed write (a full disk) is cut off
// again so that no partial frame stays; the record is then not in the
// spool and the caller keeps it.
func (s *Spool) Append(r *llmflow.Record) error {
	_, err := s.AppendCursor(r)
	return err
}

// AppendCursor is Append that also returns the position after r: a reader
// that has r from elsewhere (a copy kept in memory) commits it with
// Commit(that position, …) without reading it back.
func (s *Spool) AppendCursor(r *llmflow.Record) (Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.append(r)
	return c, err
}

func (s *Spool) append(r *llmflow.Record) (Cursor, error) {
	if s.closed {
		return Cursor{}, errors.New("spool closed")
	}
	if s.broken != nil {
		// The last failed append could not be cut off: start afresh.
		if err := s.newSegment(0); err != nil {
			return Cursor{}, err
		}
		s.broken = nil
	}
	if s.pendBytes >= s.opts.MaxBytes {
		return Cursor{}, ErrFull
	}
	s.buf = appendFrame(s.buf[:0], r)
	n := int64(len(s.buf))
	seg := s.segs[len(s.segs)-1]
	if s.m != nil && seg.size+n > int64(len(s.m)) {
		// The reservation is full: the frame starts the next segment.
		if err := s.newSegment(n); err != nil {
			s.log.Warn("accounting spool: cannot start a new segment, appending to the current one", "err", err)
		} else {
			seg = s.segs[len(s.segs)-1]
		}
	}
	if s.m != nil && seg.size+n <= int64(len(s.m)) {
		if err := copyMapped(s.m[seg.size:], s.buf); err != nil {
			// Bytes of the frame may be in the file past size: nothing
			// reads there, and the next append starts a new segment.
			s.broken = err
			return Cursor{}, fmt.Errorf("spool append: %w", err)
		}
	} else if _, err := s.w.WriteAt(s.buf, seg.size); err != nil {
		if terr := s.w.Truncate(seg.size); terr != nil {
			s.broken = terr
		} else if s.m != nil {
			s.broken = err // the cut took the reservation: a new segment next
		}
		return Cursor{}, fmt.Errorf("spool append: %w", err)
	}
	if s.opts.Sync == SyncAlways {
		if err := s.w.Sync(); err != nil {
			// The frame may or may not be durable; it is in the file, so
			// it counts (a reader takes it, a replay dedups it).
			s.log.Warn("accounting spool: fsync failed", "err", err)
		}
	} else {
		s.dirty = true
	}
	seg.size += int64(len(s.buf))
	s.pending++
	s.pendBytes += int64(len(s.buf))
	end := Cursor{Seg: seg.seq, Off: seg.size}
	if seg.size >= s.opts.SegmentBytes {
		if err := s.newSegment(0); err != nil {
			s.log.Warn("accounting spool: cannot start a new segment, appending to the current one", "err", err)
		}
	}
	return end, nil
}

func (s *Spool) syncLoop() {
	defer close(s.syncDone)
	t := time.NewTicker(s.opts.SyncEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stopSync:
			return
		case <-t.C:
			s.Sync()
		}
	}
}

// Sync fsyncs the segment being appended if anything was appended since
// the last Sync.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty || s.w == nil {
		return nil
	}
	s.dirty = false
	return s.w.Sync()
}

// Start is the position of the first record not committed.
func (s *Spool) Start() Cursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// Read returns up to max records from c on, appending them to dst, and
// the position after them. It returns no records when c is at the end.
// A frame that was good at Open or at Append and is now bad (the file was
// changed under the spool) is reported as an error; Skip moves past it.
func (s *Spool) Read(c Cursor, max int, dst []llmflow.Record) ([]llmflow.Record, Cursor, error) {
	for {
		s.mu.Lock()
		i := s.find(c.Seg)
		if i < 0 {
			s.mu.Unlock()
			return dst, c, fmt.Errorf("spool: segment %d is gone", c.Seg)
		}
		seg := s.segs[i]
		end := seg.size
		last := i == len(s.segs)-1
		var next Cursor
		if !last {
			next = Cursor{Seg: s.segs[i+1].seq, Off: int64(len(segmentMagic))}
		}
		s.mu.Unlock()
		if c.Off < end {
			return s.readSeg(seg, c, end, max, dst)
		}
		if last {
			return dst, c, nil
		}
		c = next
	}
}

// AtEnd reports whether Read from c finds no record: c is past every
// record appended so far.
func (s *Spool) AtEnd(c Cursor) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(c.Seg)
	if i < 0 {
		return false // Read reports the error
	}
	if c.Off < s.segs[i].size {
		return false
	}
	for _, sg := range s.segs[i+1:] {
		if sg.size > int64(len(segmentMagic)) {
			return false
		}
	}
	return true
}

func (s *Spool) find(seq uint64) int {
	for i, sg := range s.segs {
		if sg.seq == seq {
			return i
		}
	}
	return -1
}

// readChunk is how much Read reads at once.
const readChunk = 256 << 10

func (s *Spool) readSeg(seg *segment, c Cursor, end int64, max int, dst []llmflow.Record) ([]llmflow.Record, Cursor, error) {
	if seg.r == nil {
		f, err := os.Open(seg.path)
		if err != nil {
			return dst, c, fmt.Errorf("spool: %w", err)
		}
		seg.r = f
	}
	n := min(end-c.Off, readChunk)
	buf := make([]byte, n)
	if _, err := seg.r.ReadAt(buf, c.Off); err != nil && !errors.Is(err, io.EOF) {
		return dst, c, fmt.Errorf("spool: read %s: %w", seg.path, err)
	}
	b := buf
	for got := 0; got < max && len(b) > 0; got++ {
		r, fn, err := nextFrame(b)
		if err == errShort && got > 0 {
			break // the next frame goes beyond this chunk
		}
		if err == errShort && int64(len(buf)) < end-c.Off {
			// A frame larger than a chunk: read exactly it.
			return s.readBig(seg, c, end, dst)
		}
		if err != nil && got > 0 {
			break // return the good records first; the next Read reports it
		}
		if err != nil {
			return dst, c, &CorruptError{Seg: seg.seq, Off: c.Off, Err: err}
		}
		dst = append(dst, r)
		c.Off += int64(fn)
		b = b[fn:]
	}
	return dst, c, nil
}

func (s *Spool) readBig(seg *segment, c Cursor, end int64, dst []llmflow.Record) ([]llmflow.Record, Cursor, error) {
	buf := make([]byte, min(end-c.Off, frameHeader+MaxFrame))
	if _, err := seg.r.ReadAt(buf, c.Off); err != nil && !errors.Is(err, io.EOF) {
		return dst, c, fmt.Errorf("spool: read %s: %w", seg.path, err)
	}
	r, fn, err := nextFrame(buf)
	if err != nil {
		return dst, c, &CorruptError{Seg: seg.seq, Off: c.Off, Err: err}
	}
	c.Off += int64(fn)
	return append(dst, r), c, nil
}

// CorruptError is a bad frame found by Read.
type CorruptError struct {
	Seg uint64
	Off int64
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("spool: segment %d offset %d: %v", e.Seg, e.Off, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Skip gives up the rest of c's segment after a CorruptError: the bytes
// from c on are moved to a ".corrupt" file (as Open does) and the
// position of the next segment is returned. The records given up are not
// known (they could not be read); the caller logs the loss.
func (s *Spool) Skip(c Cursor) (Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(c.Seg)
	if i < 0 {
		return c, fmt.Errorf("spool: segment %d is gone", c.Seg)
	}
	if i == len(s.segs)-1 {
		if err := s.newSegment(0); err != nil {
			return c, err
		}
	}
	seg := s.segs[i]
	if data, err := os.ReadFile(seg.path); err == nil && c.Off < int64(len(data)) {
		os.WriteFile(fmt.Sprintf("%s.corrupt-%d", seg.path, c.Off), data[c.Off:], 0o600)
		s.pendBytes -= seg.size - c.Off
	}
	seg.size = c.Off
	return Cursor{Seg: s.segs[i+1].seq, Off: int64(len(segmentMagic))}, nil
}

// Commit records that the store holds every record before c, n records
// since the last Commit: it saves the checkpoint and deletes the segments
// before c's.
func (s *Spool) Commit(c Cursor, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	bytes := s.distance(s.committed, c)
	s.committed = c
	s.pending -= int64(n)
	s.pendBytes -= bytes
	if s.pending < 0 {
		s.pending = 0
	}
	if s.pendBytes < 0 {
		s.pendBytes = 0
	}
	if err := s.writeCheckpoint(c); err != nil {
		return fmt.Errorf("spool checkpoint: %w", err)
	}
	for len(s.segs) > 1 && s.segs[0].seq < c.Seg {
		seg := s.segs[0]
		if seg.r != nil {
			seg.r.Close()
		}
		if err := os.Remove(seg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("spool: %w", err)
		}
		s.segs = s.segs[1:]
	}
	return nil
}

// distance is the number of frame bytes from a to b. Called with mu held.
func (s *Spool) distance(a, b Cursor) int64 {
	var d int64
	for _, sg := range s.segs {
		switch {
		case sg.seq < a.Seg || sg.seq > b.Seg:
		case sg.seq == a.Seg && sg.seq == b.Seg:
			d += b.Off - a.Off
		case sg.seq == a.Seg:
			d += sg.size - a.Off
		case sg.seq == b.Seg:
			d += b.Off - int64(len(segmentMagic))
		default:
			d += sg.size - int64(len(segmentMagic))
		}
	}
	return d
}

// Pending returns the records and bytes appended and not yet committed.
func (s *Spool) Pending() (records, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending, s.pendBytes
}

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// Close fsyncs (unless SyncNever) and closes the spool, releasing the
// directory. When everything was committed, the segments are removed.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.stopSync != nil {
		close(s.stopSync)
		<-s.syncDone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.w != nil && s.opts.Sync != SyncNever {
		err = s.w.Sync()
	}
	if s.pending == 0 && s.pendBytes == 0 && err == nil {
		s.unmapAppend()
		for _, sg := range s.segs {
			if sg.r != nil {
				sg.r.Close()
				sg.r = nil
			}
			os.Remove(sg.path)
		}
		os.Remove(filepath.Join(s.dir, checkpointName))
		s.segs = nil
	}
	s.closeFiles()
	return err
}

func (s *Spool) closeFiles() {
	s.unmapAppend()
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
	if s.cp != nil {
		s.cp.Close()
		s.cp = nil
	}
	for _, sg := range s.segs {
		if sg.r != nil {
			sg.r.Close()
			sg.r = nil
		}
	}
	if s.lock != nil {
		s.lock.Close() // releases the flock
		s.lock = nil
	}
}
