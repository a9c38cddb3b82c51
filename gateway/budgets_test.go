package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/redisstate"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/vllmsim"
)

// budgetEnv is a gateway with a real SQLite store for keys, records and
// budgets, started (budgets loaded).
func budgetEnv(t testing.TB, upstreams []string, extra string, mod ...func(*Options)) (*testEnv, *store.SQLite) {
	t.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mods := append([]func(*Options){func(o *Options) { o.Keys, o.Records, o.Budgets = db, db, db }}, mod...)
	e := newEnv(t, upstreams, extra, mods...)
	e.db = db
	e.gw.Start(context.Background())
	return e, db
}

// simUpstream is a vllmsim engine on a real loopback server.
func simUpstream(t testing.TB, step time.Duration) (*vllmsim.Server, *httptest.Server) {
	t.Helper()
	s := vllmsim.New(vllmsim.Config{APIKey: gatewaytest.UpstreamKey, StepInterval: step, Sched: vllmsim.SchedConfig{MaxNumSeqs: 512, KVBlocks: 1 << 16}})
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		s.Close()
		hs.Close()
	})
	return s, hs
}

// putBudget sets a budget as PUT /admin/budgets does (package admin): it
// stores it, puts the budgets in force again and returns its status.
func putBudget(t testing.TB, e *testEnv, body string) budgets.Status {
	t.Helper()
	var req struct {
		Kind      budgets.Kind   `json:"kind"`
		Name      string         `json:"name"`
		Model     string         `json:"model"`
		Period    budgets.Period `json:"period"`
		MaxCost   float64        `json:"max_cost"`
		SoftLimit float64        `json:"soft_limit"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	b := budgets.Budget{Scope: budgets.Scope{Kind: req.Kind, Name: req.Name, Model: req.Model}, Period: req.Period,
		MaxCost: req.MaxCost, SoftLimit: req.SoftLimit, Source: budgets.SourceAdmin, UpdatedAt: time.Now().UTC()}
	if err := e.db.PutBudget(t.Context(), b); err != nil {
		t.Fatalf("put budget %s: %v", body, err)
	}
	if err := e.gw.RefreshBudgets(t.Context()); err != nil {
		t.Fatal(err)
	}
	return budgetStatus(t, e, b.Scope)
}

// setKeyLimits sets a key's limits as PUT /admin/keys/{id}/limits does:
// stored, then forgotten by the key caches.
func (e *testEnv) setKeyLimits(t testing.TB, id string, rpm, tpm, maxInFlight int) {
	t.Helper()
	if err := e.db.SetKeyLimits(t.Context(), id, rpm, tpm, maxInFlight); err != nil {
		t.Fatal(err)
	}
	e.forgetKeyID(t, id)
}

// setKeyActive deactivates or reactivates a key as PUT
// /admin/keys/{id}/active does.
func (e *testEnv) setKeyActive(t testing.TB, id string, active bool) {
	t.Helper()
	if err := e.db.SetKeyDisabled(t.Context(), id, !active); err != nil {
		t.Fatal(err)
	}
	e.forgetKeyID(t, id)
}

func (e *testEnv) forgetKeyID(t testing.TB, id string) {
	t.Helper()
	k, err := e.db.KeyByID(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	e.gw.ForgetKey(k.Hash)
}

func budgetStatus(t testing.TB, e *testEnv, sc budgets.Scope) budgets.Status {
	t.Helper()
	for _, s := range e.gw.bud.mem.Table().Status() {
		if s.Scope == sc {
			return s
		}
	}
	t.Fatalf("no budget %v in force", sc)
	return budgets.Status{}
}

type chatAnswer struct {
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error struct {
		Message string `json:"message"`
	} `json:"error"`
}

// TestBudgetNeverOverspent sends 200 concurrent long requests through the
// gateway to vllmsim (real HTTP both ways, SQLite store) against a team
// budget with little left: the spend never exceeds the limit, requests
// the rest cannot fully pay for run with a lowered max_tokens (and say so
// in a header; the engine honours it), the others get a 429 naming the
// budget, and what is left at the end does not pay for one more request.
func TestBudgetNeverOverspent(t *testing.T) {
	sim, hs := simUpstream(t, 2*time.Millisecond)
	e, db := budgetEnv(t, []string{hs.URL}, "")
	team := budgets.Scope{Kind: budgets.KindTeam, Name: "lab-nlp"}
	// 0.96 GPU-hours already spent this month, of 1: 0.04 left, about
	// 60 requests of 60 output tokens at 10 GPU-hours per million.
	now := time.Now().UTC()
	if err := db.WriteRecords(t.Context(), []llmflow.Record{{RequestID: "earlier", Time: now, Org: "etabA", Team: "lab-nlp", GPUHours: 0.96, Status: 200, Outcome: llmflow.OutcomeOK}}); err != nil {
		t.Fatal(err)
	}
	v := putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"month","max_cost":1,"soft_limit":0.9}`)
	if v.Spent < 0.96 || v.Spent > 0.9601 || v.EffectiveLimit != 1 {
		t.Fatalf("budget after PUT: %+v", v)
	}
	const n = 200
	type result struct {
		status  int
		lowered int64 // header value, 0 when absent
		usage   chatAnswer
		msg     string
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	body := `{"model":"m","messages":[{"role":"user","content":"Tell me a long story about budgets."}],"max_tokens":60`
	for i := range n {
		wg.Go(func() {
			b := body + `}`
			if i%2 == 1 {
				b = body + `,"stream":true,"stream_options":{"include_usage":true}}`
			}
			resp := e.post(t, "/v1/chat/completions", b)
			defer resp.Body.Close()
			r := result{status: resp.StatusCode}
			if h := resp.Header.Get(outputHeader); h != "" {
				r.lowered, _ = strconv.ParseInt(h, 10, 64)
			}
			raw, _ := io.ReadAll(resp.Body)
			if i%2 == 1 && resp.StatusCode == 200 {
				for line := range strings.SplitSeq(string(raw), "\n") {
					if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"usage":{`) {
						json.Unmarshal([]byte(d), &r.usage)
					}
				}
			} else {
				json.Unmarshal(raw, &r.usage)
			}
			r.msg = r.usage.Error.Message
			results[i] = r
		})
	}
	wg.Wait()
	served, refused, lowered := 0, 0, 0
	for i, r := range results {
		switch r.status {
		case http.StatusOK:
			served++
			want := int64(60)
			if r.lowered > 0 {
				lowered++
				want = r.lowered
			}
			if r.usage.Usage.CompletionTokens != want {
				t.Errorf("request %d: %d completion tokens, want %d (lowered %d)", i, r.usage.Usage.CompletionTokens, want, r.lowered)
			}
		case http.StatusTooManyRequests:
			refused++
			if !strings.Contains(r.msg, `team "lab-nlp"`) {
				t.Errorf("request %d: 429 %q does not name the team budget", i, r.msg)
			}
		default:
			t.Errorf("request %d: status %d %q", i, r.status, r.msg)
		}
	}
	if served == 0 || refused == 0 || lowered == 0 {
		t.Fatalf("served %d, refused %d, lowered %d: want some of each", served, refused, lowered)
	}
	st := budgetStatus(t, e, team)
	if st.Held != 0 || st.Spent > 1 {
		t.Fatalf("after the burst: spent %v held %v, limit 1", st.Spent, st.Held)
	}
	// What is left pays for no more: sequential requests are served until
	// the first refusal, and what is left then is less than the prompt
	// and one token.
	for i := 0; ; i++ {
		resp := e.post(t, "/v1/chat/completions", body+`}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			break
		}
		if resp.StatusCode != http.StatusOK || i > 100 {
			t.Fatalf("sequential request %d: %d", i, resp.StatusCode)
		}
	}
	st = budgetStatus(t, e, team)
	minHold := float64(len(`[{"role":"user","content":"Tell me a long story about budgets."}]`)+chatTemplateTokens)*1/1e6 + 10/1e6
	if left := 1 - st.Spent; left >= minHold || st.Spent > 1 {
		t.Fatalf("spent %v: %v left pays for a request (%v)", st.Spent, left, minHold)
	}
	// The store agrees once the records are written.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.srv.Close()
	if err := e.gw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sp, err := db.BudgetSpend(t.Context(), team, budgets.Month.Start(now), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	total := sp.Older
	for _, gh := range sp.Hours {
		total += gh
	}
	if total > 1 {
		t.Fatalf("stored spend %v exceeds the limit 1", total)
	}
	t.Logf("served %d (lowered %d), refused %d; spent %.6f of 1 (stored %.6f); engine served %d", served, lowered, refused, st.Spent, total, sim.Stats().Served)
}

// TestNoLeak sends 10,000 requests (1,000 with -short) whose clients leave
// at random points (before the answer, mid-stream, after it) through the
// gateway to vllmsim, with budgets on every scope and limits on the key:
// at the end nothing is in flight and nothing is held.
func TestNoLeak(t *testing.T) {
	_, hs := simUpstream(t, time.Millisecond)
	e, db := budgetEnv(t, []string{hs.URL}, "")
	for _, b := range []string{
		`{"kind":"org","name":"etabA","period":"month","max_cost":1000}`,
		`{"kind":"team","name":"lab-nlp","period":"day","max_cost":1000}`,
		`{"kind":"team","name":"lab-nlp","model":"m","period":"week","max_cost":1000}`,
		`{"kind":"tag","name":"t1","period":"day","max_cost":1000}`,
	} {
		putBudget(t, e, b)
	}
	id := e.dbKeyID(t, db)
	e.setKeyLimits(t, id, 1000000, 100000000, 24)
	putBudget(t, e, `{"kind":"key","name":"`+id+`","period":"day","max_cost":1000}`)
	n := 10000
	if testing.Short() {
		n = 1000
	}
	var next atomic.Int64
	var ok, gone, limited atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				stream := rand.IntN(2) == 0
				body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi there"}],"max_tokens":%d,"stream":%v}`, 1+rand.IntN(12), stream)
				// a third read the whole answer, a third leave after a random
				// time (during admission, upstream, mid-stream), a third
				// close after the first bytes
				mode := rand.IntN(3)
				ctx, cancel := context.WithCancel(context.Background())
				if mode == 1 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(20000))*time.Microsecond)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+e.key)
				resp, err := client.Do(req)
				if err == nil {
					if resp.StatusCode == http.StatusTooManyRequests {
						limited.Add(1)
					}
					if mode == 2 {
						var b [8]byte
						resp.Body.Read(b[:])
						err = errors.New("left")
					} else {
						_, err = io.Copy(io.Discard, resp.Body)
					}
					resp.Body.Close()
				}
				if err != nil {
					gone.Add(1)
				} else {
					ok.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	e.srv.CloseClientConnections()
	e.srv.Close() // waits for every handler
	ks := e.gw.bud.mem.Key(id)
	if f := ks.InFlight(); f != 0 {
		t.Errorf("key in flight %d after all requests", f)
	}
	if h := e.gw.bud.mem.Table().Held(); h != 0 {
		t.Errorf("held %v GPU-hours after all requests", h)
	}
	for _, s := range e.gw.bud.mem.Table().Status() {
		if s.Held != 0 {
			t.Errorf("budget %v holds %v", s.Scope, s.Held)
		}
	}
	for _, b := range e.gw.backends {
		if f := b.inflight.Load(); f != 0 {
			t.Errorf("upstream %s in flight %d", b.name, f)
		}
	}
	t.Logf("%d requests: %d answered (%d limited), %d clients left early", n, ok.Load(), limited.Load(), gone.Load())
	if gone.Load() == 0 || ok.Load() == 0 {
		t.Fatalf("want both completed and abandoned requests")
	}
}

// dbKeyID returns the ID of the env's client key, kept in db.
func (e *testEnv) dbKeyID(t testing.TB, db *store.SQLite) string {
	t.Helper()
	k, err := db.KeyByHash(t.Context(), llmflow.HashKey(e.key))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// failingBudgets is a BudgetStore whose reads fail while fail is set.
type failingBudgets struct {
	BudgetStore
	fail atomic.Bool
}

func (f *failingBudgets) ListBudgets(ctx context.Context) ([]budgets.Budget, error) {
	if f.fail.Load() {
		return nil, errStoreDown
	}
	return f.BudgetStore.ListBudgets(ctx)
}

// TestBudgetFailClosed: after 3 failed refreshes requests get 503 and
// /healthz says why; one good refresh serves again. fail_closed = false
// serves throughout.
func TestBudgetFailClosed(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	for _, closed := range []bool{true, false} {
		t.Run(fmt.Sprint("fail_closed=", closed), func(t *testing.T) {
			fb := &failingBudgets{}
			extra := fmt.Sprintf("store {\n path = \"x.db\"\n fail_closed = %v\n}\n", closed)
			e, _ := budgetEnv(t, []string{up.srv.URL}, extra, func(o *Options) {
				fb.BudgetStore = o.Budgets
				o.Budgets = fb
			})
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			check := func(want int, health string) {
				t.Helper()
				resp := e.post(t, "/v1/chat/completions", body)
				var ans chatAnswer
				gatewaytest.DecodeJSON(t, resp, &ans)
				if resp.StatusCode != want {
					t.Fatalf("request: %d %q, want %d", resp.StatusCode, ans.Error.Message, want)
				}
				resp, _ = http.Get(e.srv.URL + "/healthz")
				var h struct{ Status, Budgets string }
				gatewaytest.DecodeJSON(t, resp, &h)
				if !strings.HasPrefix(h.Budgets, health) {
					t.Fatalf("healthz %d %+v, want budgets %q", resp.StatusCode, h, health)
				}
				if (want == 503) != (resp.StatusCode == 503) {
					t.Fatalf("healthz %d with request %d", resp.StatusCode, want)
				}
			}
			check(200, "")
			fb.fail.Store(true)
			for i := range staleAfter {
				if e.gw.refreshBudgets(t.Context()) == nil {
					t.Fatal("refresh succeeded")
				}
				if i < staleAfter-1 {
					check(200, "")
				}
			}
			if closed {
				check(503, "stale: the store could not be read for 3 refresh intervals")
				rec := httptest.NewRecorder()
				e.gw.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				for _, m := range []string{"llmflow_budget_stale 1", `llmflow_budget_refusals_total{reason="budget_stale"} 1`,
					`llmflow_budget_refreshes_total{outcome="failed"} 3`, `llmflow_denied_total{reason="budget_stale"} 1`} {
					if !strings.Contains(rec.Body.String(), m+"\n") {
						t.Errorf("metrics lack %q", m)
					}
				}
			} else {
				check(200, "")
			}
			if !e.gw.bud.stale.Load() {
				t.Fatal("not stale")
			}
			fb.fail.Store(false)
			if err := e.gw.refreshBudgets(t.Context()); err != nil {
				t.Fatal(err)
			}
			check(200, "")
		})
	}
}

// TestKeyLimitsThroughHTTP: RPM and TPM give 429 with Retry-After,
// max_inflight holds with requests blocked upstream; limits set on an
// existing key (and its deactivation and reactivation) apply at its next
// request (package admin's routes do this over HTTP).
func TestKeyLimitsThroughHTTP(t *testing.T) {
	release := make(chan struct{})
	var blocking atomic.Bool
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if blocking.Load() && r.URL.Path != "/health" {
			<-release
		}
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	})
	e, db := budgetEnv(t, []string{up.srv.URL}, "")
	id := e.dbKeyID(t, db)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	setLimits := func(rpm, tpm, maxInFlight int) { e.setKeyLimits(t, id, rpm, tpm, maxInFlight) }
	status := func() (int, string) {
		resp := e.post(t, "/v1/chat/completions", body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	setLimits(2, 0, 0)
	for i := range 2 {
		if s, _ := status(); s != 200 {
			t.Fatalf("request %d: %d", i, s)
		}
	}
	if s, ra := status(); s != 429 || ra == "" {
		t.Fatalf("third request in a minute: %d Retry-After %q", s, ra)
	}
	// tokens: the window holds 2 × 15 tokens
	setLimits(0, 32, 0)
	if s, ra := status(); s != 429 || ra == "" {
		t.Fatalf("over tpm: %d Retry-After %q", s, ra)
	}
	setLimits(0, 0, 2)
	blocking.Store(true)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { status() })
	}
	for e.gw.bud.mem.Key(id).InFlight() < 2 {
		time.Sleep(time.Millisecond)
	}
	if s, _ := status(); s != 429 {
		t.Fatalf("third in flight: %d", s)
	}
	close(release)
	wg.Wait()
	if s, _ := status(); s != 200 {
		t.Fatalf("after the two: %d", s)
	}
	// deactivate, reactivate
	for _, tc := range []struct {
		active bool
		want   int
	}{{false, 403}, {true, 200}} {
		e.setKeyActive(t, id, tc.active)
		if s, _ := status(); s != tc.want {
			t.Fatalf("active %v: request %d, want %d", tc.active, s, tc.want)
		}
	}
}

// TestBudgetAdminAndTags: the tag header is allow-listed, at most 8, and a
// tag budget refuses with a 429 naming the tag; an increase serves again,
// setting the budget again keeps it, a deletion takes the budget out (the
// admin routes' own checks: package admin).
func TestBudgetAdminAndTags(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e, db := budgetEnv(t, []string{up.srv.URL}, `tags {
  header  = "X-LLMflow-Tags"
  allowed = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
}
`)
	// A tag budget of zero: requests tagged "b" are refused, naming it.
	putBudget(t, e, `{"kind":"tag","name":"b","period":"day","max_cost":0}`)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		tags   string
		status int
		msg    string
	}{
		{"", 200, ""},
		{"a, c", 200, ""},
		{"a,b", 429, `tag "b"`},
		{"zz", 400, `tag "zz" is not allowed`},
		{"a,b,c,d,e,f,g,h,i", 400, "at most 8 tags"},
	} {
		var hdr []string
		if tc.tags != "" {
			hdr = []string{"X-LLMflow-Tags", tc.tags}
		}
		resp := e.post(t, "/v1/chat/completions", body, hdr...)
		var ans chatAnswer
		gatewaytest.DecodeJSON(t, resp, &ans)
		if resp.StatusCode != tc.status || !strings.Contains(ans.Error.Message, tc.msg) {
			t.Errorf("tags %q: %d %q, want %d %q", tc.tags, resp.StatusCode, ans.Error.Message, tc.status, tc.msg)
		}
	}
	// Increase: a zero budget raised by 1 serves again; listing shows it.
	tagB := budgets.Scope{Kind: budgets.KindTag, Name: "b"}
	if _, err := db.AddIncrease(t.Context(), budgets.Increase{Scope: tagB, Amount: 1, ExpiresAt: time.Now().Add(time.Hour).UTC(), CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := e.gw.RefreshBudgets(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v := budgetStatus(t, e, tagB); v.EffectiveLimit != 1 || v.Increase != 1 {
		t.Fatalf("increase: %+v", v)
	}
	resp := e.post(t, "/v1/chat/completions", body, "X-LLMflow-Tags", "b")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the increase: %d", resp.StatusCode)
	}
	// Setting the budget again keeps the increase.
	if v := putBudget(t, e, `{"kind":"tag","name":"b","period":"day","max_cost":0.5}`); v.EffectiveLimit != 1.5 {
		t.Fatalf("set again: %+v", v)
	}
	if st := e.gw.bud.mem.Table().Status(); len(st) != 1 || st[0].Spent <= 0 || st[0].Name != "b" {
		t.Fatalf("in force: %+v", st)
	}
	if err := db.DeleteBudget(t.Context(), tagB); err != nil {
		t.Fatal(err)
	}
	if err := e.gw.RefreshBudgets(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := e.gw.bud.mem.Table().Len(); n != 0 {
		t.Fatalf("delete: %d in force", n)
	}
}

// TestBudgetStepAllocs: the budget and limit step, and the shared
// admission that reserves its request with the fair share (in memory),
// allocate nothing once a key's chain is cached (budgets on every scope,
// limits on the key).
func TestBudgetStepAllocs(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e, db := budgetEnv(t, []string{up.srv.URL}, "")
	id := e.dbKeyID(t, db)
	for _, b := range []string{
		`{"kind":"org","name":"etabA","period":"month","max_cost":1000}`,
		`{"kind":"team","name":"lab-nlp","period":"day","max_cost":1000}`,
		`{"kind":"team","name":"lab-nlp","model":"m","period":"week","max_cost":1000}`,
		`{"kind":"key","name":"` + id + `","period":"day","max_cost":1000}`,
	} {
		putBudget(t, e, b)
	}
	ck, err := e.gw.auth.authenticate(t.Context(), "Bearer "+e.key, "127.0.0.1:1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ck.key.RPM, ck.key.TPM, ck.key.MaxInFlight = 1e9, 1e9, 1000
	rq, err := parseRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	x := &exchange{key: &ck.key, ck: ck, org: "etabA", rt: e.gw.routes["m"], rq: rq, start: time.Now()}
	step := func() {
		if err := e.gw.admitBudget(t.Context(), x); err != nil {
			t.Fatal(err)
		}
		if err := e.gw.admitShared(t.Context(), x); err != nil {
			t.Fatal(err)
		}
		x.rec.GPUHours = 1e-6
		e.gw.releaseShared(x)
	}
	step()
	if len(x.bud.req.Slots) != 4 {
		t.Fatalf("%d slots, want org, team, team for m, key", len(x.bud.req.Slots))
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Errorf("%v allocations per request in the budget step", n)
	}
}

// fakeAlerts records soft-limit crossings.
type fakeAlerts struct {
	mu  sync.Mutex
	got []budgets.Crossing
	ch  chan struct{}
}

func (f *fakeAlerts) SoftLimitCrossed(_ context.Context, c budgets.Crossing) {
	f.mu.Lock()
	f.got = append(f.got, c)
	f.mu.Unlock()
	f.ch <- struct{}{}
}

// TestSoftLimitCrossedOnce: Options.Alerts hears of a budget crossing its
// soft limit once in the period, with the figures of the crossing.
func TestSoftLimitCrossedOnce(t *testing.T) {
	up := newRecordingUpstream(t, nil) // 10 prompt + 5 completion tokens: 6e-5 GPU-hours
	al := &fakeAlerts{ch: make(chan struct{}, 16)}
	e, _ := budgetEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Alerts = al })
	putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"day","max_cost":1,"soft_limit":0.0001}`)
	for range 5 {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		resp.Body.Close()
	}
	<-al.ch
	if err := e.gw.refreshBudgets(t.Context()); err != nil { // a refresh does not alert again
		t.Fatal(err)
	}
	e.srv.Close()
	al.mu.Lock()
	defer al.mu.Unlock()
	if len(al.got) != 1 {
		t.Fatalf("%d crossings, want 1: %+v", len(al.got), al.got)
	}
	c := al.got[0]
	day := budgets.Day.Start(time.Now())
	if c.BudgetID != "team/lab-nlp/" || c.Kind != budgets.KindTeam || c.Period != budgets.Day || !c.PeriodStart.Equal(day) ||
		c.SoftLimit != 0.0001 || c.Limit != 1 || c.Spent < 0.0001 || c.Spent > 0.00013 || c.At.IsZero() {
		t.Fatalf("crossing %+v", c)
	}
}

// TestBudgetOutputLimitUpstream: under a budget, the engine always gets an
// output limit the hold covers: the model's max_output_tokens when the
// client gives none, the lowered one in the client's own field, and the
// client's own limit untouched when the budget pays for it.
func TestBudgetOutputLimitUpstream(t *testing.T) { testBudgetOutputLimitUpstream(t) }

// TestBudgetOutputLimitUpstreamRedis is the same with the ledger and the
// fair-share counters in Redis (redisstate.Shared), where the reservation
// is taken with the fair-share admission (one round trip): the same
// limits, headers and refusals.
func TestBudgetOutputLimitUpstreamRedis(t *testing.T) {
	e := testBudgetOutputLimitUpstream(t, sharedRedis(t))
	// what is left pays for nothing more: a budget refusal, counted as one
	putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"day","max_cost":0}`)
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("over budget: %d x-should-retry %q, want 429 with false (nothing held: only the period's end helps)", resp.StatusCode, resp.Header.Get("X-Should-Retry"))
	}
	if n := metricValue(e.metricsText(t), `llmflow_denied_total{reason="budget"}`); n != 1 {
		t.Fatalf("llmflow_denied_total{reason=\"budget\"} = %v, want 1", n)
	}
}

