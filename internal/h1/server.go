// Package h1 is the client listener's HTTP/1.1 server and the engines'
// HTTP/1.1 client: net/http's types (http.Handler, *http.Request,
// http.ResponseWriter, http.RoundTripper) on a loop with fewer goroutine
// hand-offs than net/http's.
//
// net/http's server runs a background read goroutine on every connection
// while a handler runs (to see a client leave) and wakes and waits for it
// at the end of every request; its client reads and writes every
// connection on two more goroutines, so an answer crosses three
// goroutines before the handler sees it. Here one goroutine per client
// connection parses the request, runs the handler, sends the engine
// request and reads its answer; a client that leaves is seen by one
// process-wide epoll watcher (Linux), which cancels the request's
// context, and the engine connection is cut by that cancellation.
//
// Request parsing is net/http's own (http.ReadRequest) with the checks its
// server adds (Host, header names and values, Expect, versions), so
// framing decisions (Content-Length, Transfer-Encoding) are the same as
// net/http's. TLS and HTTP/2 stay on net/http.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.x on plain TCP listeners. Its fields mean what
// http.Server's of the same names mean; set them before Serve.
type Server struct {
	Handler           http.Handler
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int // default 1 MiB, as net/http
	ErrorLog          *log.Logger
	BaseContext       func(net.Listener) context.Context
	ConnState         func(net.Conn, http.ConnState)

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   atomic.Bool
}

// Supported reports whether this platform has what the server needs to
// see clients leave without a goroutine per request.
func Supported() bool { return watcherSupported }

// ErrServerClosed is http.ErrServerClosed: Serve's answer after Shutdown
// or Close.
var ErrServerClosed = http.ErrServerClosed

const (
	defaultMaxHeaderBytes = 1 << 20
	// maxPostHandlerRead is how much of a body the handler left unread
	// the server reads to keep the connection (net/http's 256 KiB).
	maxPostHandlerRead = 256 << 10
	bufSize            = 4 << 10
)

var (
	readerPool   = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufSize) }}
	writerPool   = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}
	aLongTimeAgo = time.Unix(1, 0)
)

// Serve accepts connections on ln and serves each on its own goroutine
// until Shutdown or Close. It always returns a non-nil error.
func (s *Server) Serve(ln net.Listener) error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	s.mu.Lock()
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[*conn]struct{})
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	base := context.Background()
	if s.BaseContext != nil {
		if base = s.BaseContext(ln); base == nil {
			panic("h1: BaseContext returned a nil context")
		}
	}
	// http.ServerContextKey is not set: its value is an *http.Server by
	// contract, and this is not one.
	var delay time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTemporary) || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("h1: accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.newConn(base, rwc)
		if c == nil {
			continue
		}
		go c.serve()
	}
}

var errTemporary = errors.New("temporary")

// isTemporary reports accept errors worth retrying (EMFILE, ENFILE,
// ECONNABORTED), as net/http retries them.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) newConn(base context.Context, rwc net.Conn) *conn {
	c := &conn{srv: s, rwc: rwc, remote: rwc.RemoteAddr().String()}
	c.ctx = context.WithValue(base, http.LocalAddrContextKey, rwc.LocalAddr())
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		rwc.Close()
		return nil
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.setState(http.StateNew)
	return c
}

// Shutdown stops accepting, closes idle connections, and waits for the
// others to finish their request (or ctx to end: then it returns ctx's
// error and leaves them running; Close cuts them).
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.closeListeners()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close stops accepting and cuts every connection, requests in flight
// included (their contexts are canceled).
func (s *Server) Close() error {
	s.closing.Store(true)
	err := s.closeListeners()
	s.mu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	return err
}

