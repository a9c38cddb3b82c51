package gateway

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/admission"
)

// fakeShared is an admission.Source in memory whose health the test
// sets.
type fakeShared struct {
	*admission.MemSource
	mu sync.Mutex
	h  admission.Health
}

func (f *fakeShared) Health() *admission.Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.h
	return &h
}

func (f *fakeShared) set(h admission.Health) {
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
}

// /healthz says degraded while the shared state falls back (each replica
// on its slice; requests are still served), with the details for the
// master key only; ok again when it is back.
func TestHealthzSharedFallback(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	sh := &fakeShared{MemSource: admission.NewMemSource(), h: admission.Health{Status: "ok", Replicas: 3}}
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Admissions = sh })
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Fatalf("shared ok: %d %s", code, body)
	}
	since := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	sh.set(admission.Health{Status: "fallback", Replicas: 3, Since: &since, Error: "redis admit: dial tcp 127.0.0.1:6379: connect: connection refused"})
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"degraded"}` {
		t.Errorf("fallback without the master key: %d %s, want 200 degraded and no details", code, body)
	}
	_, body := e.do(t, http.MethodGet, "/healthz", e.master, "")
	for _, want := range []string{`"status":"degraded"`, `"shared":{"status":"fallback","replicas":3,"fallback_since":"2026-12-01T06:00:00Z","error":"redis admit:`} {
		if !strings.Contains(body, want) {
			t.Errorf("details lack %s: %s", want, body)
		}
	}
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a request during the fallback: %d", resp.StatusCode)
	}
	sh.set(admission.Health{Status: "ok", Replicas: 2})
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Errorf("shared back: %d %s", code, body)
	}
}
