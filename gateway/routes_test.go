package gateway

import (
	"github.com/go-llmflow/llmflow/internal/h1"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

func TestClientErrors(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "limits {\n max_body_bytes = 1024\n auth_failures_per_minute = 0\n}\n")
	for _, tc := range []struct {
		name, path, body, auth string
		status                 int
		typ, param             string
	}{
		{"no key", "/v1/chat/completions", `{"model":"m"}`, "-", 401, "authentication_error", ""},
		{"bad key", "/v1/chat/completions", `{"model":"m"}`, "llmf-" + strings.Repeat("a", 64), 401, "authentication_error", ""},
		{"not json", "/v1/chat/completions", `{"model":`, "", 400, "invalid_request_error", ""},
		{"array", "/v1/chat/completions", `[1]`, "", 400, "invalid_request_error", ""},
		{"no model", "/v1/chat/completions", `{"messages":[]}`, "", 400, "invalid_request_error", "model"},
		{"model not string", "/v1/chat/completions", `{"model":1}`, "", 400, "invalid_request_error", "model"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9"}`, "", 404, "invalid_request_error", "model"},
		{"stream not bool", "/v1/completions", `{"model":"m","stream":"yes"}`, "", 400, "invalid_request_error", "stream"},
		{"stream_options without stream", "/v1/chat/completions", `{"model":"m","stream_options":{"include_usage":true}}`, "", 400, "invalid_request_error", "stream_options"},
		{"streamed embeddings", "/v1/embeddings", `{"model":"m","input":"x","stream":true}`, "", 400, "invalid_request_error", "stream"},
		{"too large", "/v1/chat/completions", `{"model":"m","messages":"` + strings.Repeat("x", 2000) + `"}`, "", 413, "invalid_request_error", ""},
		{"responses without model", "/v1/responses", `{}`, "", 400, "invalid_request_error", "model"},
		{"no route", "/v1/responses/resp_1/cancel", `{}`, "", 404, "invalid_request_error", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.requests())
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+tc.path, strings.NewReader(tc.body))
			switch tc.auth {
			case "":
				req.Header.Set("Authorization", "Bearer "+e.key)
			case "-":
			default:
				req.Header.Set("Authorization", "Bearer "+tc.auth)
			}
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body errorBody
			gatewaytest.DecodeJSON(t, resp, &body)
			if resp.StatusCode != tc.status || body.Error.Type != tc.typ || body.Error.Message == "" {
				t.Errorf("got %d %+v, want %d %s", resp.StatusCode, body.Error, tc.status, tc.typ)
			}
			if got := ""; body.Error.Param != nil {
				got = *body.Error.Param
				if got != tc.param {
					t.Errorf("param %q, want %q", got, tc.param)
				}
			} else if tc.param != "" {
				t.Errorf("param null, want %q", tc.param)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if len(up.requests()) != before {
				t.Error("a refused request reached the upstream")
			}
		})
	}
	t.Run("method", func(t *testing.T) {
		resp, _ := e.srv.Client().Get(e.srv.URL + "/v1/chat/completions")
		resp.Body.Close()
		if resp.StatusCode != 405 {
			t.Errorf("GET chat: %d", resp.StatusCode)
		}
	})
}

func TestModelsAndHealthz(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, _ := e.srv.Client().Do(req)
	var models struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}
	gatewaytest.DecodeJSON(t, resp, &models)
	if models.Object != "list" || len(models.Data) != 2 || models.Data[0].ID != "m" || models.Data[1].ID != "batchm" {
		t.Errorf("models %+v", models)
	}
	resp, _ = e.srv.Client().Get(e.srv.URL + "/v1/models")
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("models without key: %d", resp.StatusCode)
	}
	resp, _ = e.srv.Client().Get(e.srv.URL + "/healthz")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"status":"ok"`) {
		t.Errorf("healthz %d %s", resp.StatusCode, b)
	}
}

func TestMetricsToken(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.MetricsTokenFile = writeSecret(t, "metrics-token")
	})
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	e.recs.wait(t, 1)
	resp, _ = e.srv.Client().Get(e.srv.URL + "/metrics")
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("metrics without token: %d", resp.StatusCode)
	}
	scrape := func() string {
		req, _ := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer metrics-token")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	// the store has the record (recs.wait) a moment before the queue
	// counts it as written
	text := scrape()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(text, "llmflow_accounting_written_total 1\n") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		text = scrape()
	}
	for _, want := range []string{
		`llmflow_requests_total{code="200",model="m",org="etabA",pool="p",team="lab-nlp"} 1`,
		`llmflow_tokens_total{kind="prompt",model="m",org="etabA",pool="p",team="lab-nlp"} 10`,
		`llmflow_gpu_hours_total{model="m",org="etabA",pool="p",team="lab-nlp"}`,
		`llmflow_upstream_healthy{pool="p",upstream="u0"} 1`,
		`llmflow_upstream_inflight{pool="p",upstream="u0"} 0`,
		`llmflow_accounting_written_total 1`,
		`llmflow_accounting_dropped_total 0`,
		`llmflow_accounting_queue_length 0`,
		`llmflow_overhead_seconds_count 1`,
		`llmflow_upstream_seconds_count{pool="p"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, e.key) || strings.Contains(text, e.key[5:15]) {
		t.Error("metrics contain a key")
	}
}

