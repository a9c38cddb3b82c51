package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// echo answers with what the handler saw of the request: method, path,
// framing and body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s host=%q te=%v cl=%d body=%q", r.Method, r.URL.Path, r.Host, r.TransferEncoding, r.ContentLength, b)
})

// start serves h on a loopback port with net/http's server or ours.
func start(t testing.TB, h http.Handler, ours bool, tweak ...func(*Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ours {
		s := &Server{Handler: h, MaxHeaderBytes: 16 << 10, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
		for _, f := range tweak {
			f(s)
		}
		go s.Serve(ln)
		t.Cleanup(func() { s.Close() })
	} else {
		s := &http.Server{Handler: h, MaxHeaderBytes: 16 << 10, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
		go s.Serve(ln)
		t.Cleanup(func() { s.Close() })
	}
	return ln.Addr().String()
}

// exchange writes raw on a new connection and reads every answer until
// the server closes the connection or stays silent for quiet.
func exchange(t testing.TB, addr, raw string, quiet time.Duration) (statuses []int, bodies []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go io.WriteString(c, raw)
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(quiet))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, bodies, !(errors.As(err, &ne) && ne.Timeout())
		}
		b, err := io.ReadAll(resp.Body)
		statuses, bodies = append(statuses, resp.StatusCode), append(bodies, string(b))
		if err != nil {
			return statuses, bodies, true
		}
	}
}

