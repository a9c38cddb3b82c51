package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// DefaultMaxEventBytes is the event size limit used when none is given.
const DefaultMaxEventBytes = 1 << 20

// readBufferSize is the size of the bufio.Reader under a Reader. Typical
// chat chunks are 200–500 bytes, so one upstream read usually holds one or
// a few whole events; a longer event is assembled across reads (rd.raw).
// 4 KiB (net/http's own size) copies as fast as 32 KiB did (BenchmarkCopy)
// and takes 27 MiB less heap per 1,000 open streams (BenchmarkProcess
// streams: 65 → 38 MiB).
const readBufferSize = 4 << 10

// ErrEventTooLarge is returned when an event (Raw, line endings included)
// grows past the configured maximum. Nothing of that event has been
// returned or forwarded when it is reported.
var ErrEventTooLarge = errors.New("sse: event too large")

// Event is one server-sent event as it was read.
//
// Raw and Data alias buffers owned by the Reader: they are valid only until
// the next call to Next or Reset. Copy them to keep them.
type Event struct {
	// Raw holds the exact bytes of the event: every line with its line
	// ending, including the blank line that ends it. Concatenating Raw of
	// all events returned by a Reader (and of the incomplete tail returned
	// with io.ErrUnexpectedEOF) reproduces the input.
	Raw []byte

	// Data is the value of the event's data lines, joined by "\n", each
	// without the "data:" prefix and one optional leading space. It is nil
	// when the event has no data line at all (only comments, other fields,
	// or nothing); per the SSE rules such an event dispatches nothing. An
	// event with an empty data line ("data:") has a non-nil, empty Data.
	Data []byte
}

// Line endings.
const (
	endLF   = 1
	endCR   = 2
	endCRLF = 3
)

// Reader splits an SSE stream into events, one at a time. It follows the
// WHATWG rules: lines end in LF, CR or CRLF; a blank line ends an event;
// lines starting with ":" are comments; the "data" field's values are
// joined with "\n".
//
// CRLF split across reads: inside an event, a CR is always followed up by
// reading the next byte, so CR and LF that arrive in different reads still
// make one line ending. For the blank line that ends an event, waiting for
// a possible LF after its CR could hold the event back until the next one
// is sent, so the Reader only takes that LF when the line before the blank
// line ended in CRLF (the stream uses CRLF, and the LF was written together
// with the CR). Otherwise a following LF is an empty line of its own, which
// the Reader returns as an event with Raw "\n" and nil Data and which
// dispatches nothing. This rule looks only at the bytes, never at how they
// were split into reads, so every split gives the same events.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	src io.Reader
	// br is nil between events when src can wait without a buffer
	// (readyWaiter): an open stream waiting for its engine holds none.
	br  *bufio.Reader
	max int
	err error // sticky error from br (io.EOF included) or ErrEventTooLarge

	raw  []byte // the current event's bytes, reused
	data []byte // joined data when an event has several data lines, reused

	crFirst bool // the previous line ended in a lone CR: look for CR first

	// FlushBeforeWait's: flush, when not nil, sends what was written
	// since the last flush (unflushed) before the Reader reads from src
	// with nothing buffered, a read that may wait for the engine. Its
	// failure is kept (flushErr) and returned as that read's error, and
	// every later one's.
	flush     func() error
	unflushed bool
	flushErr  error
}

// FlushBeforeWait makes rd call flush before it reads from its source
// with nothing buffered (a read that may wait for the engine), when
// Written was called since flush last ran: a relay that writes each event
// as it reads it (Copy does) sends what it wrote before it waits, and the
// events that arrived together in one write. A failed flush is returned,
// as a *WriteError, by that Next and every later one, and by Flush. Reset
// clears it.
func (rd *Reader) FlushBeforeWait(flush func() error) { rd.flush = flush }

// Written tells rd that an event was written since the last flush.
func (rd *Reader) Written() { rd.unflushed = true }

