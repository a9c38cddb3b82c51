package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Transport is an HTTP/1.1 client for plain-HTTP engines: the request is
// written and its answer read on the caller's goroutine, over a pool of
// kept-alive connections per host (newest first). Requests it does not
// carry (https, bodies of unknown length) go to Fallback.
//
// A canceled context cuts the connection at once (an engine sees the
// abort as a closed socket); a connection whose answer was not read to
// its end is closed, never reused.
type Transport struct {
	// Dial opens a connection (default: net.Dialer with a 30 s timeout).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ResponseHeaderTimeout bounds the wait for the answer's head (0: none).
	ResponseHeaderTimeout time.Duration
	// MaxResponseHeaderBytes bounds the answer's head (default 64 KiB).
	MaxResponseHeaderBytes int64
	// MaxIdlePerHost bounds the kept-alive connections per host (default 64).
	MaxIdlePerHost int
	// IdleTimeout closes connections idle longer (default 90 s).
	IdleTimeout time.Duration
	// Fallback carries what this transport does not (https).
	Fallback http.RoundTripper

	mu   sync.Mutex
	idle map[string][]*pconn
	// sweeping is set while a timer is due to close idle connections
	sweeping bool
}

// pconn is one kept-alive connection to an engine.
type pconn struct {
	t      *Transport
	addr   string
	conn   net.Conn
	lr     headLimit
	br     *bufio.Reader
	wbuf   []byte
	idleAt time.Time
	reused bool
	rc     syscall.RawConn // nil when the connection has no socket to wait on
}

// reader is the connection's read buffer for an answer's head, from the
// pool; it goes back once the head is read.
func (pc *pconn) reader() *bufio.Reader {
	if pc.br == nil {
		pc.br = pooledReader(&pc.lr)
	}
	return pc.br
}

func (pc *pconn) releaseReader() { pc.br = releaseReader(pc.br) }

var errResponseHeaderTooLarge = errors.New("h1: upstream response head too large")

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" || req.ContentLength < 0 ||
		req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody {
		if t.Fallback == nil {
			return nil, fmt.Errorf("h1: unsupported request to %v", req.URL)
		}
		return t.Fallback.RoundTrip(req)
	}
	ctx := req.Context()
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	body := req.Body
	for attempt := 0; ; attempt++ {
		pc, err := t.getConn(ctx, addr)
		if err != nil {
			if body != nil {
				body.Close()
			}
			return nil, err
		}
		resp, retry, err := pc.roundTrip(ctx, req, body)
		if err == nil {
			return resp, nil
		}
		pc.conn.Close()
		// A kept-alive connection the engine closed just as the request
		// went out (the write failed): sent again once, on a new
		// connection. A request whose write went through is never sent
		// twice: the engine may be running it.
		if retry && attempt == 0 && ctx.Err() == nil && (req.ContentLength == 0 || req.GetBody != nil) {
			if req.GetBody != nil {
				if body, err = req.GetBody(); err != nil {
					return nil, err
				}
			}
			continue
		}
		return nil, err
	}
}

func (t *Transport) getConn(ctx context.Context, addr string) (*pconn, error) {
	now := time.Now()
	for {
		t.mu.Lock()
		s := t.idle[addr]
		if len(s) == 0 {
			t.mu.Unlock()
			break
		}
		pc := s[len(s)-1]
		s[len(s)-1] = nil
		t.idle[addr] = s[:len(s)-1]
		t.mu.Unlock()
		// A kept-alive connection may have been closed by the engine
		// (uvicorn's keep-alive timeout is 5 s): one peek says.
		if now.Sub(pc.idleAt) < t.idleTimeout() && alive(pc.conn) {
			pc.reused = true
			return pc, nil
		}
		pc.conn.Close()
	}
	dial := t.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second}).DialContext
	}
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pc := &pconn{t: t, addr: addr, conn: c, rc: rawConn(c)}
	pc.lr = headLimit{r: c, n: unlimited, err: errResponseHeaderTooLarge}
	return pc, nil
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return 90 * time.Second
}

// put keeps pc for the next request to its host.
func (t *Transport) put(pc *pconn) {
	pc.idleAt = time.Now()
	max := t.MaxIdlePerHost
	if max <= 0 {
		max = 64
	}
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*pconn)
	}
	s := t.idle[pc.addr]
	if len(s) >= max {
		t.mu.Unlock()
		pc.conn.Close()
		return
	}
	t.idle[pc.addr] = append(s, pc)
	sweep := !t.sweeping
	t.sweeping = true
	t.mu.Unlock()
	if sweep {
		time.AfterFunc(t.idleTimeout()/2, t.sweep)
	}
}

// sweep closes the connections idle longer than the idle timeout (the
// oldest are at the bottom of each stack).
func (t *Transport) sweep() {
	cut := time.Now().Add(-t.idleTimeout())
	var old []*pconn
	t.mu.Lock()
	for addr, s := range t.idle {
		n := 0
		for n < len(s) && s[n].idleAt.Before(cut) {
			old = append(old, s[n])
			n++
		}
		if n > 0 {
			rest := append(s[:0:0], s[n:]...)
			if len(rest) == 0 {
				delete(t.idle, addr)
			} else {
				t.idle[addr] = rest
			}
		}
	}
	again := len(t.idle) > 0
	t.sweeping = again
	t.mu.Unlock()
	for _, pc := range old {
		pc.conn.Close()
	}
	if again {
		time.AfterFunc(t.idleTimeout()/2, t.sweep)
	}
}

// CloseIdleConnections closes the kept-alive connections.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, s := range idle {
		for _, pc := range s {
			pc.conn.Close()
		}
	}
	if c, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// roundTrip writes req and reads its answer's head. retry reports that
