package h1

import (
	"bufio"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// commitAt is how much of a body is held before the head is written: an
// answer that fits, from a handler that returns without flushing, gets a
// Content-Length; a larger or flushed one is chunked.
const commitAt = 4 << 10

// response is the handler's http.ResponseWriter (and Flusher; the
// deadlines of http.ResponseController). One per connection, reset for
// every request.
type response struct {
	c         *conn
	req       *http.Request
	header    http.Header
	body      reqBody
	status    int
	wrote     bool // the status is set
	committed bool // the head is in c.bw
	chunked   bool
	close     bool
	head      bool
	length    int64 // the body's length when known, else -1
	written   int64
	buf       []byte // the body before the head is committed
	failed    error  // a write to the client failed
	keys      []string
}

func (w *response) reset(c *conn, req *http.Request) {
	h := w.header
	if h == nil {
		h = make(http.Header, 8)
	} else {
		clear(h)
	}
	*w = response{c: c, req: req, header: h, length: -1, buf: w.buf[:0], keys: w.keys[:0], head: req.Method == http.MethodHead}
	w.close = req.Close || c.srv.closing.Load()
}

// release drops what the request held.
func (w *response) release() {
	if cap(w.buf) > 64<<10 {
		w.buf = nil
	}
	w.req = nil
	w.body = reqBody{}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wrote {
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInformational(code)
		return
	}
	w.wrote, w.status = true, code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.length = v
		} else {
			w.c.srv.logf("h1: invalid Content-Length %q", cl)
			w.header.Del("Content-Length")
		}
	}
}

