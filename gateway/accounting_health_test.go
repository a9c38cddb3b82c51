package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/spool"
)

// switchRecords fails while down is set, else keeps records in recs.
type switchRecords struct {
	down atomic.Bool
	recs *fakeRecords
}

func (s *switchRecords) WriteRecords(ctx context.Context, rs []llmflow.Record) error {
	if s.down.Load() {
		return errors.New("database is locked")
	}
	return s.recs.WriteRecords(ctx, rs)
}

// /healthz says degraded while store writes fail (the records wait in
// the spool), and the metrics say why; once the store is back the spool
// drains and the status is ok again. With fail_closed and the spool
// refusing records too, it is 503 unavailable.
func TestHealthzAccountingStoreFailing(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	w := &switchRecords{recs: newFakeRecords()}
	var q *accounting.Queue
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		sp, _, err := spool.Open(t.TempDir(), spool.Options{})
		if err != nil {
			t.Fatal(err)
		}
		q = accounting.New(w, accounting.Options{FlushInterval: 5 * time.Millisecond, BatchSize: 1, Spool: sp})
		o.Recorder = q
	})
	t.Cleanup(func() { q.Close(context.Background()) })
	w.down.Store(true)
	for range 3 {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	waitUntil(t, func() bool { return q.Health().StoreError != "" })
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"degraded"}` {
		t.Errorf("store failing: %d %s, want 200 degraded (records are safe in the spool)", code, body)
	}
	_, body := e.do(t, http.MethodGet, "/healthz", e.master, "")
	for _, want := range []string{`"store":"write_failing"`, `"store_writes":"failing"`, `"store_error":"database is locked"`, `"spool":"ok"`, `"spool_records":3`} {
		if !strings.Contains(body, want) {
			t.Errorf("details lack %s: %s", want, body)
		}
	}
	m := e.metricsText(t)
	for _, want := range []string{"llmflow_accounting_store_failing 1", "llmflow_accounting_spool_records 3"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	w.down.Store(false)
	waitUntil(t, func() bool { return q.Len() == 0 && q.Health().StoreError == "" })
	if code, body := e.do(t, http.MethodGet, "/healthz", "", ""); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Errorf("store back: %d %s", code, body)
	}
	if n := len(w.recs.wait(t, 3)); n != 3 {
		t.Errorf("%d records stored, want 3", n)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition not reached")
}
