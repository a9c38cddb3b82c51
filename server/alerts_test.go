package server

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
