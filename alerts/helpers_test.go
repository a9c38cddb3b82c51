package alerts_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/alerts"
	"github.com/go-llmflow/llmflow/store"
)

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 14, 9, 30, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// backends opens handles on one fresh database of each store: every
// call of the returned function is a new handle (a restarted or second
// gateway). PostgreSQL needs LLMFLOW_TEST_PG_DSN (or LLMFLOW_SKIP_PG=1).
var backends = map[string]func(t testing.TB) func() alerts.Store{
	"SQLite": func(t testing.TB) func() alerts.Store {
		path := filepath.Join(t.TempDir(), "llmflow.db")
		return func() alerts.Store {
			s, err := store.OpenSQLite(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	},
	"PostgreSQL": func(t testing.TB) func() alerts.Store {
		dsn := pgSchema(t)
		return func() alerts.Store {
			s, err := store.OpenPostgres(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	},
}

// pgSchema creates a schema of its own, dropped at the end, and returns a
// DSN whose search_path is that schema.
func pgSchema(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("LLMFLOW_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("LLMFLOW_SKIP_PG") == "1" {
			t.Skip("LLMFLOW_SKIP_PG=1: PostgreSQL tests skipped")
		}
		t.Fatal("LLMFLOW_TEST_PG_DSN is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable), or set LLMFLOW_SKIP_PG=1")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to LLMFLOW_TEST_PG_DSN: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	name := "llmflow_alerts_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal("LLMFLOW_TEST_PG_DSN must be a postgres:// URL")
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// hook is a webhook receiver that fails its first fail requests with 500.
type hook struct {
	srv  *httptest.Server
	fail int

	mu       sync.Mutex
	requests int
	accepted []hookRequest
}

type hookRequest struct {
	header http.Header
	body   map[string]any
}

func startHook(t testing.TB, fail int) *hook {
	h := &hook{fail: fail}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.requests++
		if h.fail > 0 {
			h.fail--
			http.Error(w, "try later", http.StatusInternalServerError)
			return
		}
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		h.accepted = append(h.accepted, hookRequest{header: r.Header.Clone(), body: body})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) url(t testing.TB, path string) *url.URL {
	u, err := url.Parse(h.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (h *hook) snapshot() (int, []hookRequest) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests, append([]hookRequest(nil), h.accepted...)
}

// secretFile writes a 0600 file holding content.
func secretFile(t testing.TB, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testAlert is a soft-limit alert of a team budget; the team name is not
// ASCII so that the e-mail's encodings are exercised.
func testAlert(budget string, at time.Time) alerts.Alert {
	start := time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	return alerts.Alert{
		ID:       alerts.SoftLimitID(budget, start),
		BudgetID: budget, ScopeKind: "team", ScopeName: "lab-chimie-é", Model: "llama-3.3-70b",
		Period: "month", PeriodStart: start, Limit: 500, Soft: 400, Spent: 400.25, At: at,
	}
}

// metricValues returns every sample of the alerts metrics as
// "name{channel}" → value.
func metricValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "llmflow_alerts_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ch string
			for _, l := range m.GetLabel() {
				if l.GetName() == "channel" {
					ch = l.GetValue()
				}
			}
			v := m.GetCounter().GetValue()
			if m.GetGauge() != nil {
				v = m.GetGauge().GetValue()
			}
			out[mf.GetName()+"{"+ch+"}"] = v
		}
	}
	return out
}

func pending(t *testing.T, s alerts.Store) int {
	t.Helper()
	ms, err := s.ListOutbox(context.Background(), llmflow.OutboxFilter{Undelivered: true})
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}
