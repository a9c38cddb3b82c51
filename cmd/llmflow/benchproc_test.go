package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/go-llmflow/llmflow/internal/h1"
)

// The pieces the process benchmarks (BenchmarkFastPath,
// BenchmarkOpenStreams) are made of: child processes started and stopped
// with the benchmark, helper servers run by the test binary itself in a
// process of their own, and a minimal HTTP/1.1 client whose own cost is
// small and the same for every target. Nothing here knows how `llmflow
// serve` works inside: it is started as a process and spoken to over
// sockets.

// benchChild runs one of the benchmarks' helper servers instead of the
// tests when LLMFLOW_BENCH_CHILD names one (the test binary re-executed by
// startBenchHelper); it reports whether it did.
func benchChild() bool {
	var err error
	switch os.Getenv("LLMFLOW_BENCH_CHILD") {
	case "":
		return false
	case "reverseproxy":
		err = runReverseProxy(os.Getenv("LLMFLOW_BENCH_LISTEN"), os.Getenv("LLMFLOW_BENCH_UPSTREAM"))
	case "h1proxy":
		err = runH1Proxy(os.Getenv("LLMFLOW_BENCH_LISTEN"), os.Getenv("LLMFLOW_BENCH_UPSTREAM"))
	case "fasthttpproxy":
		err = runFastHTTPProxy(os.Getenv("LLMFLOW_BENCH_LISTEN"), os.Getenv("LLMFLOW_BENCH_UPSTREAM"))
	case "slowsse":
		err = runSlowSSE(strings.Split(os.Getenv("LLMFLOW_BENCH_LISTEN"), ","), os.Getenv("LLMFLOW_BENCH_INTERVAL"))
	default:
		err = fmt.Errorf("unknown LLMFLOW_BENCH_CHILD %q", os.Getenv("LLMFLOW_BENCH_CHILD"))
	}
	fmt.Fprintln(os.Stderr, "bench child:", err)
	os.Exit(1)
	return true
}

// runReverseProxy is the bare httputil.ReverseProxy target: nothing but
// the standard library, with a pool of kept-alive upstream connections as
// large as the nginx target's.
func runReverseProxy(listen, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     10 * time.Minute,
		DisableCompression:  true,
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	return (&http.Server{Handler: rp, ReadHeaderTimeout: time.Minute}).Serve(ln)
}

// runH1Proxy is a featureless proxy on llmflow's own HTTP/1.1 stack
// (internal/h1's server and client): the floor under llmflow's own
// numbers, what its features cost on top.
func runH1Proxy(listen, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	tr := &h1.Transport{MaxIdlePerHost: 64, IdleTimeout: 10 * time.Minute}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		out := &http.Request{Method: r.Method, URL: &url.URL{Scheme: "http", Host: u.Host, Path: r.URL.Path}, Host: u.Host,
			Header: r.Header, ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body))}
		out = out.WithContext(r.Context())
		resp, err := tr.RoundTrip(out)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	return (&h1.Server{Handler: h, ReadHeaderTimeout: time.Minute}).Serve(ln)
}

// runFastHTTPProxy is a featureless proxy on fasthttp's server and
// client (streamed answers): the other stack issue 25 names, measured
// beside ours.
func runFastHTTPProxy(listen, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: 256, StreamResponseBody: true}
	h := func(ctx *fasthttp.RequestCtx) {
		req := fasthttp.AcquireRequest()
		ctx.Request.CopyTo(req)
		req.SetHost(u.Host)
		resp := fasthttp.AcquireResponse()
		if err := hc.Do(req, resp); err != nil {
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
			ctx.Error("bad gateway", fasthttp.StatusBadGateway)
			return
		}
		fasthttp.ReleaseRequest(req)
		ctx.SetStatusCode(resp.StatusCode())
		ctx.Response.Header.SetContentTypeBytes(resp.Header.ContentType())
		if resp.IsBodyStream() {
			body := resp.BodyStream()
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				defer fasthttp.ReleaseResponse(resp)
				buf := make([]byte, 4096)
				for {
					n, err := body.Read(buf)
					if n > 0 {
						w.Write(buf[:n])
						w.Flush()
					}
					if err != nil {
						return
					}
				}
			})
			return
		}
		ctx.SetBody(resp.Body())
		fasthttp.ReleaseResponse(resp)
	}
	return (&fasthttp.Server{Handler: h, ReadTimeout: time.Minute}).ListenAndServe(listen)
}

