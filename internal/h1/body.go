package h1

import (
	"errors"
	"io"
)

// An engine's answer body is read without a buffer of its own: the bytes
// that came with the head (left) first, then straight from the socket
// into the caller's buffer, chunked framing taken out in place. Between
// reads a stream holds nothing but its state, so 10,000 open streams do
// not hold 10,000 read buffers.

// leftReader reads left, then r.
type leftReader struct {
	left []byte
	r    io.Reader
}

func (l *leftReader) Read(p []byte) (int, error) {
	if len(l.left) > 0 {
		n := copy(p, l.left)
		l.left = l.left[n:]
		return n, nil
	}
	return l.r.Read(p)
}

// chunkState is where a chunked decoder is in its framing.
type chunkState uint8

const (
	csSize        chunkState = iota // reading the hex size
	csSizeWS                        // whitespace after the size: only ";" or CR may follow
	csExt                           // in a chunk extension, until CR
	csSizeLF                        // after the size line's CR
	csData                          // in chunk data (left bytes to go)
	csDataCR                        // after data: CR
	csDataLF                        // after data: LF
	csTrailer                       // at the start of a trailer line (or the final CRLF)
	csTrailerLine                   // inside a trailer line, until LF
	csEndLF                         // after the final CR
	csDone
)

var (
	errChunkFraming  = errors.New("h1: malformed chunked answer from the engine")
	errChunkTooLarge = errors.New("h1: chunk size out of range")
)

// chunkedReader decodes a chunked body (RFC 9112 §7.1) in the caller's
// buffer. Extensions and trailers are skipped (bounded).
type chunkedReader struct {
	r       io.Reader
	state   chunkState
	size    int64 // current chunk's size, then what is left of it
	digits  int
	skipped int // extension and trailer bytes, bounded
	extra   bool
}

const maxChunkOverhead = 16 << 10

func (c *chunkedReader) Read(p []byte) (int, error) {
	for {
		if c.state == csDone {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		buf := p
		if c.state == csData && int64(len(buf)) > c.size {
			buf = buf[:c.size]
		}
		n, err := c.r.Read(buf)
		o, perr := c.decode(p[:n])
		if perr != nil {
			return o, perr
		}
		if c.state == csDone {
			return o, io.EOF
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return o, err
		}
		if o > 0 {
			return o, nil
		}
	}
}

// decode takes the framing out of b in place and returns how many data
// bytes are left at its start.
func (c *chunkedReader) decode(b []byte) (int, error) {
	o := 0
	for i := 0; i < len(b); {
		switch c.state {
		case csData:
			m := min(int64(len(b)-i), c.size)
			copy(b[o:], b[i:i+int(m)])
			o, i = o+int(m), i+int(m)
			if c.size -= m; c.size == 0 {
				c.state = csDataCR
			}
			continue
		case csSize:
			switch ch := b[i]; {
			case ch >= '0' && ch <= '9', ch >= 'a' && ch <= 'f', ch >= 'A' && ch <= 'F':
				if c.digits++; c.digits > 12 {
					return o, errChunkTooLarge
				}
				c.size = c.size<<4 | int64(unhex(ch))
			case c.digits == 0:
				return o, errChunkFraming
			case ch == ';':
				c.state = csExt
			case ch == ' ' || ch == '\t':
				c.state = csSizeWS
			case ch == '\r':
				c.state = csSizeLF
			default:
				return o, errChunkFraming
			}
		case csSizeWS: // BWS before an extension or the line's end (RFC 9112 §7.1.1), not "5 0"
			switch b[i] {
			case ' ', '\t':
				if c.skipped++; c.skipped > maxChunkOverhead {
					return o, errChunkFraming
				}
			case ';':
				c.state = csExt
			case '\r':
				c.state = csSizeLF
			default:
				return o, errChunkFraming
			}
		case csExt:
			switch b[i] {
			case '\r':
				c.state = csSizeLF
			case '\n': // a bare LF ends no chunk line
				return o, errChunkFraming
			default:
				if c.skipped++; c.skipped > maxChunkOverhead {
					return o, errChunkFraming
				}
			}
		case csSizeLF:
			if b[i] != '\n' || c.digits == 0 {
				return o, errChunkFraming
			}
			c.digits = 0
			if c.size == 0 {
				c.state = csTrailer
			} else {
				c.state = csData
			}
		case csDataCR:
			if b[i] != '\r' {
				return o, errChunkFraming
			}
			c.state = csDataLF
		case csDataLF:
			if b[i] != '\n' {
				return o, errChunkFraming
			}
			c.state, c.size = csSize, 0
		case csTrailer:
			if b[i] == '\r' {
				c.state = csEndLF
			} else {
				c.state = csTrailerLine
				c.skipped++
			}
		case csTrailerLine:
			if b[i] == '\n' {
				c.state = csTrailer
			} else if c.skipped++; c.skipped > maxChunkOverhead {
				return o, errChunkFraming
			}
		case csEndLF:
			if b[i] != '\n' {
				return o, errChunkFraming
			}
			c.state = csDone
			if i+1 < len(b) {
				c.extra = true // nothing may follow an answer on a kept-alive connection
			}
			return o, nil
		}
		i++
	}
	return o, nil
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// lengthReader reads n bytes of r.
type lengthReader struct {
	r io.Reader
	n int64
}

func (l *lengthReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n == 0 && err == nil {
		err = io.EOF
	}
	if err == io.EOF && l.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