func (s *Server) closeListeners() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for ln := range s.listeners {
		if cerr := ln.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// closeIdle cuts connections waiting for a request and reports whether
// none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if st := http.ConnState(c.state.Load()); st == http.StateIdle || st == http.StateNew && c.newSince() > 5*time.Second {
			c.abort()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// conn is one client connection, served by one goroutine.
type conn struct {
	srv    *Server
	rwc    net.Conn
	remote string
	ctx    context.Context
	br     *bufio.Reader
	bw     *bufio.Writer
	lr     headLimit
	state  atomic.Int32
	born   time.Time

	watch watchHandle

	mu      sync.Mutex
	cancel  context.CancelFunc // the running request's, nil between requests
	gone    bool               // the client closed or reset the connection
	aborted atomic.Bool        // Close or Shutdown cut the connection
	// scratch reused by every response on the connection
	res response
}

func (c *conn) setState(st http.ConnState) {
	c.state.Store(int32(st))
	if st == http.StateNew {
		c.born = time.Now()
	}
	if h := c.srv.ConnState; h != nil {
		h(c.rwc, st)
	}
}

func (c *conn) newSince() time.Duration { return time.Since(c.born) }

// abort makes the connection's goroutine stop: its request context is
// canceled and every read and write fails at once. The goroutine closes
// the socket itself (after taking it out of the watcher), so its number
// is never reused under the watcher.
func (c *conn) abort() {
	c.aborted.Store(true)
	c.rwc.SetDeadline(aLongTimeAgo)
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
}

// peerGone is the watcher's call: the client closed or reset the
// connection. The running request's context is canceled.
func (c *conn) peerGone() {
	c.mu.Lock()
	c.gone = true
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
}

// setDeadline sets the read deadline and reports whether the connection
// is still to be served (an abort between the two is never lost: abort
// sets its flag before its deadline).
func (c *conn) setReadDeadline(t time.Time) bool {
	c.rwc.SetReadDeadline(t)
	return !c.aborted.Load()
}

func (c *conn) serve() {
	c.lr = headLimit{r: c.rwc, n: unlimited, err: errHeaderTooLarge}
	c.watch = watchConn(c)
	defer c.close()
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.srv.logf("h1: panic serving %v: %v\n%s", c.remote, v, buf)
		}
	}()
	s := c.srv
	first := true
	for {
		if c.reader().Buffered() == 0 {
			wait := s.IdleTimeout
			if wait == 0 {
				wait = s.ReadTimeout
			}
			if first {
				wait = s.ReadHeaderTimeout
				if wait == 0 {
					wait = s.ReadTimeout
				}
			}
			var dl time.Time
			if wait > 0 {
				dl = time.Now().Add(wait)
			}
			if !c.setReadDeadline(dl) {
				return
			}
			if _, err := c.br.Peek(1); err != nil {
				return
			}
			if !first {
				c.setState(http.StateActive)
			}
		} else if !first {
			c.setState(http.StateActive)
		}
		first = false
		if s.closing.Load() && http.ConnState(c.state.Load()) != http.StateActive {
			return
		}
		keep := c.serveOne()
		if !keep || s.closing.Load() {
			return
		}
		c.setState(http.StateIdle)
	}
}

// serveOne reads one request, runs the handler and writes the answer. It
// reports whether the connection may carry another request.
func (c *conn) serveOne() bool {
	s := c.srv
	t0 := time.Now()
	var hdrDeadline time.Time
	if d := s.ReadHeaderTimeout; d > 0 {
		hdrDeadline = t0.Add(d)
	} else if d := s.ReadTimeout; d > 0 {
		hdrDeadline = t0.Add(d)
	}
	if !c.setReadDeadline(hdrDeadline) {
		return false
	}
	maxHdr := s.MaxHeaderBytes
	if maxHdr <= 0 {
		maxHdr = defaultMaxHeaderBytes
	}
	c.lr.n = int64(maxHdr) + 4096 // net/http's slop for the request line and bufio
	req, err := http.ReadRequest(c.br)
	tooLarge := c.lr.n <= 0
	c.lr.n = unlimited
	if err != nil {
		c.refuse(err, tooLarge)
		return false
	}
	if msg, code := check(req); code != 0 {
		c.writeError(code, msg)
		return false
	}
	var bodyDeadline time.Time
	if d := s.ReadTimeout; d > 0 {
		bodyDeadline = t0.Add(d)
	}
	if !c.setReadDeadline(bodyDeadline) {
		return false
	}
	req.RemoteAddr = c.remote

	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	gone := c.gone
	c.cancel = cancel
	c.mu.Unlock()
	if gone {
		cancel()
	}
	req = req.WithContext(ctx)

	w := &c.res
	w.reset(c, req)
	if req.Body != http.NoBody && req.Body != nil {
		w.body = reqBody{rc: req.Body, w: w, remaining: req.ContentLength}
		w.body.expect = expectsContinue(req)
		req.Body = &w.body
	} else if c.br.Buffered() == 0 {
		c.releaseReader()
	}
	s.Handler.ServeHTTP(w, req)
	keep := w.finish()

	c.mu.Lock()
	c.cancel = nil
	c.mu.Unlock()
	cancel()
	w.release()
	return keep && !c.aborted.Load()
}

// check is what net/http's server checks of a parsed request before its
// handler: a status and reason when the request is refused.
func check(req *http.Request) (string, int) {
	if req.ProtoMajor != 1 {
		return "unsupported protocol version", http.StatusHTTPVersionNotSupported
	}
	// http.ReadRequest has moved the Host field to req.Host (and refused
	// two of them).
	if req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect {
		return "missing required Host header", http.StatusBadRequest
	}
	if !validHost(req.Host) {
		return "malformed Host header", http.StatusBadRequest
	}
	for k, vv := range req.Header {
		if !validHeaderName(k) {
			return "invalid header name", http.StatusBadRequest
		}
		for _, v := range vv {
			if !validHeaderValue(v) {
				return "invalid header value", http.StatusBadRequest
			}
		}
	}
	if e, ok := req.Header["Expect"]; ok {
		if !req.ProtoAtLeast(1, 1) || len(e) != 1 || !strings.EqualFold(e[0], "100-continue") {
			return "unsupported Expect", http.StatusExpectationFailed
		}
	}
	return "", 0
}

func expectsContinue(req *http.Request) bool {
	if _, ok := req.Header["Expect"]; ok {
		delete(req.Header, "Expect")
		return req.ContentLength != 0
	}
	return false
}