// runSlowSSE is the slow streaming engine of BenchmarkOpenStreams, on one
// port of several loopback addresses: a chat request with "stream":true
// gets its headers and a role chunk at once, then a content chunk (with a
// running usage count, as vLLM's continuous_usage_stats) every interval,
// forever; the connection is held until the peer goes. Any other chat
// request gets a short JSON answer, anything ending in /health a 200. One
// goroutine and no buffer per held stream: 10,000 cost a few tens of MB.
func runSlowSSE(listen []string, every string) error {
	interval, err := time.ParseDuration(every)
	if err != nil {
		return err
	}
	errc := make(chan error, len(listen))
	for _, a := range listen {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						continue
					}
					if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					errc <- err
					return
				}
				go slowConn(c, interval)
			}
		}()
	}
	return <-errc
}

func slowConn(c net.Conn, interval time.Duration) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		var v struct {
			Stream bool `json:"stream"`
		}
		json.Unmarshal(body, &v)
		switch {
		case strings.HasSuffix(req.URL.Path, "/health"):
			_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
		case strings.HasSuffix(req.URL.Path, "/chat/completions") && v.Stream:
			br = nil // never read again: the stream holds the connection
			slowStream(c, interval)
			return
		case strings.HasSuffix(req.URL.Path, "/chat/completions"):
			_, err = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(fastAnswer), fastAnswer)
		default:
			_, err = io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
		}
		if err != nil {
			return
		}
	}
}

