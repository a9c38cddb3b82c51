package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// Every request refused before an engine is accounted: with a known key, a
// record (rejected, or client_gone for a client that left the queue) and
// the denial metric; without one, the metric only.
func TestRefusalsAreAccounted(t *testing.T) {
	release := make(chan struct{})
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		<-release
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	})
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		p := &o.Config.Pools[0]
		p.Engine, _ = engine.For("gateway", "")
		p.Capacity, p.QueueSize, p.QueueTimeout = 1, 10, 300*time.Millisecond
	})
	defer close(release)

	revoked, rk := addKey(t, e.keys)
	if err := e.keys.RevokeKey(t.Context(), rk.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	ghost, gk := addKey(t, e.keys)
	gk.Team = "lab-ghost"                                     // a team the tree does not have (removed in Slurm): disabled
	if err := e.keys.CreateKey(t.Context(), gk); err != nil { // replaces the key
		t.Fatal(err)
	}

	type refusal struct {
		name, key, body string
		status          int
		keyID           string
		model           string
	}
	send := func(rf refusal) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(rf.body))
		req.Header.Set("Authorization", "Bearer "+rf.key)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != rf.status {
			t.Fatalf("%s: status %d, want %d", rf.name, resp.StatusCode, rf.status)
		}
		return resp.Header.Get("X-Request-Id")
	}
	ids := map[string]refusal{}
	for _, rf := range []refusal{
		{"revoked key", revoked, chatBody, 401, rk.ID, ""},
		{"revoked key again (miss cache)", revoked, chatBody, 401, rk.ID, ""},
		{"disabled team", ghost, chatBody, 403, gk.ID, ""},
		{"bad body", e.key, `{"model":`, 400, "", ""},
		{"unknown model", e.key, `{"model":"nope","messages":[]}`, 404, "", ""},
		{"bad key", gatewaytest.BadClientKey(1), chatBody, 401, "-", ""},
		{"no key", "", chatBody, 401, "-", ""},
	} {
		ids[send(rf)] = rf
	}

	// the pool's one slot is taken; the next request times out in the
	// queue, the one after leaves while queued
	held := make(chan struct{})
	go func() {
		defer close(held)
		resp := e.post(t, "/v1/chat/completions", chatBody)
		resp.Body.Close()
	}()
	gatewaytest.WaitFor(t, func() bool { return len(up.requests()) == 1 })
	ids[send(refusal{"queue timeout", e.key, chatBody, 503, "", "m"})] = refusal{name: "queue timeout", status: 503, model: "m"}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Authorization", "Bearer "+e.key)
	go func() {
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	if _, err := e.srv.Client().Do(req); err == nil {
		t.Fatal("cancelled request answered")
	}

	// 6 refusals with a known key + the client that left
	recs := e.recs.wait(t, 7)
	gatewaytest.WaitFor(t, func() bool { return strings.Contains(e.metricsText(t), `llmflow_denied_total{reason="client_gone"} 1`) })
	var gone int
	for _, r := range recs {
		if r.Outcome == llmflow.OutcomeClientGone {
			gone++
			if r.Status != statusClientGone || r.KeyID == "" || r.Team != "lab-nlp" || r.Model != "m" || r.PromptTokens != 0 {
				t.Errorf("client gone from the queue: %+v", r)
			}
			continue
		}
		rf, ok := ids[r.RequestID]
		if !ok {
			t.Errorf("unexpected record %+v", r)
			continue
		}
		if rf.keyID == "-" {
			t.Errorf("%s left a record: %+v", rf.name, r)
		}
		if rf.keyID == "" {
			rf.keyID = e.keyID(t)
		}
		if r.Outcome != llmflow.OutcomeRejected || r.Status != rf.status || r.KeyID != rf.keyID || r.Team == "" ||
			r.Model != rf.model || r.PromptTokens+r.CompletionTokens != 0 || r.GPUHours != 0 {
			t.Errorf("%s: record %+v", rf.name, r)
		}
		delete(ids, r.RequestID)
	}
	if gone != 1 {
		t.Errorf("%d client_gone records, want 1", gone)
	}
	for _, rf := range ids {
		if rf.keyID != "-" {
			t.Errorf("%s left no record", rf.name)
		}
	}
	text := e.metricsText(t)
	for _, m := range []string{
		`llmflow_denied_total{reason="auth"} 4`, // 2 revoked, 1 bad, 1 missing
		`llmflow_denied_total{reason="disabled"} 1`,
		`llmflow_denied_total{reason="bad_request"} 1`,
		`llmflow_denied_total{reason="unknown_model"} 1`,
		`llmflow_denied_total{reason="queue"} 1`,
		`llmflow_denied_total{reason="client_gone"} 1`,
	} {
		if !strings.Contains(text, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
	release <- struct{}{}
	<-held
}

// keyID is the id of the env's client key.
func (e *testEnv) keyID(t testing.TB) string {
	t.Helper()
	k, err := e.keys.KeyByHash(t.Context(), llmflow.HashKey(e.key))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}
