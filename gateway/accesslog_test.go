package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// logLines returns the JSON log lines written so far with the given msg.
func logLines(t *testing.T, s *syncBuffer, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestAccessLog: every request, served or refused, has one access log line
// at the default level, with who, what, where, how it ended and what it
// cost, and without the prompt or any secret; warnings about a request
// carry its id.
func TestAccessLog(t *testing.T) {
	var buf syncBuffer
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL, "http://127.0.0.1:1"}, "", func(o *Options) {
		o.Log = slog.New(slog.NewJSONHandler(&buf, nil)) // info: the default level
	})
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"secret prompt"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	e.key = "sk-wrong-key"
	resp = e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()

	lines := logLines(t, &buf, "request")
	if len(lines) != 2 {
		t.Fatalf("%d access log lines, want 2: %v", len(lines), lines)
	}
	l := lines[0]
	for k, want := range map[string]any{
		"level": "INFO", "request_id": id, "org": "etabA", "team": "lab-nlp", "model": "m",
		"status": float64(200), "outcome": "ok", "prompt_tokens": float64(10), "completion_tokens": float64(5),
	} {
		if l[k] != want {
			t.Errorf("access log %s = %v, want %v (%v)", k, l[k], want, l)
		}
	}
	for i, l := range lines { // the test client's loopback address, without its port
		if l["client"] != "127.0.0.1" {
			t.Errorf("access log line %d: client = %v, want 127.0.0.1", i, l["client"])
		}
	}
	for _, k := range []string{"key_id", "upstream", "gpu_hours", "latency", "ttfb"} {
		if _, ok := l[k]; !ok {
			t.Errorf("access log lacks %s: %v", k, l)
		}
	}
	if l["denied"] != nil {
		t.Errorf("served request with a denial reason: %v", l)
	}
	if r := lines[1]; r["status"] != float64(http.StatusUnauthorized) || r["outcome"] != "rejected" || r["denied"] != "auth" {
		t.Errorf("refused request's line: %v", r)
	}
	all := buf.String()
	for _, secret := range []string{"secret prompt", "sk-wrong-key", gatewaytest.MasterKey, gatewaytest.UpstreamKey} {
		if strings.Contains(all, secret) {
			t.Errorf("the log shows %q:\n%s", secret, all)
		}
	}
	for _, w := range logLines(t, &buf, "upstream unreachable") {
		if w["request_id"] == nil || w["request_id"] == "" {
			t.Errorf("warning without request id: %v", w)
		}
	}
}

// TestMetricsExistFromTheStart: series that alerts rely on are exported at
// zero before any traffic; no Slurm sync series without a slurm block.
func TestMetricsExistFromTheStart(t *testing.T) {
	e := newEnv(t, []string{"http://127.0.0.1:1"}, "")
	text := e.metricsText(t)
	for _, want := range []string{
		`llmflow_denied_total{reason="no_upstream"} 0`,
		`llmflow_denied_total{reason="auth"} 0`,
		`llmflow_denied_total{reason="admin_auth"} 0`,
		`llmflow_connections_refused_total{reason="max_connections"} 0`,
		`llmflow_usage_estimated_total{model="m",pool="p"} 0`,
		`llmflow_upstream_retries_total{pool="p",upstream="u0"} 0`,
		`llmflow_upstream_healthy{pool="p",upstream="u0"} 1`,
		`llmflow_accounting_written_total 0`,
		`llmflow_accounting_failed_total 0`,
		`llmflow_preemptions_total{pool="p"} 0`,
		`llmflow_resumed_total{pool="p"} 0`,
		`llmflow_recomputed_tokens_total{pool="p"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, "llmflow_slurm_sync") {
		t.Error("Slurm sync series without a slurm block")
	}
}

// BenchmarkAccessLog: the cost of one access log line, with a JSON handler
// writing to io.Discard (what serve --log-format json does, minus the
// disk) and with the level disabled.
//
//	go test -run '^$' -bench AccessLog -benchmem ./gateway
func BenchmarkAccessLog(b *testing.B) {
	rec := &llmflow.Record{RequestID: "abc123", KeyID: "key_0123456789", Org: "etabA", Team: "lab-nlp", Project: "p1",
		Model: "m", Upstream: "u0", Status: 200, Outcome: llmflow.OutcomeOK, PromptTokens: 412, CompletionTokens: 57,
		GPUHours: 1.2e-5, Latency: 850 * time.Millisecond, TTFB: 40 * time.Millisecond}
	for name, h := range map[string]slog.Handler{
		"json": slog.NewJSONHandler(io.Discard, nil),
		"text": slog.NewTextHandler(io.Discard, nil),
		"off":  slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}),
	} {
		b.Run(name, func(b *testing.B) {
			g := &Gateway{log: slog.New(h)}
			b.ReportAllocs()
			for b.Loop() {
				g.accessLog(rec, "192.0.2.7:51234", "")
			}
		})
	}
}