// the connection failed before any byte of an answer on a kept-alive
// connection (the request may be sent again on a new one).
func (pc *pconn) roundTrip(ctx context.Context, req *http.Request, body io.ReadCloser) (resp *http.Response, retry bool, err error) {
	var cut atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		cut.Store(true)
		pc.conn.SetDeadline(aLongTimeAgo)
	})
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, err
	}
	if err := pc.writeRequest(req, body); err != nil {
		r, _, e := fail(err)
		return r, pc.reused && isReset(err) && ctx.Err() == nil, e
	}
	t := pc.t
	if t.ResponseHeaderTimeout > 0 {
		pc.conn.SetReadDeadline(time.Now().Add(t.ResponseHeaderTimeout))
	}
	pc.lr.n = t.MaxResponseHeaderBytes
	if pc.lr.n <= 0 {
		pc.lr.n = 64 << 10
	}
	br := pc.reader()
	for {
		resp, err = http.ReadResponse(br, req)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		pc.lr.n = t.MaxResponseHeaderBytes // 1xx: skipped
		if pc.lr.n <= 0 {
			pc.lr.n = 64 << 10
		}
	}
	pc.lr.n = unlimited
	if err != nil {
		r, _, e := fail(err)
		if errors.Is(err, errResponseHeaderTooLarge) {
			e = fmt.Errorf("h1: upstream response head larger than %d bytes", t.MaxResponseHeaderBytes)
		}
		return r, false, e
	}
	if t.ResponseHeaderTimeout > 0 {
		pc.conn.SetReadDeadline(time.Time{})
		if cut.Load() || ctx.Err() != nil { // canceled between the head and clearing the deadline
			resp.Body.Close()
			return fail(ctx.Err())
		}
	}
	// The body is read without the head's buffer: what came with the head
	// is kept (usually the first event or all of a short answer), the
	// buffer goes back to the pool, and the rest comes from the socket
	// straight into the reader's buffer. http.ReadResponse's body reader
	// is not used (nor closed: it would read from the buffer).
	var left []byte
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		left = append([]byte(nil), b...)
	}
	pc.releaseReader()
	rb := &respBody{pc: pc, stop: stop, cut: &cut, ctx: ctx, lr: leftReader{left: left, r: pc.conn},
		keep: !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	switch {
	case resp.Body == http.NoBody || resp.ContentLength == 0:
		rb.keep = rb.keep && len(left) == 0
		rb.release(true)
		resp.Body = http.NoBody
		return resp, false, nil
	case len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked":
		rb.chunked = &chunkedReader{r: &rb.lr}
		rb.r = rb.chunked
	case resp.ContentLength > 0:
		rb.r = &lengthReader{r: &rb.lr, n: resp.ContentLength}
	default: // until the engine closes the connection
		rb.r, rb.keep = &rb.lr, false
	}
	resp.Body = rb
	return resp, false, nil
}

// writeRequest writes req's head and body in one write when they fit
// the connection's buffer.
func (pc *pconn) writeRequest(req *http.Request, body io.ReadCloser) error {
	b := pc.wbuf[:0]
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URL.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	b = append(b, host...)
	b = append(b, "\r\n"...)
	for k, vv := range req.Header {
		if !validHeaderName(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		if k == "Host" || k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vv {
			if !validHeaderValue(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if req.ContentLength > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.ContentLength, 10)
		b = append(b, "\r\n"...)
	}
	if req.Close {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	n := req.ContentLength
	if body != nil && n > 0 {
		defer body.Close()
		if n <= 64<<10 {
			start := len(b)
			b = append(b, make([]byte, n)...)
			if _, err := io.ReadFull(body, b[start:]); err != nil {
				return fmt.Errorf("h1: reading the request body: %w", err)
			}
		} else {
			if _, err := pc.conn.Write(b); err != nil {
				return err
			}
			pc.keepBuf(b)
			m, err := io.Copy(pc.conn, io.LimitReader(body, n))
			if err == nil && m != n {
				err = fmt.Errorf("h1: request body is %d bytes, not its Content-Length %d", m, n)
			}
			return err
		}
	}
	_, err := pc.conn.Write(b)
	pc.keepBuf(b)
	return err
}

func (pc *pconn) keepBuf(b []byte) {
	if cap(b) <= 16<<10 {
		pc.wbuf = b[:0]
	} else {
		pc.wbuf = nil
	}
}

// respBody is an answer's body: read to its end it gives the connection
// back to the pool; closed before, it closes the connection.
type respBody struct {
	pc      *pconn
	r       io.Reader
	lr      leftReader
	chunked *chunkedReader
	stop    func() bool
	cut     *atomic.Bool
	ctx     context.Context
	keep    bool
	done    bool
}

func (b *respBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.release(len(b.lr.left) == 0 && (b.chunked == nil || !b.chunked.extra))
	case err != nil:
		if b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.release(false)
	}
	return n, err
}

// WaitReadable blocks until a Read would not block, holding no buffer:
// a reader (package sse) takes its buffer only once bytes are there.
func (b *respBody) WaitReadable() error {
	if b.done || len(b.lr.left) > 0 || b.pc.rc == nil {
		return nil
	}
	if err := waitReadable(b.pc.rc); err != nil {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		return err
	}
	return nil
}

func (b *respBody) Close() error {
	if !b.done {
		b.release(false)
	}
	return nil
}

func (b *respBody) release(reuse bool) {
	b.done = true
	stopped := b.stop()
	if reuse && b.keep && stopped && !b.cut.Load() {
		b.pc.t.put(b.pc)
		return
	}
	b.pc.conn.Close()
}

// isReset reports a connection reset or broken pipe.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