func TestRetryBeforeFirstByteAndPassiveMarking(t *testing.T) {
	// a dead upstream: a listener closed at once
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{dead, up.srv.URL}, "health {\n interval = \"1h\"\n cooldown = \"1h\"\n}\n")
	for range 4 {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: the dead upstream was not retried on the live one", resp.StatusCode)
		}
	}
	// The first start of Start() was not called: health is passive only.
	// The dead upstream is out of rotation after its first failure.
	var b *backend
	for _, x := range e.gw.backends {
		if x.base == dead {
			b = x
		}
	}
	if b.up(time.Now()) {
		t.Error("dead upstream still in rotation")
	}
}

func TestRetriesZeroDisables(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{dead, up.srv.URL}, "limits {\n retries = 0\n}\n", func(o *Options) {})
	// force the dead one first: it is first with equal in-flight only half
	// of the time, so send until a failure shows
	failures := 0
	for range 6 {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadGateway {
			failures++
		}
	}
	if failures != 1 {
		t.Errorf("%d failures, want exactly 1 (no retry, then the dead upstream is marked down)", failures)
	}
}

func TestNoHealthyUpstream(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	e := newEnv(t, []string{dead}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("first: %d, want 502", resp.StatusCode)
	}
	resp = e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestActiveHealthChecks(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(false)
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if !healthy.Load() {
				w.WriteHeader(503)
			}
			return
		}
		io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	e := newEnv(t, []string{up.srv.URL}, "health {\n interval = \"20ms\"\n timeout = \"1s\"\n cooldown = \"1h\"\n}\n")
	e.gw.Start(t.Context())
	gatewaytest.WaitFor(t, func() bool { return !e.gw.backends[0].up(time.Now()) })
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("unhealthy upstream: %d, want 503", resp.StatusCode)
	}
	healthy.Store(true)
	gatewaytest.WaitFor(t, func() bool { return e.gw.backends[0].up(time.Now()) })
	resp = e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("recovered upstream: %d", resp.StatusCode)
	}
}

func TestUpstreamErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		want     int
		contains string
		hidden   string
	}{
		{"bad request passes its message", 400, `{"error":{"message":"maximum context length is 4096","type":"BadRequestError","code":400}}`, 400, "maximum context length", ""},
		{"server error hides internals", 500, `{"error":{"message":"CUDA out of memory at /opt/secret/path"}}`, 502, "upstream failed", "/opt/secret"},
		{"auth failure is ours", 401, `{"error":"Unauthorized"}`, 502, "upstream failed", "Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			e := newEnv(t, []string{up.srv.URL}, "")
			resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.contains) || (tc.hidden != "" && strings.Contains(string(b), tc.hidden)) {
				t.Errorf("%d %s", resp.StatusCode, b)
			}
		})
	}
}

func TestResponseSizeCapped(t *testing.T) {
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"x":"`+strings.Repeat("a", 4096)+`"}`)
	})
	e := newEnv(t, []string{up.srv.URL}, "limits {\n max_response_bytes = 1024\n}\n")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("oversized answer: %d, want 502", resp.StatusCode)
	}
}

func TestRetryOnUnavailableAnswer(t *testing.T) {
	busy := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	ok := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{busy.srv.URL, ok.srv.URL}, "")
	for range 4 {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: a 503 was not retried on the other upstream", resp.StatusCode)
		}
	}
	if len(busy.requests()) == 0 {
		t.Fatal("the busy upstream was never tried")
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
	resp, _ := e.srv.Client().Do(req)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `llmflow_upstream_retries_total{pool="p",upstream="u1"}`) {
		t.Errorf("no retry counted:\n%s", b)
	}
}

func TestTransportIgnoresEnvironmentProxies(t *testing.T) {
	fast := newTransport(16, config.Limits{ConnectTimeout: time.Second}).(*h1.Transport)
	if fast.MaxIdlePerHost < 16 {
		t.Errorf("idle pool %d smaller than the pool's capacity", fast.MaxIdlePerHost)
	}
	tr := fast.Fallback.(*http.Transport) // https engines
	if std := newTransport(16, config.Limits{ConnectTimeout: time.Second, HTTPStack: config.HTTPStackNetHTTP}).(*http.Transport); std.Proxy != nil {
		t.Fatal("the net/http stack's transport consults a proxy")
	}
	if tr.Proxy != nil {
		t.Fatal("the upstream transport consults a proxy")
	}
	if tr.MaxIdleConnsPerHost < 16 {
		t.Errorf("idle pool %d smaller than the pool's capacity", tr.MaxIdleConnsPerHost)
	}
	if !tr.DisableCompression {
		t.Error("compression on: usage could not be read from compressed answers")
	}
}