// sharedRedis puts the ledger and the pools' counters in the real Redis,
// under a prefix of the test's own.
func sharedRedis(t *testing.T) func(*Options) {
	if os.Getenv("LLMFLOW_SKIP_REDIS") == "1" {
		t.Skip("LLMFLOW_SKIP_REDIS=1")
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis at 127.0.0.1:6379: %v (LLMFLOW_SKIP_REDIS=1 skips)", err)
	}
	prefix := fmt.Sprintf("llmflow-gwtest:%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
		rdb.Close()
	})
	sh := redisstate.NewShared(rdb, redisstate.SharedOptions{Prefix: prefix})
	t.Cleanup(sh.Close) // before the client closes (cleanups run last first)
	return func(o *Options) { o.Admissions = sh }
}

func testBudgetOutputLimitUpstream(t *testing.T, mod ...func(*Options)) *testEnv {
	up := newRecordingUpstream(t, nil)
	e, _ := budgetEnv(t, []string{up.srv.URL}, "", mod...)
	// 1 GPU-hour per million prompt tokens, 10 per million output tokens:
	// a 0.001 budget pays for at most 93 output tokens after the prompt
	// hold (32 bytes and a chat template's 32 tokens), fewer as the
	// requests before spend it.
	putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"day","max_cost":0.001}`)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body, field string
		want        float64 // 0: the client's field untouched
		header      bool
	}{
		{`{"model":"m",` + msgs + `,"max_tokens":10}`, "max_tokens", 10, false},
		{`{"model":"m",` + msgs + `,"max_tokens":500}`, "max_tokens", 93, true},
		{`{"model":"m",` + msgs + `,"max_tokens":500,"max_completion_tokens":400}`, "max_completion_tokens", 93, true},
		{`{"model":"m",` + msgs + `}`, "max_tokens", 93, true},
	} {
		resp := e.post(t, "/v1/chat/completions", tc.body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || (resp.Header.Get(outputHeader) != "") != tc.header {
			t.Fatalf("%s: %d header %q", tc.body, resp.StatusCode, resp.Header.Get(outputHeader))
		}
		got := up.requests()
		var sent map[string]any
		json.Unmarshal(got[len(got)-1].body, &sent)
		v, _ := sent[tc.field].(float64)
		if tc.header {
			h, _ := strconv.ParseFloat(resp.Header.Get(outputHeader), 64)
			if v != h || v < tc.want-20 || v > tc.want {
				t.Errorf("%s: upstream %s = %v, header %v, want at most %v (what is left pays for)", tc.body, tc.field, v, h, tc.want)
			}
		} else if v != tc.want {
			t.Errorf("%s: upstream %s = %v, want %v", tc.body, tc.field, v, tc.want)
		}
		if tc.field == "max_completion_tokens" && sent["max_tokens"] != nil {
			t.Errorf("%s: both fields sent upstream: %v", tc.body, sent)
		}
	}
	// A limit the gateway cannot bound the engine by is a 400 under a
	// budget (the engine might read 10.0 as 10, or not at all).
	for _, bad := range []string{`"max_tokens":10.0`, `"max_tokens":0`, `"max_completion_tokens":"5"`, `"max_tokens":-1`, `"max_tokens":1e3`, `"n":0`, `"best_of":1.5`} {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m",`+msgs+`,`+bad+`}`)
		var eb errorBody
		gatewaytest.DecodeJSON(t, resp, &eb)
		if resp.StatusCode != 400 || eb.Error.Param == nil || !strings.Contains(bad, *eb.Error.Param) {
			t.Errorf("%s: %d %+v, want 400 naming the field", bad, resp.StatusCode, eb)
		}
	}
	return e
}