// refuse answers a request that could not be parsed, as net/http does.
func (c *conn) refuse(err error, tooLarge bool) {
	if tooLarge || errors.Is(err, errHeaderTooLarge) || errors.Is(err, bufio.ErrBufferFull) {
		c.writeError(http.StatusRequestHeaderFieldsTooLarge, "")
		return
	}
	var ne net.Error
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) || c.aborted.Load() {
		return // the client left or was too slow: nothing to answer
	}
	if msg := err.Error(); strings.Contains(msg, "unsupported transfer encoding") || strings.Contains(msg, "too many transfer encodings") {
		c.writeRaw("HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nUnsupported transfer encoding")
		return
	}
	c.writeError(http.StatusBadRequest, err.Error())
}

// writeError writes net/http's plain-text refusal and the connection is
// then closed.
func (c *conn) writeError(code int, msg string) {
	text := http.StatusText(code)
	if msg != "" {
		text += ": " + msg
	}
	c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.writer(), "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%d %s",
		code, http.StatusText(code), len(text)+4, code, text)
	c.bw.Flush()
}

func (c *conn) writeRaw(s string) {
	c.rwc.SetWriteDeadline(time.Now().Add(time.Second))
	c.writer().WriteString(s)
	c.bw.Flush()
}

// close ends the connection: out of the watcher, closed (after the
// client's last bytes are read, briefly, so the answer is not reset),
// buffers back to their pools.
func (c *conn) close() {
	c.watch.stop()
	if tc, ok := c.rwc.(interface{ CloseWrite() error }); ok && !c.aborted.Load() {
		tc.CloseWrite()
		c.rwc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		io.CopyN(io.Discard, c.rwc, 64<<10)
	}
	c.rwc.Close()
	c.setState(http.StateClosed)
	c.releaseReader()
	c.releaseWriter()
	s := c.srv
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// reader is the connection's read buffer, from the pool when it has none:
// a connection holds one only while it reads a request (or one waits in
// it), so an open stream costs no read buffer.
func (c *conn) reader() *bufio.Reader {
	if c.br == nil {
		c.br = pooledReader(&c.lr)
	}
	return c.br
}

func (c *conn) releaseReader() { c.br = releaseReader(c.br) }

// pooledReader is a 4 KiB read buffer from the pool, reading r.
func pooledReader(r io.Reader) *bufio.Reader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// releaseReader gives br (if any) back to the pool and returns nil.
func releaseReader(br *bufio.Reader) *bufio.Reader {
	if br != nil {
		br.Reset(nil)
		readerPool.Put(br)
	}
	return nil
}

// writer is the connection's write buffer, from the pool when it has
// none; it goes back after every flush, so a stream waiting for its next
// event holds none.
func (c *conn) writer() *bufio.Writer {
	if c.bw == nil {
		c.bw = writerPool.Get().(*bufio.Writer)
		c.bw.Reset(c.rwc)
	}
	return c.bw
}

func (c *conn) releaseWriter() {
	if c.bw != nil && c.bw.Buffered() == 0 {
		c.bw.Reset(nil)
		writerPool.Put(c.bw)
		c.bw = nil
	}
}

// headLimit bounds what a head parser may still read from a connection
// (n), failing with err past it; a body is read with n at its maximum.
type headLimit struct {
	r   net.Conn
	n   int64
	err error
}

const unlimited = 1<<63 - 1

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, l.err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var errHeaderTooLarge = errors.New("h1: request header too large")

// reqBody is the handler's view of the request body: Close does not read
// the rest (the server decides after the handler whether to), and the
// first read of a request that expects it sends "100 Continue".
type reqBody struct {
	rc        io.ReadCloser
	w         *response
	remaining int64 // Content-Length not read yet; -1 for chunked
	expect    bool
	sentCont  bool
	closed    bool
	eof       bool
	err       error
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.expect && !b.sentCont {
		b.sentCont = true
		if !b.w.committed {
			c := b.w.c
			c.writer().WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := c.bw.Flush(); err != nil {
				b.err = err
				return 0, err
			}
		}
	}
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if b.remaining > 0 {
		b.remaining -= int64(n)
	}
	if err == io.EOF {
		b.eof = true
		if c := b.w.c; c.br != nil && c.br.Buffered() == 0 {
			c.releaseReader() // the handler runs on without a read buffer
		}
	} else if err != nil {
		b.err = err
	}
	return n, err
}

func (b *reqBody) Close() error {
	b.closed = true
	return nil
}

// drain reads what the handler left of the body, up to
// maxPostHandlerRead, and reports whether the connection is still framed.
func (b *reqBody) drain() bool {
	if b.eof {
		return true
	}
	if b.err != nil || b.expect && !b.sentCont {
		return false // a client waiting for 100 Continue may send the body or not
	}
	if b.remaining > maxPostHandlerRead {
		return false
	}
	n, err := io.CopyN(io.Discard, b.rc, maxPostHandlerRead+1)
	return err == io.EOF && n <= maxPostHandlerRead
}

// CloseConnections cuts every open connection (their requests' contexts
// are canceled) and keeps listening.
func (s *Server) CloseConnections() {
	s.mu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
}