// TestSameAsNetHTTP sends the same raw bytes to net/http's server and to
// ours: the same answers (status, what the handler saw) and the same
// decision to close. Framing attacks (RFC 9112 §6.1, §11.2), malformed
// heads and pipelining are all here.
func TestSameAsNetHTTP(t *testing.T) {
	const post = "POST /p HTTP/1.1\r\nHost: h\r\n"
	chunked := "5\r\nhello\r\n0\r\n\r\n"
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n"
	cases := map[string]string{
		"Get":                    "GET /a HTTP/1.1\r\nHost: h\r\n\r\n",
		"Pipelined":              "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n",
		"PostCL":                 post + "Content-Length: 5\r\n\r\nhello",
		"PostCLThenNext":         post + "Content-Length: 5\r\n\r\nhello" + smuggled,
		"Chunked":                post + "Transfer-Encoding: chunked\r\n\r\n" + chunked + smuggled,
		"ChunkedExtension":       post + "Transfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\n\r\n",
		"BadChunkSize":           post + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
		"CLAndTE":                post + "Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + smuggled,
		"TEAndCL":                post + "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n" + chunked + smuggled,
		"TEChunkedIdentity":      post + "Transfer-Encoding: chunked, identity\r\n\r\n" + chunked,
		"TEIdentity":             post + "Transfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello",
		"TwoTE":                  post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
		"TwoCLDifferent":         post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"TwoCLSame":              post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
		"CLPlus":                 post + "Content-Length: +5\r\n\r\nhello",
		"CLHex":                  post + "Content-Length: 0x5\r\n\r\nhello",
		"CLNegative":             post + "Content-Length: -1\r\n\r\n",
		"CLSpace":                post + "Content-Length: 5 5\r\n\r\nhello",
		"ObsFold":                post + "X-A: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",
		"ObsFoldCL":              post + "Content-Length:\r\n 5\r\n\r\nhello",
		"LeadingSpaceHeader":     "POST /p HTTP/1.1\r\n Host: h\r\nContent-Length: 5\r\n\r\nhello",
		"SpaceBeforeColon":       post + "Content-Length : 5\r\n\r\nhello",
		"NoHost11":               "GET / HTTP/1.1\r\n\r\n",
		"TwoHosts":               "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"BadHost":                "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"AbsoluteURI":            "GET http://other/x HTTP/1.1\r\nHost: h\r\n\r\n",
		"HTTP10":                 "GET / HTTP/1.0\r\n\r\n",
		"HTTP10KeepAlive":        "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n",
		"HTTP10CLAndTE":          "POST /p HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello" + smuggled,
		"ConnectionClose":        "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n" + smuggled,
		"HTTP09":                 "GET /\r\n\r\n",
		"HTTP3":                  "GET / HTTP/3.0\r\nHost: h\r\n\r\n",
		"Garbage":                "GARBAGE\r\n\r\n",
		"BareLF":                 "GET / HTTP/1.1\nHost: h\n\n",
		"BadHeaderName":          "GET / HTTP/1.1\r\nHost: h\r\nBad Name: x\r\n\r\n",
		"NULInValue":             "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n",
		"HugeHeader":             "GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n",
		"ManyHeaders":            "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-A: b\r\n", 5000) + "\r\n",
		"LongRequestLine":        "GET /" + strings.Repeat("a", 40<<10) + " HTTP/1.1\r\nHost: h\r\n\r\n",
		"ExpectContinue":         post + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
		"ExpectOther":            post + "Expect: teapot\r\nContent-Length: 5\r\n\r\nhello",
		"Head":                   "HEAD /h HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
		"BodyOnGet":              "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello" + smuggled,
		"ShortBody":              post + "Content-Length: 50\r\n\r\nhello",
		"UnknownMethod":          "BREW /pot HTTP/1.1\r\nHost: h\r\n\r\n",
		"LowercaseMethod":        "get / HTTP/1.1\r\nHost: h\r\n\r\n",
		"ContentLengthOverflow":  post + "Content-Length: 99999999999999999999999\r\n\r\n",
		"TEOnHTTP10WithoutCL":    "POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
		"ChunkedTrailer":         post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n" + smuggled,
		"ChunkedNoFinalCRLF":     post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n",
		"ChunkSizeOverflow":      post + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
		"HeaderWithoutColon":     "GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n",
		"TabInValue":             "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\tb\r\n\r\n",
		"EmptyHeaderName":        "GET / HTTP/1.1\r\nHost: h\r\n: x\r\n\r\n",
		"TETrailingComma":        post + "Transfer-Encoding: chunked,\r\n\r\n" + chunked,
		"TEUppercase":            post + "Transfer-Encoding: CHUNKED\r\n\r\n" + chunked,
		"TEGzipChunked":          post + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked,
		"CLLeadingZeros":         post + "Content-Length: 005\r\n\r\nhello",
		"CLEmpty":                post + "Content-Length: \r\n\r\n",
		"SpaceInRequestLine":     "GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
		"RequestLineTrailingSpc": "GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			std := start(t, echo, false)
			ours := start(t, echo, true)
			ws, wb, wc := exchange(t, std, raw, 300*time.Millisecond)
			gs, gb, gc := exchange(t, ours, raw, 300*time.Millisecond)
			if fmt.Sprint(ws) != fmt.Sprint(gs) || wc != gc {
				t.Fatalf("net/http: %v closed=%v %q\nh1:       %v closed=%v %q", ws, wc, wb, gs, gc, gb)
			}
			for i := range wb {
				if ws[i] == http.StatusOK && wb[i] != gb[i] {
					t.Errorf("answer %d: net/http %q, h1 %q", i, wb[i], gb[i])
				}
			}
		})
	}
}

// TestHTTP2PriorKnowledgeRefused: HTTP/2's connection preface is
// answered 505 and the connection closed (net/http, without h2c, hands
// it to the handler as a request of method PRI).
func TestHTTP2PriorKnowledgeRefused(t *testing.T) {
	st, _, closed := exchange(t, start(t, echo, true), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 2*time.Second)
	if fmt.Sprint(st) != "[505]" || !closed {
		t.Errorf("%v closed=%v, want [505] closed", st, closed)
	}
}

