package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// TestTrustedProxyCountsClients: behind a trusted proxy (one address
// carrying everyone, as the README's nginx or a chat front end), the
// connection cap per network does not count the proxy's connections: 6
// clients with a request in flight each, over 6 connections from the
// proxy, are all served with max_connections_per_network = 4 (before: 2
// refused). The cap applies to each forwarded client instead: a fifth
// request at once from one client is refused with 503 and Retry-After,
// counted, and logged; a client that is not behind a trusted proxy is
// capped on its connections as before, whatever X-Forwarded-For it sends.
func TestTrustedProxyCountsClients(t *testing.T) {
	release := make(chan struct{})
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	logs := &syncBuffer{}
	e := newEnv(t, []string{up.srv.URL}, "limits {\n max_connections_per_network = 4\n trusted_proxies = [\"127.0.0.9\", \"10.9.0.0/16\"]\n}",
		func(o *Options) { o.Log = slog.New(slog.NewTextHandler(logs, nil)) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.gw}
	go srv.Serve(e.gw.LimitListener(ln))
	t.Cleanup(func() { srv.Close() })
	client := func(from string) *http.Client { // one connection per request
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	}
	send := func(from, xff string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+e.key)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := client(from).Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			return -1
		}
		return resp.StatusCode
	}
	type result struct{ who, status int }
	results := make(chan result, 64)
	var wg sync.WaitGroup
	// 6 clients through the proxy (one of them through a second trusted
	// proxy too), one request each, in flight together (with the others
	// below, 14: within the pool's capacity of 16)
	for i := range 6 {
		xff := fmt.Sprintf("192.0.2.%d", i+1)
		if i == 0 {
			xff += ", 10.9.0.1" // client, then an inner trusted proxy
		}
		wg.Go(func() { results <- result{i, send("127.0.0.9", xff)} })
	}
	waitUntil(t, func() bool { return len(up.requests()) == 6 })
	// one client with 5 at once: the fifth is refused
	for range 5 {
		wg.Go(func() { results <- result{100, send("127.0.0.9", "203.0.113.7")} })
	}
	waitUntil(t, func() bool { return len(up.requests()) == 10 })
	// a client not behind a trusted proxy: its connections count, not the
	// header it sends
	for range 5 {
		wg.Go(func() { results <- result{200, send("127.0.0.5", "198.51.100.1")} })
	}
	waitUntil(t, func() bool { return len(up.requests()) == 14 })
	deadline := time.Now().Add(10 * time.Second)
	for len(results) < 2 { // the two refusals answered at once
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals", len(results))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(results)
	count := map[int]map[int]int{}
	for r := range results {
		if count[r.who] == nil {
			count[r.who] = map[int]int{}
		}
		count[r.who][r.status]++
	}
	for i := range 6 {
		if count[i][200] != 1 {
			t.Errorf("client %d behind the proxy: %v, want served", i, count[i])
		}
	}
	if c := count[100]; c[200] != 4 || c[503] != 1 {
		t.Errorf("one client with 5 requests through the proxy: %v, want 4 served and one 503 with Retry-After", c)
	}
	if c := count[200]; c[200] != 4 || c[503] != 1 {
		t.Errorf("a client of its own with 5 connections: %v, want 4 served and one 503", c)
	}
	if n := metricValue(e.metricsText(t), `llmflow_connections_refused_total{reason="max_connections_per_network"}`); n != 2 {
		t.Errorf("refusals counted: %v, want 2", n)
	}
	if l := logs.String(); !strings.Contains(l, "connection cap: refused") {
		t.Errorf("no refusal in the log: %s", l)
	}
}

// TestForwardedClient: the client of a trusted proxy's request is the
// last X-Forwarded-For address outside the trusted networks.
func TestForwardedClient(t *testing.T) {
	tp := trustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		xff  []string
		want string
	}{
		{nil, "10.0.0.1:5000"},
		{[]string{"192.0.2.1"}, "192.0.2.1"},
		{[]string{"198.51.100.9, 192.0.2.1"}, "192.0.2.1"},    // a client cannot choose: the proxy appended its peer
		{[]string{"192.0.2.1, 10.1.2.3"}, "192.0.2.1"},        // an inner trusted proxy
		{[]string{"192.0.2.1", "10.1.2.3, ::1"}, "192.0.2.1"}, // several headers
		{[]string{"10.4.4.4, 10.1.2.3"}, "10.4.4.4"},          // all trusted: the first
		{[]string{"junk, 2001:db8::7"}, "2001:db8::7"},
		{[]string{"junk"}, "10.0.0.1:5000"},
	} {
		r := &http.Request{RemoteAddr: "10.0.0.1:5000", Header: http.Header{}}
		if tc.xff != nil {
			r.Header["X-Forwarded-For"] = tc.xff
		}
		if got := tp.client(r); got != tc.want {
			t.Errorf("X-Forwarded-For %q: %q, want %q", tc.xff, got, tc.want)
		}
	}
	if !tp.contains("[::1]:80") || !tp.contains("10.9.9.9:1") || tp.contains("192.0.2.1:1") || tp.contains("junk") {
		t.Error("contains")
	}
}

// TestTrustedProxyAuthLimitPerClient: behind a trusted proxy the auth
// failure limit counts each forwarded client: one that keeps sending bad
// keys is throttled (429), another one through the same proxy is not
// (before: the proxy's address was throttled for everyone).
func TestTrustedProxyAuthLimitPerClient(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "limits {\n auth_failures_per_minute = 2\n trusted_proxies = [\"127.0.0.1\"]\n}")
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	status := func(key, client string) int {
		resp := gatewaytest.Post(t, e.srv, key, "/v1/chat/completions", body, "X-Forwarded-For", client)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	bad := "llmf-" + strings.Repeat("x", 40)
	for range 3 {
		status(bad, "192.0.2.1")
	}
	if s := status(bad, "192.0.2.1"); s != http.StatusTooManyRequests {
		t.Fatalf("a client sending bad keys: %d, want 429", s)
	}
	if s := status(e.key, "192.0.2.2"); s != http.StatusOK {
		t.Fatalf("another client through the same proxy: %d, want 200", s)
	}
}
