package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow/alerts"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/store"
)

// TestStartAlerts: serve's dispatcher delivers what is enqueued into the
// outbox it returns, once, and stops with serve.
func TestStartAlerts(t *testing.T) {
	var got atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer webhook-token" {
			got.Add(1)
		}
	}))
	defer hook.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("webhook-token\n"), 0o600)
	cfg, err := config.Parse(filepath.Join(dir, "gw.hcl"), []byte(`alerts {
  webhook_url        = "`+hook.URL+`/hook"
  webhook_token_file = "token"
}
`))
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.OpenSQLite(t.Context(), filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg := prometheus.NewRegistry()
	outbox, stop, err := startAlerts(t.Context(), cfg, db, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	a := alerts.Alert{ID: alerts.SoftLimitID("1", now.Truncate(24*time.Hour)), BudgetID: "1", ScopeKind: "org", ScopeName: "etaba",
		Period: "day", PeriodStart: now.Truncate(24 * time.Hour), Limit: 10, Soft: 8, Spent: 8.5, At: now}
	for range 2 {
		if err := outbox.Enqueue(t.Context(), a); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; got.Load() == 0 && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if n := got.Load(); n != 1 {
		t.Fatalf("webhook got %d alerts, want 1", n)
	}

	// without an alerts block: no dispatcher, a nil outbox that drops
	none, stop, err := startAlerts(t.Context(), &config.Config{}, db, reg, slog.New(slog.DiscardHandler))
	if err != nil || none != nil {
		t.Fatalf("no alerts block: %v, %v", none, err)
	}
	stop()
	if err := none.Enqueue(t.Context(), a); err != nil {
		t.Fatal(err)
	}
}

// TestSoftLimitAlertArrives: a budget crossing its soft limit in a real
// serve (SQLite, vllmsim) reaches the webhook once, however many requests
// follow in the period; the alert names the budget and its period.
func TestSoftLimitAlertArrives(t *testing.T) {
	var got atomic.Int32
	var body atomic.Value
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Authorization") == "Bearer hook-token" {
			got.Add(1)
			body.Store(string(b))
		}
	}))
	defer hook.Close()
	e := startE2EWith(t, `
alerts {
  webhook_url        = "`+hook.URL+`/hook"
  webhook_token_file = "hook.token"
}
`, func(dir string) { os.WriteFile(filepath.Join(dir, "hook.token"), []byte("hook-token\n"), 0o600) })
	master, _ := os.ReadFile(filepath.Join(e.dir, "master.key"))
	req, _ := http.NewRequest(http.MethodPut, e.base+"/admin/budgets",
		strings.NewReader(`{"kind":"team","name":"lab-nlp","period":"day","max_cost":10,"soft_limit":1e-9}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(master)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT /admin/budgets: %d", resp.StatusCode)
	}
	for i := range 5 {
		if code := e2ePost(t, e, `{"model":"sim-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	for i := 0; got.Load() == 0 && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for a duplicate to arrive
	if n := got.Load(); n != 1 {
		t.Fatalf("webhook got %d alerts, want 1", n)
	}
	b, _ := body.Load().(string)
	for _, want := range []string{`"budget_id":"team/lab-nlp/"`, `"scope_kind":"team"`, `"scope_name":"lab-nlp"`, `"period":"day"`} {
		if !strings.Contains(b, want) {
			t.Errorf("alert %s lacks %s", b, want)
		}
	}
}
