package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// do sends method path with an Authorization: Bearer tok header (none when
// tok is "") and returns the status and body.
func (e *testEnv) do(t testing.TB, method, path, tok, body string) (int, string) {
	t.Helper()
	return gatewaytest.Do(t, e.srv, method, path, tok, body)
}

// metricsText is the gateway's /metrics exposition, read in process (not
// through the limited route).
func (e *testEnv) metricsText(t testing.TB) string {
	t.Helper()
	rec := httptest.NewRecorder()
	e.gw.metricsHandler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

const chatBody = `{"model":"m","messages":[]}`

// The /metrics token is throttled like any secret, in the operator bucket:
// failures are counted, and past the limit even the right token waits.
func TestMetricsTokenThrottled(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	clock := gatewaytest.NewClock()
	e := newEnv(t, []string{up.srv.URL}, "limits { auth_failures_per_minute = 3 }", func(o *Options) {
		o.Now = clock.Now
		o.Config.MetricsTokenFile = writeSecret(t, "metrics-token")
	})
	for i, tok := range []string{"", "wrong", e.key} {
		if code, _ := e.do(t, http.MethodGet, "/metrics", tok, ""); code != http.StatusUnauthorized {
			t.Fatalf("metrics with bad token %d: %d, want 401", i, code)
		}
	}
	if code, _ := e.do(t, http.MethodGet, "/metrics", "metrics-token", ""); code != http.StatusTooManyRequests {
		t.Fatalf("metrics token on a throttled network: %d, want 429", code)
	}
	// same bucket as the master key (the admin API's CheckMasterKey)
	if err := e.gw.CheckMasterKey(gatewaytest.AdminRequest("127.0.0.1:1", e.master), errOperatorAuth); llmflow.ErrorCode(err) != llmflow.ERATELIMIT {
		t.Fatalf("master key after metrics-token failures: %v, want 429", err)
	}
	clock.Add(21 * time.Second)
	code, body := e.do(t, http.MethodGet, "/metrics", "metrics-token", "")
	if code != http.StatusOK || !strings.Contains(body, `llmflow_denied_total{reason="admin_auth"} 3`) {
		t.Fatalf("metrics after refill: %d, failures not counted:\n%s", code, body)
	}
	// the master key is not the metrics token
	if code, _ := e.do(t, http.MethodGet, "/metrics", e.master, ""); code != http.StatusUnauthorized {
		t.Fatalf("master key on /metrics: %d, want 401", code)
	}
}

// The rule for a network throttled by other keys' failures: keys already
// in the valid-key cache are served; any other key, valid or not, is
// answered 429 before a store lookup until the network's bucket refills.
func TestThrottledNetworkServesCachedKeysOnly(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	clock := gatewaytest.NewClock()
	e := newEnv(t, []string{up.srv.URL}, "limits { auth_failures_per_minute = 5 }", func(o *Options) { o.Now = clock.Now })
	if code, _ := e.do(t, http.MethodPost, "/v1/chat/completions", e.key, chatBody); code != http.StatusOK {
		t.Fatalf("warm-up: %d", code)
	}
	uncached, _ := addKey(t, e.keys)
	for i := range 5 {
		if code, _ := e.do(t, http.MethodPost, "/v1/chat/completions", gatewaytest.BadClientKey(i), chatBody); code != http.StatusUnauthorized {
			t.Fatalf("bad key %d: %d", i, code)
		}
	}
	lookups := e.keys.Lookups.Load()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Authorization", "Bearer "+uncached)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("uncached valid key on a throttled network: %d (Retry-After %q), want 429 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := e.keys.Lookups.Load(); n != lookups {
		t.Fatalf("a throttled network reached the store (%d lookups)", n-lookups)
	}
	if code, body := e.do(t, http.MethodPost, "/v1/chat/completions", e.key, chatBody); code != http.StatusOK {
		t.Fatalf("cached key on a throttled network: %d %s", code, body)
	}
	// a stale cache entry is still a key that was valid: refreshed, served
	clock.Add(2 * time.Minute)
	for i := range 5 {
		e.do(t, http.MethodPost, "/v1/chat/completions", gatewaytest.BadClientKey(i+10), chatBody)
	}
	if code, body := e.do(t, http.MethodPost, "/v1/chat/completions", e.key, chatBody); code != http.StatusOK {
		t.Fatalf("stale cached key on a throttled network: %d %s", code, body)
	}
	// once the bucket refills, the new key goes to the store and is served
	clock.Add(13 * time.Second)
	if code, body := e.do(t, http.MethodPost, "/v1/chat/completions", uncached, chatBody); code != http.StatusOK {
		t.Fatalf("uncached key after refill: %d %s", code, body)
	}
}

// /healthz shows the status alone without an operator secret; the details
// need the metrics token or the master key.
func TestHealthzDetailsNeedAToken(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.MetricsTokenFile = writeSecret(t, "metrics-token")
	})
	for _, tc := range []struct {
		name, tok string
		details   bool
	}{
		{"no token", "", false},
		{"wrong token", "wrong", false},
		{"client key", e.key, false},
		{"metrics token", "metrics-token", true},
		{"master key", e.master, true},
	} {
		code, body := e.do(t, http.MethodGet, "/healthz", tc.tok, "")
		if code != http.StatusOK {
			t.Errorf("%s: status %d", tc.name, code)
		}
		switch {
		case !tc.details && strings.TrimSpace(body) != `{"status":"ok"}`:
			t.Errorf("%s: %s, want the status only", tc.name, body)
		case tc.details && (!strings.Contains(body, `"version":"dev"`) || !strings.Contains(body, `"upstreams":[{"pool":"p","name":"u0"`)):
			t.Errorf("%s: %s, want the details", tc.name, body)
		}
	}
	if !strings.Contains(e.metricsText(t), `llmflow_denied_total{reason="admin_auth"} 2`) {
		t.Error("wrong tokens on /healthz not counted as operator-secret failures")
	}
}

// /healthz is 503 when a model has no healthy upstream: "degraded" while
// another model is still served, "unavailable" when none is; the details
// say which model.
func TestHealthzModelWithoutHealthyUpstream(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	other := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, `model "other" {
  upstream_model = "sim/other"
  pool           = "p"
  key_file       = "vllm.key"
  upstream "v" { base_url = "`+other.srv.URL+`" }
}
`)
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Fatalf("all healthy: %d %s", code, body)
	}
	now := e.gw.now()
	for _, b := range e.gw.backends {
		if b.name == "u0" {
			b.markDown(now, time.Hour)
		}
	}
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusServiceUnavailable || strings.TrimSpace(body) != `{"status":"degraded"}` {
		t.Errorf("m down: %d %s, want 503 degraded", code, body)
	}
	code, body := e.do(t, http.MethodGet, "/healthz", e.master, "")
	if code != http.StatusServiceUnavailable ||
		!strings.Contains(body, `{"name":"m","status":"unavailable","healthy_upstreams":0,"upstreams":1}`) ||
		!strings.Contains(body, `{"name":"other","status":"ok","healthy_upstreams":1,"upstreams":1}`) {
		t.Errorf("details: %d %s", code, body)
	}
	for _, b := range e.gw.backends {
		b.markDown(now, time.Hour)
	}
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusServiceUnavailable || strings.TrimSpace(body) != `{"status":"unavailable"}` {
		t.Errorf("all down: %d %s, want 503 unavailable", code, body)
	}
}