func (w *response) writeInformational(code int) {
	if w.committed {
		return
	}
	bw := w.c.writer()
	writeStatus(bw, code)
	w.writeHeaders(bw)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		w.failed = err
	}
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if len(w.buf)+len(p) <= commitAt {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	if err := w.writeBody(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *response) WriteString(s string) (int, error) {
	if !w.committed && len(w.buf)+len(s) <= commitAt && w.wrote && w.failed == nil && bodyAllowed(w.status) &&
		(w.length < 0 || w.written+int64(len(s)) <= w.length) {
		w.buf = append(w.buf, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

func (w *response) writeBody(p []byte) error {
	if w.head || len(p) == 0 {
		return nil
	}
	bw := w.c.writer()
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		return w.fail(err)
	}
	_, err := bw.Write(p)
	return w.fail(err)
}

func (w *response) fail(err error) error {
	if err != nil && w.failed == nil {
		w.failed = err
		w.close = true
	}
	return w.failed
}

// commit writes the head: status, the handler's headers, and the framing
// (Content-Length when known, else chunked; close-delimited for HTTP/1.0).
func (w *response) commit(final bool) {
	w.committed = true
	if final && w.length < 0 && bodyAllowed(w.status) && (!w.head || len(w.buf) > 0) {
		w.length = int64(len(w.buf))
	}
	h := w.header
	delete(h, "Transfer-Encoding")
	if _, ok := h["Connection"]; ok && hasToken(h.Get("Connection"), "close") {
		w.close = true
	}
	if w.body.rc != nil && !w.body.eof && (w.body.remaining > maxPostHandlerRead || w.body.remaining < 0 && final) {
		w.close = true // the rest of a large body is not read: the connection ends after this answer
	}
	switch {
	case !bodyAllowed(w.status):
		delete(h, "Content-Length")
	case w.length >= 0:
		if _, ok := h["Content-Length"]; !ok {
			h["Content-Length"] = []string{strconv.FormatInt(w.length, 10)}
		}
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = !w.head
	default:
		w.close = true // HTTP/1.0: the body ends when the connection does
	}
	if w.close {
		h["Connection"] = []string{"close"}
	} else if !w.req.ProtoAtLeast(1, 1) {
		h["Connection"] = []string{"keep-alive"}
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{httpDate()}
	}
	if _, ok := h["Content-Type"]; !ok && bodyAllowed(w.status) && len(w.buf) > 0 {
		h["Content-Type"] = []string{http.DetectContentType(w.buf)}
	}
	if w.chunked {
		h["Transfer-Encoding"] = []string{"chunked"}
	}
	bw := w.c.writer()
	writeStatus(bw, w.status)
	w.writeHeaders(bw)
	bw.WriteString("\r\n")
	if len(w.buf) > 0 {
		w.writeBody(w.buf)
		w.buf = w.buf[:0]
	}
}

// writeHeaders writes the header fields sorted by name, skipping invalid
// names and turning line breaks in values into spaces (no response
// splitting), as net/http does.
func (w *response) writeHeaders(bw *bufio.Writer) {
	keys := w.keys[:0]
	for k := range w.header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.keys = keys
	for _, k := range keys {
		if !validHeaderName(k) {
			continue
		}
		for _, v := range w.header[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			if strings.ContainsAny(v, "\r\n") {
				v = lineBreaks.Replace(v)
			}
			bw.WriteString(strings.TrimSpace(v))
			bw.WriteString("\r\n")
		}
	}
}

var lineBreaks = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

func writeStatus(bw *bufio.Writer, code int) {
	bw.WriteString("HTTP/1.1 ")
	if text := http.StatusText(code); text != "" {
		bw.WriteString(strconv.Itoa(code))
		bw.WriteByte(' ')
		bw.WriteString(text)
	} else {
		bw.WriteString(strconv.Itoa(code))
		bw.WriteString(" status code ")
		bw.WriteString(strconv.Itoa(code))
	}
	bw.WriteString("\r\n")
}

// Flush sends what is written so far (the head first, chunked).
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush with the write error, for http.ResponseController.
func (w *response) FlushError() error {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	if w.failed != nil {
		return w.failed
	}
	if w.c.bw != nil {
		w.fail(w.c.bw.Flush())
	}
	w.c.releaseWriter() // a stream between events holds no buffer
	return w.failed
}

// SetWriteDeadline and SetReadDeadline are http.ResponseController's.
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.rwc.SetReadDeadline(t) }

// finish completes the answer after the handler returns and reports
// whether the connection may carry another request.
func (w *response) finish() bool {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
	}
	if w.chunked && w.failed == nil {
		_, err := w.c.writer().WriteString("0\r\n\r\n")
		w.fail(err)
	}
	if w.length >= 0 && w.written != w.length && !w.head && bodyAllowed(w.status) {
		w.close = true // fewer bytes than announced: the client would wait for the rest
	}
	if w.failed == nil && w.c.bw != nil {
		w.fail(w.c.bw.Flush())
	}
	w.c.releaseWriter()
	if w.failed != nil || w.close {
		return false
	}
	if w.body.rc != nil && !w.body.drain() {
		return false
	}
	return true
}

// hasToken reports whether the comma-separated list v holds token
// (case-insensitive).
func hasToken(v, token string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

// httpDate is the Date field's value, formatted once a second.
func httpDate() string {
	now := time.Now()
	sec := now.Unix()
	if d := cachedDate.Load(); d != nil && d.sec == sec {
		return d.text
	}
	d := &dateText{sec: sec, text: now.UTC().Format(http.TimeFormat)}
	cachedDate.Store(d)
	return d.text
}

type dateText struct {
	sec  int64
	text string
}

var cachedDate atomic.Pointer[dateText]

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar[s[i]] {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s has no control characters but tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// validHost is net/http's check of a Host field: the bytes a host, port,
// IPv6 literal or registered name may hold.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if !validHostByte[h[i]] {
			return false
		}
	}
	return true
}

var (
	isTokenChar   = alnumAnd("!#$%&'*+-.^_`|~")
	validHostByte = alnumAnd("!$%&'()*+,-.:;=[]_~")
)

// alnumAnd is the set of ASCII letters and digits and the bytes of extra.
func alnumAnd(extra string) (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; i < len(extra); i++ {
		t[extra[i]] = true
	}
	return t
}
