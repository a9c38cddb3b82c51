package h1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// bytesConn is a connection whose client sent in and reads out.
type bytesConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *bytesConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error) { return c.out.Write(p) }
func (c *bytesConn) Close() error                { return nil }
func (c *bytesConn) LocalAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }
func (c *bytesConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}
}
func (c *bytesConn) SetDeadline(t time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(t time.Time) error { return nil }

// FuzzServe: whatever a client sends, the server never panics, every
// byte it writes parses as HTTP/1.1 answers, and no more answers than
// handler runs plus one refusal.
func FuzzServe(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
		"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nHEAD / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
		"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		hung := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic("FuzzServe: one input ran 10 s: " + string(buf[:runtime.Stack(buf, true)]))
		})
		defer hung.Stop()
		var logged bytes.Buffer
		runs := 0
		s := &Server{ErrorLog: log.New(&logged, "", 0), MaxHeaderBytes: 4 << 10,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
				switch r.URL.Path {
				case "/flush":
					io.WriteString(w, "a")
					w.(http.Flusher).Flush()
				case "/big":
					w.Write(make([]byte, 10<<10))
				default:
					io.WriteString(w, r.Method)
				}
			})}
		s.listeners, s.conns = map[net.Listener]struct{}{}, map[*conn]struct{}{}
		bc := &bytesConn{in: bytes.NewReader(in)}
		c := s.newConn(context.Background(), bc)
		c.serve()
		if strings.Contains(logged.String(), "panic") {
			t.Fatalf("panic: %s", logged.String())
		}
		br := bufio.NewReader(&bc.out)
		answers := 0
		for {
			if _, err := br.Peek(1); err == io.EOF {
				break
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d does not parse: %v\n%q", answers, err, bc.out.String())
			}
			if resp.StatusCode == http.StatusContinue {
				continue
			}
			answers++
			if _, err := io.Copy(io.Discard, resp.Body); err != nil && resp.ContentLength >= 0 {
				// a HEAD answer announces a length it does not send
				break
			}
		}
		if answers > runs+1 {
			t.Fatalf("%d answers for %d handler runs", answers, runs)
		}
	})
}
