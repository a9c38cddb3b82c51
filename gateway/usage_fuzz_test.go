package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
)

// FuzzUsage feeds engine usage through the whole path: a real gateway in
// front of a fake engine that answers with the fuzzed usage object, in a
// non-streaming body and in a stream's usage chunk, accounting into a real
// SQLite store with its hourly rollups. Whatever the engine says, the
// client gets the engine's answer (200), each request leaves a record with
// no negative count, and the hour's rollups and spend can be read.
func FuzzUsage(f *testing.F) {
	for _, a := range usageAttacks {
		f.Add(a.usage)
	}
	for _, s := range []string{
		`{}`, `null`, `[]`, `"x"`, `{"prompt_tokens":null}`,
		`{"prompt_tokens":-9223372036854775808,"completion_tokens":9223372036854775807}`,
		`{"prompt_tokens":1e999999,"completion_tokens":-1e-999}`,
		`{"prompt_tokens":"Infinity","completion_tokens":"-NaN","prompt_tokens_details":{"cached_tokens":"1"}}`,
		`{"prompt_tokens":4294967297,"completion_tokens":4294967297,"prompt_tokens_details":{"cached_tokens":4294967297}}`,
		`{"prompt_tokens":3,"prompt_tokens":-3}`,
		`{"completion_tokens":7}`,
		`{"prompt_tokens":1`,
	} {
		f.Add(s)
	}

	var usage atomic.Pointer[string]
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := *usage.Load()
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, hostileBody(u))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range hostileStream(u) {
			io.WriteString(w, ev)
		}
	}))
	f.Cleanup(engine.Close)
	db, err := store.OpenSQLite(f.Context(), filepath.Join(f.TempDir(), "fuzz.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	// Cleanups run last in first out: the gateway (and its queue) closes
	// before the store.
	e := newEnv(f, []string{engine.URL}, "", func(o *Options) { o.Records = db })

	f.Fuzz(func(t *testing.T, u string) {
		usage.Store(&u)
		var ids []string
		for _, req := range []string{
			`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hello there"}],"stream":true,"stream_options":{"include_usage":true}}`,
		} {
			resp := e.post(t, "/v1/chat/completions", req)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: client got %d (err %v), want 200: %q", req, resp.StatusCode, err, got)
			}
			if !strings.Contains(req, "stream") && string(got) != hostileBody(u) {
				t.Fatalf("client got %q, want the engine's answer %q", got, hostileBody(u))
			}
			ids = append(ids, resp.Header.Get("X-Request-Id"))
		}

		now := time.Now()
		from, to := now.Add(-2*time.Hour).Truncate(time.Hour), now.Add(2*time.Hour)
		recs := waitRecords(t, db, from, to, ids)
		for _, r := range recs {
			if r.PromptTokens < 0 || r.CompletionTokens < 0 || r.CachedTokens < 0 || !(r.GPUHours >= 0) {
				t.Errorf("usage %q: negative counts recorded: %+v", u, r)
			}
			if r.Estimated != (r.EstimateReason != "") {
				t.Errorf("usage %q: estimated %v with reason %q", u, r.Estimated, r.EstimateReason)
			}
		}
		for _, f := range []llmflow.RollupFilter{{}, {Total: true}} {
			rs, err := db.Rollups(t.Context(), from, to, f)
			if err != nil {
				t.Fatalf("usage %q: Rollups: %v", u, err)
			}
			for _, r := range rs {
				if r.PromptTokens < 0 || r.CompletionTokens < 0 || r.CachedTokens < 0 {
					t.Errorf("usage %q: negative rollup %+v", u, r)
				}
			}
		}
		if _, err := db.Spend(t.Context(), from, to, llmflow.RollupFilter{Total: true}); err != nil {
			t.Fatalf("usage %q: Spend: %v", u, err)
		}
	})
}

// waitRecords polls db until the records of ids are stored and returns
// them.
func waitRecords(t *testing.T, db *store.SQLite, from, to time.Time, ids []string) []llmflow.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs, err := db.Records(t.Context(), from, to)
		if err != nil {
			t.Fatalf("Records: %v", err)
		}
		var found []llmflow.Record
		for _, r := range rs {
			for _, id := range ids {
				if r.RequestID == id {
					found = append(found, r)
				}
			}
		}
		if len(found) == len(ids) {
			return found
		}
		if time.Now().After(deadline) {
			t.Fatalf("records %v not stored after 10s (found %d)", ids, len(found))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
