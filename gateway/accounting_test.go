package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// stuckRecords is a store whose writes hang until their context ends, or
// fail at once when fail is set.
type stuckRecords struct {
	fail    bool
	started chan struct{}
}

func (s *stuckRecords) WriteRecords(ctx context.Context, _ []llmflow.Record) error {
	if s.fail {
		return errors.New("disk full")
	}
	select {
	case s.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// The gateway's accounting queue reports failed batches to the metrics
// (OnWrite, set at construction), and Close bounded by a context cancels
// a hung store write and says how many records were not written.
func TestGateway_Accounting(t *testing.T) {
	t.Run("ErrWriteCounted", func(t *testing.T) {
		up := newRecordingUpstream(t, nil)
		e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Records = &stuckRecords{fail: true} })
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		gatewaytest.WaitFor(t, func() bool { _, failed, _ := e.gw.Recorder().Counts(); return failed == 1 })
		req, _ := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "llmflow_accounting_failed_total 1\n") {
			t.Errorf("metrics do not count the failed record:\n%s", b)
		}
	})
	t.Run("CloseCancelsHungWrite", func(t *testing.T) {
		up := newRecordingUpstream(t, nil)
		st := &stuckRecords{started: make(chan struct{}, 1)}
		e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Records = st })
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		<-st.started // flush_interval is 10ms
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := e.gw.Close(ctx)
		var nw *accounting.NotWrittenError
		if !errors.As(err, &nw) || nw.Records != 1 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: %v, want 1 record not written, deadline exceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close took %v with a 50ms context", d)
		}
	})
}

// clampingRecords says it clamped 7 records, as a store would.
type clampingRecords struct{}

func (clampingRecords) WriteRecords(context.Context, []llmflow.Record) error { return nil }

func (clampingRecords) ClampedRecords() int64 { return 7 }

// Options.ClampCounter has its count exported; without it the metric is
// absent, even when Records could count (no capability is discovered).
func TestGateway_ClampedMetric(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	metrics := func(e *testEnv) string {
		resp, err := e.srv.Client().Get(e.srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Records, o.ClampCounter = clampingRecords{}, clampingRecords{} })
	if b := metrics(e); !strings.Contains(b, "llmflow_accounting_clamped_total 7\n") {
		t.Errorf("metrics lack llmflow_accounting_clamped_total 7:\n%s", b)
	}
	e = newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Records = clampingRecords{} })
	if b := metrics(e); strings.Contains(b, "llmflow_accounting_clamped_total") {
		t.Error("llmflow_accounting_clamped_total without Options.ClampCounter")
	}
}
