package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// countingShared is a hand-written admission.Shared: it counts what the
// gateway admits and releases, and keeps the state in memory
// (admission.Mem) so the requests really run.
type countingShared struct {
	mem              admission.Shared
	admits, releases atomic.Int64
	refuse           atomic.Bool // refuse every admission as a budget would, taking nothing
}

func (c *countingShared) Admit(ctx context.Context, a *admission.Admission) error {
	if c.refuse.Load() {
		return &budgets.Refusal{Reason: "budget", Message: "no budget left (test)"}
	}
	if err := c.mem.Admit(ctx, a); err != nil {
		return err
	}
	c.admits.Add(1)
	return nil
}

func (c *countingShared) Release(ctx context.Context, a *admission.Admission, e admission.End) {
	c.releases.Add(1)
	c.mem.Release(ctx, a, e)
}

// countingSource hands out a countingShared per pool.
type countingSource struct {
	*admission.MemSource
	mu    sync.Mutex
	pools map[string]*countingShared
	ctrs  map[string]fairshare.Counters
}

func newCountingSource() *countingSource {
	return &countingSource{MemSource: admission.NewMemSource(), pools: map[string]*countingShared{}, ctrs: map[string]fairshare.Counters{}}
}

func (s *countingSource) Pool(name string, hl time.Duration, ledger *budgets.Mem) admission.Pool {
	p := s.MemSource.Pool(name, hl, ledger)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &countingShared{mem: p.Shared}
	s.pools[name], s.ctrs[name] = c, p.Counters
	p.Shared = c
	return p
}

// TestAdmissionReleasesEverything sends requests that end every way an
// admitted request can (answered, upstream error, unreachable upstream,
// client gone mid-answer) and requests refused by each step before the
// fair share: the counters see one release per admission and end at zero.
func TestAdmissionReleasesEverything(t *testing.T) {
	var fail atomic.Bool
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		switch {
		case fail.Load():
			w.WriteHeader(http.StatusInternalServerError)
		case strings.Contains(r.Header.Get("Accept"), "event-stream"):
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // never ends: the client leaves
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`)
		}
	})
	src := newCountingSource()
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Admissions = src })
	ctr := src.pools["p"]
	if ctr == nil {
		t.Fatal("the gateway did not take its shared state from Options.Admissions")
	}
	post := func(body string, hdr ...string) int {
		t.Helper()
		resp := e.post(t, "/v1/chat/completions", body, hdr...)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const ok = `{"model":"m","messages":[]}`
	for range 3 {
		if code := post(ok); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	fail.Store(true)
	if code := post(ok); code != http.StatusBadGateway {
		t.Fatalf("upstream error: status %d, want 502", code)
	}
	fail.Store(false)
	// refused before the fair share: no admission to release
	for _, c := range []struct {
		body string
		hdr  []string
		want int
	}{
		{ok, []string{"Authorization", "Bearer llmf-nope"}, http.StatusUnauthorized},
		{`{"model":`, nil, http.StatusBadRequest},
		{`{"model":"nope","messages":[]}`, nil, http.StatusNotFound},
	} {
		if code := post(c.body, c.hdr...); code != c.want {
			t.Fatalf("%s: status %d, want %d", c.body, code, c.want)
		}
	}
	// a stream whose client leaves
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	// an unreachable upstream
	up.srv.Close()
	if code := post(ok); code < 500 {
		t.Fatalf("unreachable upstream: status %d", code)
	}

	deadline := time.Now().Add(5 * time.Second)
	for ctr.releases.Load() < ctr.admits.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a, r := ctr.admits.Load(), ctr.releases.Load(); a != 6 || r != a {
		t.Errorf("admitted %d, released %d; want 6 and 6", a, r)
	}
	if in, b := src.ctrs["p"].PoolCounts(); in != 0 || b != 0 {
		t.Errorf("in flight %d, borrowing %d after every request ended", in, b)
	}
}

// TestAdmissionStepAdded: a step added after the shared admission (here
// one that refuses every request) is one more entry in the list: no other
// step changes, and what the shared step took is given back when the new
// step refuses, through the shared state's own Release.
func TestAdmissionStepAdded(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	src := newCountingSource()
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Admissions = src })
	var seen atomic.Int64
	e.gw.steps = append(e.gw.steps, step{name: "test", reason: "test", admit: func(_ context.Context, x *exchange) error {
		seen.Add(1)
		if !x.admitted || x.adm.Chain == nil {
			t.Error("the step after the shared admission runs before it")
		}
		return llmflow.Errorf(llmflow.EUNAVAILABLE, "refused by the added step")
	}})
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || seen.Load() != 1 {
		t.Fatalf("status %d, step ran %d times; want 503 from the added step", resp.StatusCode, seen.Load())
	}
	ctr := src.pools["p"]
	if a, r := ctr.admits.Load(), ctr.releases.Load(); a != 1 || r != 1 {
		t.Fatalf("shared: admitted %d, released %d; want 1 and 1", a, r)
	}
	if in, _ := src.ctrs["p"].PoolCounts(); in != 0 {
		t.Fatalf("%d left in flight", in)
	}
	if n := metricValue(e.metricsText(t), `llmflow_denied_total{reason="test"}`); n != 1 {
		t.Fatalf("llmflow_denied_total{reason=\"test\"} = %v, want 1", n)
	}
}

// TestAdmissionSharedRefusal: a refusal of the shared state (a budget, as
// Redis or Mem answer) is the budget's 429, counted by its own reason, and
// nothing is released that was not taken.
func TestAdmissionSharedRefusal(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	src := newCountingSource()
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Admissions = src })
	src.pools["p"].refuse.Store(true)
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	if r := src.pools["p"].releases.Load(); r != 0 {
		t.Fatalf("%d releases of a refused admission", r)
	}
	if n := metricValue(e.metricsText(t), `llmflow_denied_total{reason="budget"}`); n != 1 {
		t.Fatalf("llmflow_denied_total{reason=\"budget\"} = %v, want 1", n)
	}
}
