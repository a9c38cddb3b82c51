package gateway

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/spool"
	"github.com/go-llmflow/llmflow/store"
)

// lockSQLite holds the write lock of the SQLite file at path from another
// connection (another process would do the same) until the returned func
// is called.
func lockSQLite(t *testing.T, path string) (unlock func()) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	done := false
	unlock = func() {
		if !done {
			done = true
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
			db.Close()
		}
	}
	t.Cleanup(unlock)
	return unlock
}

// TestRecordsNowhereRefused: a real SQLite store locked by another
// process and a spool that refuses records (full): every record of a
// request served would be dropped, so with store.fail_closed (the
// default) requests are refused with 503 and Retry-After, and /healthz
// says why; once the store takes records again they are served.
// fail_closed = false serves on (the administrator's choice). Before,
// every request was answered 200 and its record dropped.
func TestRecordsNowhereRefused(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	for _, closed := range []bool{true, false} {
		t.Run(fmt.Sprint("fail_closed=", closed), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "llmflow.db")
			db, err := store.OpenSQLite(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			sp, _, err := spool.Open(t.TempDir(), spool.Options{MaxBytes: 1}) // full at once
			if err != nil {
				t.Fatal(err)
			}
			q := accounting.New(db, accounting.Options{FlushInterval: 5 * time.Millisecond, BatchSize: 1, Spool: sp,
				WriteTimeout: 100 * time.Millisecond})
			t.Cleanup(func() { q.Close(context.Background()) })
			extra := fmt.Sprintf("store {\n path = \"x.db\"\n fail_closed = %v\n}\n", closed)
			e := newEnv(t, []string{up.srv.URL}, extra, func(o *Options) { o.Recorder, o.Pinger = q, db })
			unlock := lockSQLite(t, path)
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			post := func() *http.Response {
				resp := e.post(t, "/v1/chat/completions", body)
				resp.Body.Close()
				return resp
			}
			atRisk := func() bool { h := q.Health(); return h.StoreError != "" && h.SpoolError != "" }
			// the first records find the spool full and the store locked
			deadline := time.Now().Add(10 * time.Second)
			for !atRisk() {
				if time.Now().After(deadline) {
					t.Fatalf("the queue never saw the store and the spool refuse: %+v", q.Health())
				}
				post()
				time.Sleep(10 * time.Millisecond)
			}
			_, dropped0 := q.Health().InMemory, q.Health().Dropped
			for range 5 {
				resp := post()
				switch {
				case closed && (resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == ""):
					t.Fatalf("records kept nowhere, fail_closed: %d Retry-After %q, want 503 with", resp.StatusCode, resp.Header.Get("Retry-After"))
				case !closed && resp.StatusCode != http.StatusOK:
					t.Fatalf("records kept nowhere, fail_closed = false: %d, want 200", resp.StatusCode)
				}
			}
			code, hb := e.do(t, http.MethodGet, "/healthz", e.master, "")
			if closed && (code != http.StatusServiceUnavailable || !strings.Contains(hb, `"spool":"refusing"`) || !strings.Contains(hb, `"store_writes":"failing"`)) {
				t.Errorf("healthz: %d %s, want 503 saying the spool refuses and store writes fail", code, hb)
			}
			if closed {
				if d := q.Health().Dropped; d != dropped0 {
					t.Errorf("%d records dropped while requests were refused", d-dropped0)
				}
				if n := metricValue(e.metricsText(t), `llmflow_denied_total{reason="accounting"}`); n < 5 {
					t.Errorf(`llmflow_denied_total{reason="accounting"} = %v, want at least 5`, n)
				}
			}
			unlock()
			waitUntil(t, func() bool { return !atRisk() })
			if resp := post(); resp.StatusCode != http.StatusOK {
				t.Fatalf("store back: %d", resp.StatusCode)
			}
		})
	}
}

// TestLockedSQLiteWithSpoolDegraded: a real SQLite locked by another
// process, the records absorbed by the spool: requests are served and
// /healthz says degraded with 200 (before: 503 unavailable, the store's
// ping waiting behind the blocked record writes, while every request
// succeeded).
func TestLockedSQLiteWithSpoolDegraded(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	path := filepath.Join(t.TempDir(), "llmflow.db")
	db, err := store.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sp, _, err := spool.Open(t.TempDir(), spool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := accounting.New(db, accounting.Options{FlushInterval: 5 * time.Millisecond, BatchSize: 1, Spool: sp})
	t.Cleanup(func() { q.Close(context.Background()) })
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Recorder, o.Pinger = q, db })
	lockSQLite(t, path)
	for range 3 {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	// the record writer waits for the lock on the store's one write
	// connection: its ping waits behind it
	waitUntil(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		return db.Ping(ctx) != nil
	})
	code, body := e.do(t, http.MethodGet, "/healthz", "", "")
	if code != http.StatusOK || strings.TrimSpace(body) != `{"status":"degraded"}` {
		t.Fatalf("locked store, records in the spool: %d %s, want 200 degraded", code, body)
	}
}