func slowStream(c net.Conn, interval time.Duration) {
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	role := `data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"bench/upstream","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"prompt_tokens":21,"completion_tokens":0,"total_tokens":21}}` + "\n\n"
	if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"+chunk(role)); err != nil {
		return
	}
	for i := 1; ; i++ {
		time.Sleep(interval)
		ev := fmt.Sprintf(`data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"bench/upstream","choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}],"usage":{"prompt_tokens":21,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", i, i, 21+i)
		if _, err := io.WriteString(c, chunk(ev)); err != nil {
			return
		}
	}
}

// childProc is a process started by a benchmark, its output in a file;
// it is stopped (stopSig, then SIGKILL after a minute) when the benchmark
// ends, unless stopped before.
type childProc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	stopSig syscall.Signal
	done    chan struct{}
	err     error
}

func startChildProc(tb testing.TB, name string, cmd *exec.Cmd, logPath string, stopSig syscall.Signal) *childProc {
	tb.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	p := &childProc{name: name, cmd: cmd, log: logPath, stopSig: stopSig, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	tb.Cleanup(p.stop)
	return p
}

// stop signals the process and waits for its exit.
func (p *childProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(p.stopSig)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *childProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *childProc) logTail(n int) string {
	b, _ := os.ReadFile(p.log)
	return tail(string(b), n)
}

// waitDial waits until addr accepts connections (p still running).
func (p *childProc) waitDial(tb testing.TB, addr string) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		if p.exited() {
			tb.Fatalf("%s exited before listening on %s: %v\n%s", p.name, addr, p.err, p.logTail(3000))
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s does not listen on %s after a minute:\n%s", p.name, addr, p.logTail(3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rssBytes is the process's resident set (VmRSS).
func (p *childProc) rssBytes(tb testing.TB) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	tb.Fatalf("no VmRSS in /proc/%d/status", p.cmd.Process.Pid)
	return 0
}

// startBenchHelper re-executes the test binary as one of benchChild's
// helper servers, listening on listen (comma-separated addresses).
func startBenchHelper(tb testing.TB, dir, kind, listen string, env ...string) *childProc {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), append([]string{"LLMFLOW_BENCH_CHILD=" + kind, "LLMFLOW_BENCH_LISTEN=" + listen}, env...)...)
	p := startChildProc(tb, kind, cmd, filepath.Join(dir, kind+".log"), syscall.SIGKILL)
	for _, a := range strings.Split(listen, ",") {
		p.waitDial(tb, a)
	}
	return p
}

// startBenchServe runs `llmflow serve -c cfg` on a free loopback port, its
// log in logPath (a file: a pipe read by this process would spend the
// shared CPUs on the gateway's access log), at the default log level
// unless LLMFLOW_BENCH_LOG_LEVEL says otherwise. adminAddr, when not
// empty, is the configuration's admin listener, waited for too. It
// returns the process and its client address.
func startBenchServe(tb testing.TB, name, cfg, logPath, adminAddr string, env ...string) (*childProc, string) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	addr := freeAddr(tb)
	args := []string{"serve", "-c", cfg, "--listen", addr}
	if lvl := os.Getenv("LLMFLOW_BENCH_LOG_LEVEL"); lvl != "" {
		args = append(args, "--log-level", lvl)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), append([]string{"LLMFLOW_TEST_EXEC_MAIN=1"}, env...)...)
	p := startChildProc(tb, name, cmd, logPath, syscall.SIGTERM)
	p.waitDial(tb, addr)
	if adminAddr != "" {
		p.waitDial(tb, adminAddr)
	}
	return p, addr
}

// startNginx runs nginx with the http block body given (an upstream or a
// proxy), in a prefix directory of its own, and waits for listen.
func startNginx(tb testing.TB, nginx, dir, name, listen, httpBody string) *childProc {
	tb.Helper()
	prefix := filepath.Join(dir, name)
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		tb.Fatal(err)
	}
	conf := fmt.Sprintf(`daemon off;
worker_processes auto;
worker_rlimit_nofile 65536;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events {
    worker_connections 16384;
}
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    keepalive_timeout 600s;
    keepalive_requests 1000000000;
%[2]s
}
`, prefix, httpBody)
	path := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(nginx, "-t", "-q", "-p", prefix, "-c", path).CombinedOutput(); err != nil {
		tb.Fatalf("nginx -t (%s): %v\n%s\n%s", name, err, out, conf)
	}
	p := startChildProc(tb, "nginx "+name, exec.Command(nginx, "-p", prefix, "-c", path), filepath.Join(prefix, "stderr.log"), syscall.SIGTERM)
	p.waitDial(tb, listen)
	return p
}

// rawClient is one persistent HTTP/1.1 connection, spoken to with fixed
// request bytes and a minimal response reader (status line, headers,
// Content-Length or chunked body): the load generator's cost stays small
// and the same for every target.
type rawClient struct {
	addr    string
	local   *net.TCPAddr // source address; nil: the kernel's choice
	c       net.Conn
	br      *bufio.Reader
	redials int // kept-alive connections found closed and dialled again
}

// rawAnswer is what rawClient.do read.
type rawAnswer struct {
	status int
	ttfb   time.Duration // request written → first body byte available
	total  time.Duration // request written → last body byte read
	body   []byte        // kept only when asked
	id     string        // X-Request-Id, kept only when asked
}

func newRawClient(addr string) *rawClient { return &rawClient{addr: addr} }

func (r *rawClient) dial() error {
	d := net.Dialer{Timeout: 10 * time.Second}
	if r.local != nil {
		d.LocalAddr = r.local
	}
	c, err := d.Dial("tcp", r.addr)
	if err != nil {
		return err
	}
	r.c = c
	if r.br == nil {
		r.br = bufio.NewReaderSize(c, 16<<10)
	} else {
		r.br.Reset(c)
	}
	return nil
}

func (r *rawClient) close() {
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
}

// do sends req, a whole HTTP/1.1 request, and reads the answer, keeping
// its body and X-Request-Id when keep. A kept-alive connection that the
// server closed meanwhile (nothing read back) is dialled again once, and
// the clock started again.
func (r *rawClient) do(req []byte, keep bool) (rawAnswer, error) {
	for attempt := 0; ; attempt++ {
		fresh := r.c == nil
		if fresh {
			if err := r.dial(); err != nil {
				return rawAnswer{}, err
			}
		}
		a, started, err := r.roundTrip(req, keep)
		if err == nil {
			return a, nil
		}
		r.close()
		if started || fresh || attempt > 0 {
			return a, err
		}
		r.redials++
	}
}

var (
	hdrContentLength    = []byte("content-length")
	hdrTransferEncoding = []byte("transfer-encoding")
	hdrConnection       = []byte("connection")
	hdrRequestID        = []byte("x-request-id")
	valChunked          = []byte("chunked")
	valClose            = []byte("close")
)

func (r *rawClient) roundTrip(req []byte, keep bool) (a rawAnswer, started bool, err error) {
	r.c.SetDeadline(time.Now().Add(2 * time.Minute))
	t0 := time.Now()
	if _, err = r.c.Write(req); err != nil {
		return a, false, err
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return a, len(line) > 0, err
	}
	started = true
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return a, true, fmt.Errorf("bad status line %q", line)
	}
	a.status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	length, chunked, closing := int64(-1), false, false
	for {
		if line, err = r.br.ReadSlice('\n'); err != nil {
			return a, true, err
		}
		if len(line) <= 2 {
			break
		}
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			return a, true, fmt.Errorf("bad header line %q", line)
		}
		name, val := line[:i], bytes.TrimSpace(line[i+1:])
		switch {
		case bytes.EqualFold(name, hdrContentLength):
			if length, err = parseDec(val); err != nil {
				return a, true, err
			}
		case bytes.EqualFold(name, hdrTransferEncoding):
			chunked = bytes.EqualFold(val, valChunked)
		case bytes.EqualFold(name, hdrConnection):
			closing = bytes.EqualFold(val, valClose)
		case keep && bytes.EqualFold(name, hdrRequestID):
			a.id = string(val)
		}
	}
	if chunked || length != 0 {
		if r.br.Buffered() == 0 {
			if _, err = r.br.Peek(1); err != nil {
				return a, true, err
			}
		}
		a.ttfb = time.Since(t0)
	}
	switch {
	case chunked:
		err = r.readChunked(&a, keep)
	case length >= 0:
		err = r.readN(&a, length, keep)
	default: // until the server closes
		closing = true
		var b []byte
		b, err = io.ReadAll(r.br)
		if keep {
			a.body = b
		}
	}
	a.total = time.Since(t0)
	if err == nil && closing {
		r.close()
	}
	return a, true, err
}

func (r *rawClient) readN(a *rawAnswer, n int64, keep bool) error {
	if !keep {
		_, err := r.br.Discard(int(n))
		return err
	}
	buf := make([]byte, n)
	_, err := io.ReadFull(r.br, buf)
	a.body = append(a.body, buf...)
	return err
}

func (r *rawClient) readChunked(a *rawAnswer, keep bool) error {
	for {
		line, err := r.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		size := int64(0)
	hex:
		for _, c := range line {
			switch {
			case c >= '0' && c <= '9':
				size = size<<4 | int64(c-'0')
			case c >= 'a' && c <= 'f':
				size = size<<4 | int64(c-'a'+10)
			case c >= 'A' && c <= 'F':
				size = size<<4 | int64(c-'A'+10)
			default:
				break hex
			}
		}
		if size == 0 { // the last chunk, then trailers until an empty line
			for {
				line, err := r.br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(line) <= 2 {
					return nil
				}
			}
		}
		if err := r.readN(a, size, keep); err != nil {
			return err
		}
		if line, err = r.br.ReadSlice('\n'); err != nil || len(line) > 2 {
			return fmt.Errorf("chunk not followed by CRLF: %q %v", line, err)
		}
	}
}

func parseDec(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty number")
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad number %q", b)
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

// rawPost is a whole POST request with a JSON body.
func rawPost(host, path, bearer, body string) []byte {
	return []byte("POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + bearer +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}
