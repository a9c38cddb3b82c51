package h1

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// engine is a net/http server standing in for vLLM, counting the
// connections it accepted.
type engine struct {
	*httptest.Server
	conns atomic.Int32
}

func newEngine(t *testing.T, h http.HandlerFunc) *engine {
	e := &engine{}
	e.Server = httptest.NewUnstartedServer(h)
	e.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			e.conns.Add(1)
		}
	}
	e.Start()
	t.Cleanup(func() { e.CloseClientConnections(); e.Close() })
	return e
}

func post(ctx context.Context, url, body string) *http.Request {
	b := []byte(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return req
}

func roundTrip(t *testing.T, tr http.RoundTripper, req *http.Request) (int, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestTransportReuse: answers read to their end leave the connection
// for the next request; the body and headers reach the engine.
func TestTransportReuse(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Header.Get("X-A")+" "+r.Host)
		io.WriteString(w, strings.ToUpper(string(b)))
	})
	tr := &Transport{}
	for i := range 5 {
		req := post(context.Background(), e.URL+"/v1/x?q=1", "hello")
		req.Header.Set("X-A", "a")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "HELLO" || resp.Header.Get("X-Seen") != "a "+strings.TrimPrefix(e.URL, "http://") {
			t.Fatalf("request %d: %q %v", i, b, resp.Header)
		}
	}
	if n := e.conns.Load(); n != 1 {
		t.Errorf("%d connections for 5 sequential requests, want 1", n)
	}
}

// TestTransportEngineClosedIdle: a kept-alive connection the engine
// closed is not used (or the request is sent again on a new one).
func TestTransportEngineClosedIdle(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := &Transport{}
	roundTrip(t, tr, post(context.Background(), e.URL, "a"))
	e.CloseClientConnections() // the engine's keep-alive timeout
	time.Sleep(10 * time.Millisecond)
	if st, b := roundTrip(t, tr, post(context.Background(), e.URL, "b")); st != 200 || b != "ok" {
		t.Fatalf("%d %q", st, b)
	}
	if n := e.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// TestTransportCancelReachesEngine: a canceled request closes its
// connection: the engine's request context ends, whether the transport
// waits for the head or reads the body.
func TestTransportCancelReachesEngine(t *testing.T) {
	for _, stage := range []string{"head", "body"} {
		t.Run(stage, func(t *testing.T) {
			gone := make(chan struct{})
			e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body)
				if stage == "body" {
					io.WriteString(w, "data: 1\n\n")
					w.(http.Flusher).Flush()
				}
				<-r.Context().Done()
				close(gone)
			})
			tr := &Transport{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				resp, err := tr.RoundTrip(post(ctx, e.URL, "x"))
				if err == nil {
					buf := make([]byte, 9)
					io.ReadFull(resp.Body, buf)
					_, err = io.ReadAll(resp.Body)
				}
				errc <- err
			}()
			time.Sleep(50 * time.Millisecond) // in the engine's handler (a later cancel only waits longer)
			cancel()
			select {
			case <-gone:
			case <-time.After(30 * time.Second):
				t.Fatal("the engine never saw the request end")
			}
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("error %v, want context.Canceled", err)
			}
		})
	}
}

// TestTransportPartialBodyNotReused: an answer closed before its end
// closes the connection; the next request gets a new one.
func TestTransportPartialBodyNotReused(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) { w.Write(bytes.Repeat([]byte("x"), 100<<10)) })
	tr := &Transport{}
	resp, err := tr.RoundTrip(post(context.Background(), e.URL, "a"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	if st, b := roundTrip(t, tr, post(context.Background(), e.URL, "b")); st != 200 || len(b) != 100<<10 {
		t.Fatalf("%d %d bytes", st, len(b))
	}
	if n := e.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// TestTransportLimits: a head larger than MaxResponseHeaderBytes and one
// slower than ResponseHeaderTimeout are errors, not waits.
func TestTransportLimits(t *testing.T) {
	big := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", 10<<10))
		io.WriteString(w, "ok")
	})
	tr := &Transport{MaxResponseHeaderBytes: 4 << 10}
	if _, err := tr.RoundTrip(post(context.Background(), big.URL, "a")); err == nil {
		t.Error("a head over MaxResponseHeaderBytes was read")
	}
	release := make(chan struct{})
	slow := newEngine(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	tr = &Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	_, err := tr.RoundTrip(post(context.Background(), slow.URL, "a"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("error %v, want a timeout", err)
	}
}

// TestTransportFallback: https goes to Fallback.
func TestTransportFallback(t *testing.T) {
	e := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls") }))
	defer e.Close()
	tr := &Transport{Fallback: e.Client().Transport}
	if st, b := roundTrip(t, tr, post(context.Background(), e.URL, "a")); st != 200 || b != "tls" {
		t.Fatalf("%d %q", st, b)
	}
}

// TestTransportChunkedAndClose: chunked answers are read whole; an answer
// with Connection: close is not kept.
func TestTransportChunkedAndClose(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		for range 3 {
			io.WriteString(w, "chunk ")
			w.(http.Flusher).Flush()
		}
	})
	tr := &Transport{}
	if _, b := roundTrip(t, tr, post(context.Background(), e.URL+"/close", "a")); b != "chunk chunk chunk " {
		t.Fatalf("%q", b)
	}
	if _, b := roundTrip(t, tr, post(context.Background(), e.URL, "a")); b != "chunk chunk chunk " {
		t.Fatalf("%q", b)
	}
	if n := e.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the closed one not reused)", n)
	}
}