// BenchmarkBudgetStep is the budget step's own cost per request with
// budgets on every scope and limits on the key, and its parallel
// contention on one key and its budgets: the budget request, and its
// reservation and settlement with the fair share in the shared admission
// (in memory).
//
//	go test -run '^$' -bench BudgetStep ./gateway
func BenchmarkBudgetStep(b *testing.B) {
	up := newRecordingUpstream(b, nil)
	e, db := budgetEnv(b, []string{up.srv.URL}, "")
	id := e.dbKeyID(b, db)
	for _, bu := range []string{
		`{"kind":"org","name":"etabA","period":"month","max_cost":1e6}`,
		`{"kind":"team","name":"lab-nlp","period":"day","max_cost":1e6}`,
		`{"kind":"team","name":"lab-nlp","model":"m","period":"week","max_cost":1e6}`,
		`{"kind":"key","name":"` + id + `","period":"day","max_cost":1e6}`,
	} {
		putBudget(b, e, bu)
	}
	ck, err := e.gw.auth.authenticate(b.Context(), "Bearer "+e.key, "127.0.0.1:1", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	ck.key.RPM, ck.key.TPM, ck.key.MaxInFlight = 1e9, 1e9, 1e6
	rq, _ := parseRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`), 0)
	b.Run("serial", func(b *testing.B) {
		x := &exchange{key: &ck.key, ck: ck, org: "etabA", rt: e.gw.routes["m"], rq: rq, start: time.Now()}
		b.ReportAllocs()
		for b.Loop() {
			if err := e.gw.admitBudget(b.Context(), x); err != nil {
				b.Fatal(err)
			}
			if err := e.gw.admitShared(b.Context(), x); err != nil {
				b.Fatal(err)
			}
			x.rec.GPUHours = 1e-9
			e.gw.releaseShared(x)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			x := &exchange{key: &ck.key, ck: ck, org: "etabA", rt: e.gw.routes["m"], rq: rq, start: time.Now()}
			for pb.Next() {
				if err := e.gw.admitBudget(b.Context(), x); err != nil {
					b.Fatal(err)
				}
				if err := e.gw.admitShared(b.Context(), x); err != nil {
					b.Fatal(err)
				}
				x.rec.GPUHours = 1e-9
				e.gw.releaseShared(x)
			}
		})
	})
}

// FuzzTagHeader: whatever the header holds, admitTags either refuses it
// with a 400 or keeps the key's tags and at most MaxRequestTags allowed,
// distinct ones.
func FuzzTagHeader(f *testing.F) {
	for _, s := range []string{"", "a", "a, b", "a,,b", "zz", "a,b,c,d,e,f,g,h,i", " a ,a", "\x00", "a,\u00e9"} {
		f.Add(s)
	}
	g := &Gateway{bud: &budgetState{header: "X-Tags", tags: map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true, "f": true, "g": true, "h": true, "i": true}}}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header["X-Tags"] = []string{h}
		x := &exchange{r: r, key: &llmflow.Key{Tags: []string{"k"}}}
		err := g.admitTags(t.Context(), x)
		if err != nil {
			if llmflow.ErrorCode(err) != llmflow.EINVALID {
				t.Fatalf("%q: %v", h, err)
			}
			return
		}
		tags := x.requestTags()
		if len(tags) == 0 || tags[0] != "k" || len(tags) > 1+8 {
			t.Fatalf("%q: tags %q", h, tags)
		}
		seen := map[string]bool{}
		for _, tg := range tags[1:] {
			if !g.bud.tags[tg] || seen[tg] {
				t.Fatalf("%q: tag %q kept", h, tg)
			}
			seen[tg] = true
		}
	})
}

// TestBudgetRefusedBeforeQueue: in a pool with a gateway-side queue that
// is full, a request its budget refuses is refused at once (429, its
// reason), not after waiting its turn or the queue timeout.
func TestBudgetRefusedBeforeQueue(t *testing.T) {
	up := newHeldUpstream(t)
	e, _ := budgetEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.Pools[0].Capacity = 1
		o.Config.Pools[0].Engine, _ = engine.For("gateway", "")
		o.Config.Pools[0].QueueTimeout = time.Minute
	})
	done := make(chan int, 1)
	go func() {
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	up.waitArrived(t, 1)
	putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"day","max_cost":0}`)
	start := time.Now()
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("over budget behind a full queue: %d, want 429", resp.StatusCode)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("refused after %s: it waited in the queue", el)
	}
	if n := metricValue(e.metricsText(t), `llmflow_denied_total{reason="budget"}`); n != 1 {
		t.Errorf("llmflow_denied_total{reason=\"budget\"} = %v, want 1", n)
	}
	close(up.release)
	if code := <-done; code != 200 {
		t.Errorf("first request: %d", code)
	}
}