// Flush runs FlushBeforeWait's flush now if something was written since
// it last ran (at the end of a relay), and returns its error, kept.
func (rd *Reader) Flush() error { return rd.flushWritten() }

// flushWritten calls flush when something was written since it last ran,
// and returns its error, kept.
func (rd *Reader) flushWritten() error {
	if rd.unflushed && rd.flushErr == nil && rd.flush != nil {
		rd.unflushed = false
		if err := rd.flush(); err != nil {
			rd.flushErr = &WriteError{Err: err}
		}
	}
	return rd.flushErr
}

// NewReader returns a Reader over r. maxEventBytes limits the size of one
// event (Raw); 0 or less means DefaultMaxEventBytes.
func NewReader(r io.Reader, maxEventBytes int) *Reader {
	rd := &Reader{}
	rd.Reset(r, maxEventBytes)
	return rd
}

// readyWaiter is a source that can wait for bytes without a buffer
// (internal/h1's engine answers): the Reader takes its buffer from a pool
// once bytes are there and gives it back when an event leaves it empty.
type readyWaiter interface {
	WaitReadable() error
}

var bufPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// buffer returns rd's read buffer, waiting for the source first when it
// can wait without one.
func (rd *Reader) buffer() (*bufio.Reader, error) {
	if rd.br != nil {
		return rd.br, nil
	}
	if w, ok := rd.src.(readyWaiter); ok {
		if err := w.WaitReadable(); err != nil {
			return nil, err
		}
		rd.br = bufPool.Get().(*bufio.Reader)
	} else {
		rd.br = bufio.NewReaderSize(nil, readBufferSize)
	}
	rd.br.Reset(rd.src)
	return rd.br, nil
}

// idle gives the buffer back when nothing is left in it and the source
// can wait without one.
func (rd *Reader) idle() {
	if rd.br != nil && rd.br.Buffered() == 0 {
		if _, ok := rd.src.(readyWaiter); ok {
			rd.br.Reset(nil)
			bufPool.Put(rd.br)
			rd.br = nil
		}
	}
}

// Reset makes rd read from r as if it had been returned by NewReader,
// keeping its buffers.
func (rd *Reader) Reset(r io.Reader, maxEventBytes int) {
	if maxEventBytes <= 0 {
		maxEventBytes = DefaultMaxEventBytes
	}
	rd.src = r
	if rd.br != nil {
		rd.br.Reset(r)
	}
	rd.max = maxEventBytes
	rd.err = nil
	rd.raw = rd.raw[:0]
	rd.data = rd.data[:0]
	rd.crFirst = false
	rd.flush, rd.unflushed, rd.flushErr = nil, false, nil
}

