package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dialFrom opens a TCP connection to addr from the loopback address from
// (127.0.0.0/8 is all loopback on Linux: a different client network).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a GET /healthz on c and returns the response.
func roundTrip(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

func body(resp *http.Response) string { b, _ := io.ReadAll(resp.Body); return string(b) }

// Connections past a cap (per client network, then in all) get a raw 503
// with an OpenAI-shaped error and Connection: close, and are counted; a
// closed connection gives its place back.
func TestConnectionCaps(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "limits {\n max_connections = 3\n max_connections_per_network = 2\n}")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.gw}
	go srv.Serve(e.gw.LimitListener(ln))
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	refused := func(c net.Conn, want string) {
		t.Helper()
		resp := roundTrip(t, c)
		b := body(resp)
		if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close ||
			resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(b, `"type":"server_error"`) || !strings.Contains(b, want) {
			t.Fatalf("refused connection: %d close=%v %s", resp.StatusCode, resp.Close, b)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("refused connection still open: %d %v", n, err)
		}
	}
	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	for _, c := range []net.Conn{a1, a2} {
		if resp := roundTrip(t, c); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection within the caps: %d", resp.StatusCode)
		}
	}
	refused(dialFrom(t, "127.0.0.1", addr), "from your network")
	b1 := dialFrom(t, "127.0.0.2", addr) // another network: its own count
	if resp := roundTrip(t, b1); resp.StatusCode != http.StatusOK {
		t.Fatalf("another network: %d", resp.StatusCode)
	}
	refused(dialFrom(t, "127.0.0.3", addr), "too many open connections; retry later") // 3 open in all

	// a closed connection gives its place back (once the server sees it)
	a1.Close()
	var ok bool
	for range 100 {
		c := dialFrom(t, "127.0.0.1", addr)
		if resp := roundTrip(t, c); resp.StatusCode == http.StatusOK {
			ok = true
			break
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	if !ok {
		t.Fatal("a closed connection's place never came back")
	}
	// Both label values are exported at 0 from the start (metrics.go): the
	// counts, not the series, show the refusals were counted.
	text := e.metricsText(t)
	for _, tc := range []struct {
		series string
		min    float64
	}{
		{`llmflow_connections_refused_total{reason="max_connections_per_network"}`, 1}, // 1, and any retry above
		{`llmflow_connections_refused_total{reason="max_connections"}`, 1},
	} {
		if got := metricValue(text, tc.series); got < tc.min {
			t.Errorf("%s = %v, want at least %v", tc.series, got, tc.min)
		}
	}
}

// metricValue is the value of series (name and labels as exposed) in the
// exposition text, -1 when absent.
func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}