// A user association's budget (Slurm's GrpTRESMins on alice in lab-nlp,
// budgets.KindUser) caps the keys alice owns in lab-nlp, whatever the case
// of the owner's name; a key of the team owned by nobody is not under it;
// /v1/me lists it for alice's key.
func TestUserAssociationBudget(t *testing.T) {
	_, hs := simUpstream(t, time.Millisecond)
	accts := llmflow.Accounts{{Name: "lab-nlp", Kind: llmflow.KindTeam, Users: []llmflow.UserAssoc{{User: "alice", Limits: llmflow.GPULimits{Minutes: 0, HasMinutes: true}}}}}
	e, _ := budgetEnv(t, []string{hs.URL}, "", func(o *Options) {
		o.SlurmBudgets = func() []budgets.Budget { return budgets.FromSlurm(accts, budgets.Month, 0) }
	})
	_, alice, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "a", Owner: "Alice"}, Principal{Name: "t", Role: RoleProxyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.gw.RefreshBudgets(t.Context()); err != nil {
		t.Fatal(err)
	}
	ask := func(key string) (int, string) {
		resp := gatewaytest.Post(t, e.srv, key, "/v1/chat/completions", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := ask(alice); code != http.StatusTooManyRequests || !strings.Contains(body, "lab-nlp/alice") {
		t.Errorf("alice's key under a spent user budget: %d %s", code, body)
	}
	if code, body := ask(e.key); code != http.StatusOK {
		t.Errorf("the team's key owned by nobody: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"lab-nlp/alice"`) {
		t.Errorf("/v1/me of alice's key does not list her budget: %s", b)
	}
}