// Next reads the next event. It returns:
//   - (event, nil) for a complete event, ended by a blank line;
//   - (Event{}, io.EOF) when the input ended cleanly after the last event;
//   - (Event{Raw: tail}, io.ErrUnexpectedEOF) when the input ended inside
//     an event: Raw holds the incomplete bytes, Data is nil since per the
//     SSE rules an unterminated event is not dispatched;
//   - (Event{}, ErrEventTooLarge) when the event would grow past the limit;
//   - (Event{}, err) for any other error from the underlying reader.
//
// Errors are sticky: once Next has returned an error, later calls return
// io.EOF (after io.ErrUnexpectedEOF) or the same error.
func (rd *Reader) Next() (Event, error) {
	if rd.err != nil && rd.err != io.EOF {
		return Event{}, rd.err
	}
	rd.raw = rd.raw[:0]
	var (
		nData        int // data lines seen
		dStart, dEnd int // the first data value, as offsets into raw
		prev         int // ending of the previous line of this event
	)
	for {
		start := len(rd.raw)
		end, ending, err := rd.readLine()
		if err != nil {
			if err == io.EOF {
				if len(rd.raw) == 0 {
					return Event{}, io.EOF
				}
				return Event{Raw: rd.raw}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		blank := end == start
		if ending == endCR && (!blank || prev == endCRLF) {
			// Inside an event (or after a CRLF line) a CR may be the first
			// half of CRLF: look at the next byte, reading if need be.
			if rd.more() == nil {
				if b, _ := rd.br.Peek(1); b[0] == '\n' {
					if len(rd.raw)+1 > rd.max {
						rd.err = ErrEventTooLarge
						return Event{}, ErrEventTooLarge
					}
					rd.raw = append(rd.raw, '\n')
					rd.br.Discard(1)
					ending = endCRLF
				}
			}
		}
		rd.crFirst = ending == endCR
		if blank {
			rd.idle()
			ev := Event{Raw: rd.raw}
			switch {
			case nData == 1:
				ev.Data = rd.raw[dStart:dEnd:dEnd]
			case nData > 1:
				ev.Data = rd.data
			}
			return ev, nil
		}
		prev = ending

		line := rd.raw[start:end]
		if line[0] == ':' {
			continue // comment
		}
		name, vStart := line, len(line)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, vStart = line[:i], i+1
			if vStart < len(line) && line[vStart] == ' ' {
				vStart++
			}
		}
		if string(name) != "data" {
			continue // event:, id:, retry: and unknown fields
		}
		vs, ve := start+vStart, end
		nData++
		switch nData {
		case 1:
			dStart, dEnd = vs, ve
		case 2:
			rd.data = append(rd.data[:0], rd.raw[dStart:dEnd]...)
			fallthrough
		default:
			rd.data = append(rd.data, '\n')
			rd.data = append(rd.data, rd.raw[vs:ve]...)
		}
	}
}

// more makes sure at least one byte is buffered, reading if need be.
func (rd *Reader) more() error {
	if rd.br != nil && rd.br.Buffered() > 0 {
		return nil
	}
	if rd.err != nil {
		return rd.err
	}
	if err := rd.flushWritten(); err != nil {
		return err
	}
	br, err := rd.buffer()
	if err != nil {
		rd.err = err
		return err
	}
	if _, err := br.Peek(1); err != nil {
		// Peek(1) fails only when nothing at all is buffered.
		rd.err = err
		return err
	}
	return nil
}

// readLine appends the next line, with its first line-ending byte (CR or
// LF), to rd.raw. It returns the offset in rd.raw where the line's content
// ends and which byte ended it (endLF or endCR; a CR's possible LF is the
// caller's business). At the end of the input it returns the error, with
// whatever bytes it read already appended.
func (rd *Reader) readLine() (end, ending int, err error) {
	for {
		if err := rd.more(); err != nil {
			return len(rd.raw), 0, err
		}
		b, _ := rd.br.Peek(rd.br.Buffered())
		i := indexEOL(b, rd.crFirst)
		n := i + 1
		if i < 0 {
			n = len(b)
		}
		if len(rd.raw)+n > rd.max {
			rd.err = ErrEventTooLarge
			return 0, 0, ErrEventTooLarge
		}
		rd.raw = append(rd.raw, b[:n]...)
		rd.br.Discard(n)
		if i >= 0 {
			ending = endLF
			if b[i] == '\r' {
				ending = endCR
			}
			return len(rd.raw) - 1, ending, nil
		}
	}
}

// indexEOL returns the index of the first CR or LF in b, or -1. It searches
// first for the byte the stream most likely uses, so that each scan stops at
// the end of the current line rather than running over the whole buffer.
func indexEOL(b []byte, crFirst bool) int {
	first, other := byte('\n'), byte('\r')
	if crFirst {
		first, other = other, first
	}
	i := bytes.IndexByte(b, first)
	if i < 0 {
		return bytes.IndexByte(b, other)
	}
	if j := bytes.IndexByte(b[:i], other); j >= 0 {
		return j
	}
	return i
}
