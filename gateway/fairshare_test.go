package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// heldUpstream answers every request only when release is closed, and
// records the priority each one carried.
type heldUpstream struct {
	*recordingUpstream
	release chan struct{}
	mu      sync.Mutex
	arrived int
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	h := &heldUpstream{release: make(chan struct{})}
	h.recordingUpstream = newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		h.mu.Lock()
		h.arrived++
		h.mu.Unlock()
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `{"usage":{"prompt_tokens":1000,"completion_tokens":1000}}`)
	})
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	return h
}

func (h *heldUpstream) waitArrived(t *testing.T, n int) {
	t.Helper()
	gatewaytest.WaitFor(t, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.arrived >= n })
}

func priorities(reqs []recorded) []int {
	var out []int
	for _, r := range reqs {
		p, _ := strconv.Atoi(r.header.Get("X-Vllm-Priority"))
		out = append(out, p)
	}
	return out
}

// With capacity 4, etabA (0.75) holds 3 and etabB (0.25) 1: A's first
// three requests are within (0), the next ones borrow B's idle slot (10+),
// and B's request, when it comes, is within (0) again. (The pool leaves
// the engine to order them: reclaim = "none".)
func TestFairSharePrioritiesReachTheEngine(t *testing.T) {
	up := newHeldUpstream(t)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.Pools[0].Capacity = 4
		o.Config.Pools[0].Reclaim, o.Config.Pools[0].Headroom = engine.ReclaimNone, 0
	})
	keyA, keyB := e.key, e.newKey(t, "lab-chem")
	var wg sync.WaitGroup
	sent := 0
	send := func(key string, n int) {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := e.srv.Client().Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			sent++
			up.waitArrived(t, sent) // one at a time: the order of arrival is the order of admission
		}
	}
	send(keyA, 5)
	got := priorities(up.requests())
	for i, want := range []int{0, 0, 0} {
		if got[i] != want {
			t.Fatalf("A's requests got priorities %v: want the first three within (0)", got)
		}
	}
	for _, p := range got[3:] {
		if p < 10 {
			t.Fatalf("A's requests got priorities %v: want borrowers (≥ 10) beyond its reservation of 3", got)
		}
	}
	send(keyB, 1)
	if p := priorities(up.requests())[5]; p != 0 {
		t.Fatalf("B's request got priority %d: want 0, B is within its reservation", p)
	}
	rep := e.gw.FairshareReport()
	byName := map[string]AccountShare{}
	for _, a := range rep.Pools[0].Accounts {
		byName[a.Account] = a
	}
	if a := byName["etabA"]; a.Reserved != 3 || a.InFlight != 5 || a.Borrowing != 2 {
		t.Errorf("etabA %+v: want reserved 3, in flight 5, borrowing 2", a)
	}
	if b := byName["etabB"]; b.Reserved != 1 || b.InFlight != 1 || b.Borrowing != 0 {
		t.Errorf("etabB %+v: want reserved 1, in flight 1, borrowing 0", b)
	}
	close(up.release)
	wg.Wait()
	recs := e.recs.wait(t, 6)
	for _, r := range recs {
		if r.Priority != 0 && r.Priority < 10 {
			t.Errorf("record priority %d", r.Priority)
		}
	}
	if rep := e.gw.FairshareReport(); rep.Pools[0].InFlight != 0 {
		t.Errorf("%d still in flight after every request ended", rep.Pools[0].InFlight)
	}
}

func TestSetAccountsWhileServing(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	keyB := e.newKey(t, "lab-chem")
	accts := e.cfg.Accounts()
	for i := range accts {
		switch accts[i].Name {
		case "lab-chem":
			accts[i].Disabled = true
		case "etabA":
			accts[i].Shares = 0.5
		}
	}
	e.gw.SetAccounts(accts)
	e.key = keyB
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	var body errorBody
	gatewaytest.DecodeJSON(t, resp, &body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body.Error.Message, "disabled") {
		t.Fatalf("key of a disabled team: %d %+v, want 403", resp.StatusCode, body)
	}
	for _, a := range e.gw.FairshareReport().Pools[0].Accounts {
		if a.Account == "etabA" && a.Reserved != 8 {
			t.Errorf("etabA reserved %d after its share became 0.5 of 16, want 8", a.Reserved)
		}
		if a.Account == "lab-chem" {
			t.Error("a disabled team still has a reservation")
		}
	}
}