// TestResponseFraming: what a handler writes reaches the client framed
// as net/http frames it (Content-Length for small answers, chunked for
// flushed or large ones, none for HEAD, 204 and 304), with header values
// that cannot split the response.
func TestResponseFraming(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			io.WriteString(w, "hi")
		case "/large":
			w.Write([]byte(strings.Repeat("x", 100<<10)))
		case "/flushed":
			io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			io.WriteString(w, "b")
		case "/declared":
			w.Header().Set("Content-Length", "3")
			io.WriteString(w, "abc")
		case "/short":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			io.WriteString(w, "ignored")
		case "/split":
			w.Header().Set("X-A", "a\r\nSet-Cookie: evil=1")
			io.WriteString(w, "ok")
		case "/empty":
		}
	})
	for _, tc := range []struct {
		path, method  string
		status        int
		body          string
		chunked       bool
		contentLength int64
		closed        bool
	}{
		{"/small", "GET", 200, "hi", false, 2, false},
		{"/large", "GET", 200, strings.Repeat("x", 100<<10), true, -1, false},
		{"/flushed", "GET", 200, "ab", true, -1, false},
		{"/declared", "GET", 200, "abc", false, 3, false},
		{"/short", "GET", 200, "abc", false, 10, true},
		{"/nocontent", "GET", 204, "", false, 0, false},
		{"/split", "GET", 200, "ok", false, 2, false},
		{"/empty", "GET", 200, "", false, 0, false},
		{"/small", "HEAD", 200, "", false, 2, false},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			addr := start(t, h, true)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: h\r\n\r\n", tc.method, tc.path)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: tc.method})
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			if tc.closed {
				if err == nil {
					t.Error("a short answer was not cut")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || string(b) != tc.body {
				t.Errorf("%d %q, want %d %q", resp.StatusCode, b, tc.status, tc.body)
			}
			if got := len(resp.TransferEncoding) > 0; got != tc.chunked {
				t.Errorf("chunked %v, want %v", got, tc.chunked)
			}
			if resp.ContentLength != tc.contentLength {
				t.Errorf("Content-Length %d, want %d", resp.ContentLength, tc.contentLength)
			}
			if resp.Header.Get("Date") == "" {
				t.Error("no Date")
			}
			if resp.Header.Get("Set-Cookie") != "" {
				t.Error("a header value split the response")
			}
			// the connection carries the next request
			fmt.Fprintf(c, "GET /small HTTP/1.1\r\nHost: h\r\n\r\n")
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the connection did not carry a second request: %v", err)
			}
			resp.Body.Close()
		})
	}
}

// TestClientGoneCancels: a client that closes its connection while the
// handler waits cancels the request's context (the epoll watcher), as
// net/http's background read does.
func TestClientGoneCancels(t *testing.T) {
	if !Supported() {
		t.Skip("no watcher on this platform")
	}
	started, canceled := make(chan struct{}), make(chan time.Duration, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		close(started)
		t0 := time.Now()
		<-r.Context().Done()
		canceled <- time.Since(t0)
	})
	addr := start(t, h, true)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
	<-started
	closedAt := time.Now()
	c.Close()
	select {
	case <-canceled:
		t.Logf("canceled %v after the client closed", time.Since(closedAt))
	case <-time.After(30 * time.Second):
		t.Fatal("the request's context was not canceled when its client left")
	}
}

// TestSlowHeaderCut: a client that sends its head slower than
// ReadHeaderTimeout (slowloris) is cut; one idle past IdleTimeout too.
func TestSlowHeaderCut(t *testing.T) {
	addr := start(t, echo, true, func(s *Server) { s.ReadHeaderTimeout, s.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\n")
	var err2 error
	for i := 0; i < 100 && err2 == nil; i++ {
		time.Sleep(50 * time.Millisecond)
		_, err2 = io.WriteString(c, "X-Slow: a\r\n")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("a slow head was not cut")
		}
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("cut after %v", d)
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("an idle connection was not closed: %v", err)
	}
}

// TestFlushPerEvent: every Flush reaches the client before the handler
// goes on (SSE).
func TestFlushPerEvent(t *testing.T) {
	next := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			<-next
		}
	})
	addr := start(t, h, true)
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
}

// TestShutdownWaitsForRequests: Shutdown closes idle connections and
// waits for a request in flight, which completes.
func TestShutdownWaitsForRequests(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		served.Add(1)
		io.WriteString(w, "done")
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	s := &Server{Handler: h}
	go s.Serve(ln)
	addr := ln.Addr().String()
	idle, _ := net.Dial("tcp", addr)
	defer idle.Close()
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	for { // the slow request is in its handler: two connections, one served
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n >= 2 && served.Load() == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the idle connection was not closed: %v", err)
	}
	close(release)
	if b := <-got; b != "done" {
		t.Errorf("the request in flight got %q", b)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}