// TestMetricsFollowReparent moves a team to another organisation while
// serving (a Slurm sync): its next requests count under the new
// organisation's label, not the one cached for the old.
func TestMetricsFollowReparent(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	send := func() {
		t.Helper()
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	send() // lab-nlp under etabA
	accts := e.cfg.Accounts()
	for i := range accts {
		if accts[i].Name == "lab-nlp" {
			accts[i].Parent = "etabB"
		}
	}
	e.gw.SetAccounts(accts)
	send()
	resp, err := e.srv.Client().Get(e.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`llmflow_requests_total{code="200",model="m",org="etabA",pool="p",team="lab-nlp"} 1`,
		`llmflow_requests_total{code="200",model="m",org="etabB",pool="p",team="lab-nlp"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// memUsage is a ShareUsageStore in memory.
type memUsage struct {
	mu    sync.Mutex
	saved map[string][]llmflow.ShareUsage
	at    map[string]time.Time
}

func (m *memUsage) SaveShareUsage(_ context.Context, pool string, at time.Time, u []llmflow.ShareUsage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saved[pool], m.at[pool] = u, at
	return nil
}

func (m *memUsage) ShareUsage(_ context.Context, pool string) ([]llmflow.ShareUsage, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saved[pool], m.at[pool], nil
}

func TestUsageSurvivesRestartDecayed(t *testing.T) {
	up := newRecordingUpstream(t, nil) // 10 prompt + 5 completion tokens per request
	store := &memUsage{saved: map[string][]llmflow.ShareUsage{}, at: map[string]time.Time{}}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.ShareUsage = store; o.Now = clock })
	for range 4 {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
	}
	usage := func(g *Gateway, name string) float64 {
		for _, a := range g.FairshareReport().Pools[0].Accounts {
			if a.Account == name {
				return a.RawUsage
			}
		}
		return -1
	}
	before := usage(e.gw, "etabA")
	if want := 4 * 60.0 / 1e6; before < want*0.999 || before > want*1.001 { // 4 × (10×1 + 5×10) / 1e6
		t.Fatalf("etabA usage %g GPU-hours, want %g", before, want)
	}
	if err := e.gw.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(store.saved["p"]) == 0 {
		t.Fatal("nothing saved at Close")
	}
	// one half-life (the default 168h) later, a new gateway
	now = now.Add(168 * time.Hour)
	e2 := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.ShareUsage = store; o.Now = clock })
	after := usage(e2.gw, "etabA")
	if after < before/2*0.999 || after > before/2*1.001 {
		t.Errorf("usage after one half-life of downtime %g, want half of %g", after, before)
	}
}

func TestGatewayQueuePool(t *testing.T) {
	up := newHeldUpstream(t)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.Pools[0].Capacity = 1
		o.Config.Pools[0].Engine, _ = engine.For("gateway", "")
		o.Config.Pools[0].QueueTimeout = 100 * time.Millisecond
	})
	done := make(chan int, 1)
	go func() {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	up.waitArrived(t, 1)
	// the pool is full: the next one waits in the gateway, then times out
	start := time.Now()
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("queued past the timeout: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("answered after %s: it did not wait the queue timeout", el)
	}
	if len(up.requests()) != 1 {
		t.Errorf("%d requests reached the engine, want 1 (capacity)", len(up.requests()))
	}
	if h := up.requests()[0].header; h.Get("X-Vllm-Priority") != "" || strings.Contains(string(up.requests()[0].body), "priority") {
		t.Error("a priority was sent to an engine behind a gateway-side queue")
	}
	close(up.release)
	if code := <-done; code != 200 {
		t.Errorf("first request: %d", code)
	}
}

func TestAdminFairshareAndMetrics(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	rep := e.gw.FairshareReport() // GET /admin/fairshare (package admin)
	if len(rep.Pools) != 1 || rep.Pools[0].Capacity != 16 || rep.Pools[0].Accounts[0].Account != "root" {
		t.Fatalf("report %+v", rep)
	}
	names := []string{}
	for _, a := range rep.Pools[0].Accounts {
		names = append(names, strings.Repeat(" ", a.Depth)+a.Account)
	}
	if got := strings.Join(names, ","); got != "root, etabA,  lab-nlp, etabB,  lab-chem" {
		t.Errorf("tree order %q", got)
	}
	mresp, _ := e.srv.Client().Get(e.srv.URL + "/metrics")
	b, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`llmflow_reserved{org="etabA",pool="p"} 12`,
		`llmflow_reserved{org="etabB",pool="p"} 4`,
		`llmflow_inflight{org="etabA",pool="p"} 0`,
		`llmflow_inflight_borrowing{org="etabB",pool="p"} 0`,
		`llmflow_borrowed_fraction{org="etabA",pool="p"} 0`,
		`llmflow_fairshare_usage{org="etabA",pool="p"} 0`,
		`llmflow_fairshare_level{org="etabA",pool="p"} +Inf`,
		`llmflow_queue_length{pool="p"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// the JSON survives a round trip (inf and null included)
	raw, _ := json.Marshal(rep)
	var back FairshareReport
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("report round trip: %v\n%s", err, raw)
	}
}
