package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// TestMe: GET /v1/me answers a key holder their scopes, the budgets they
// draw on with what is left (the figures the ledger holds: after one
// request, spent is its cost), their limits and the requests counted
// against them, and their fair-share standing; never another team's
// budget, never the secret.
func TestMe(t *testing.T) {
	_, up := simUpstream(t, 0)
	e, _ := budgetEnv(t, []string{up.URL}, "")
	k, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "alice-laptop", Owner: "alice",
		RPM: 60, TPM: 100000, MaxInFlight: 4, Tags: []string{"teaching"}}, Principal{})
	if err != nil {
		t.Fatal(err)
	}
	putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"month","max_cost":10}`)
	putBudget(t, e, `{"kind":"key","name":"`+k.ID+`","period":"day","max_cost":2}`)
	putBudget(t, e, `{"kind":"tag","name":"teaching","model":"m","period":"week","max_cost":3}`)
	putBudget(t, e, `{"kind":"team","name":"lab-chem","period":"month","max_cost":99}`) // not theirs

	resp := gatewaytest.Post(t, e.srv, secret, "/v1/chat/completions", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	var ans chatAnswer
	gatewaytest.DecodeJSON(t, resp, &ans)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d %s", resp.StatusCode, ans.Error.Message)
	}
	// the request's cost settles when its handler ends: wait for the held
	// GPU-hours to be gone
	gatewaytest.WaitFor(t, func() bool { return e.gw.bud.mem.Table().Held() == 0 })

	status, body := gatewaytest.Do(t, e.srv, "GET", "/v1/me", secret, "")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/me: %d %s", status, body)
	}
	var me Me
	if err := json.Unmarshal([]byte(body), &me); err != nil {
		t.Fatal(err)
	}
	if me.Object != "me" || me.Key.ID != k.ID || me.Key.Hint != k.Hint || me.Key.Name != "alice-laptop" {
		t.Errorf("key: %+v", me.Key)
	}
	if want := (MeScopes{Org: "etabA", Team: "lab-nlp", User: "alice"}); me.Scopes != want {
		t.Errorf("scopes %+v, want %+v", me.Scopes, want)
	}
	if want := (MeLimits{RPM: 60, TPM: 100000, MaxInFlight: 4, RequestsLastMinute: 1, TokensLastMinute: me.Limits.TokensLastMinute}); me.Limits != want || want.TokensLastMinute <= 0 {
		t.Errorf("limits %+v, want %+v with tokens > 0", me.Limits, want)
	}
	if !slices.Equal(me.Models, []string{"m", "batchm"}) {
		t.Errorf("models %v", me.Models)
	}
	cost := float64(ans.Usage.PromptTokens)*1/1e6 + float64(ans.Usage.CompletionTokens)*10/1e6
	if cost <= 0 {
		t.Fatalf("usage %+v", ans.Usage)
	}
	wantBudgets := []struct {
		kind, name, model string
		limit             float64
	}{{"key", k.ID, "", 2}, {"tag", "teaching", "m", 3}, {"team", "lab-nlp", "", 10}}
	if len(me.Budgets) != len(wantBudgets) {
		t.Fatalf("budgets %+v, want %d", me.Budgets, len(wantBudgets))
	}
	for i, w := range wantBudgets {
		b := me.Budgets[i]
		if b.Kind != w.kind || b.Name != w.name || b.Model != w.model || b.Limit != w.limit {
			t.Errorf("budget %d: %+v, want %+v", i, b, w)
		}
		if math.Abs(b.Spent-cost) > 1e-9 || b.Held != 0 || math.Abs(b.Remaining-(w.limit-cost)) > 1e-9 {
			t.Errorf("budget %s: spent %g held %g remaining %g, want spent %g", b.Name, b.Spent, b.Held, b.Remaining, cost)
		}
		if !b.PeriodEnd.After(time.Now()) {
			t.Errorf("budget %s: period ends %v", b.Name, b.PeriodEnd)
		}
	}
	if len(me.Share) != 1 || me.Share[0].Pool != "p" || me.Share[0].Capacity != 16 {
		t.Fatalf("fair share %+v", me.Share)
	}
	sh := me.Share[0]
	var accts []string
	for _, a := range sh.Accounts {
		accts = append(accts, a.Kind+":"+a.Account)
	}
	if !slices.Equal(accts, []string{"org:etabA", "team:lab-nlp"}) {
		t.Errorf("accounts %v", accts)
	}
	if sh.Accounts[0].Reserved != 12 || sh.Accounts[1].RawUsage <= 0 {
		t.Errorf("etabA reserved %d (want 12 of 16 at share 0.75), lab-nlp usage %g", sh.Accounts[0].Reserved, sh.Accounts[1].RawUsage)
	}
	if sh.Standing != "within" || sh.Priority != (MePriority{Interactive: 0, Batch: 1}) {
		t.Errorf("standing %q priority %+v", sh.Standing, sh.Priority)
	}
	if slices.ContainsFunc(me.Budgets, func(b MeBudget) bool { return b.Name == "lab-chem" }) {
		t.Error("another team's budget shown")
	}
	if strings.Contains(body, secret) || strings.Contains(body, secret[5:20]) {
		t.Error("the answer shows the secret")
	}
}

// TestMeRefused: /v1/me is a client route like the others: no key, an
// unknown key and a revoked key are refused with 401; other methods 405.
func TestMeRefused(t *testing.T) {
	e, db := budgetEnv(t, []string{"http://127.0.0.1:1"}, "")
	k, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-chem", Name: "x"}, Principal{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RevokeKey(t.Context(), k.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.gw.ForgetKey(k.Hash)
	for _, tc := range []struct {
		name, method, tok string
		want              int
	}{
		{"no key", "GET", "", http.StatusUnauthorized},
		{"unknown key", "GET", "llmf-0000000000000000000000000000000000000000000", http.StatusUnauthorized},
		{"revoked key", "GET", secret, http.StatusUnauthorized},
		{"POST", "POST", e.key, http.StatusMethodNotAllowed},
		{"valid", "GET", e.key, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, body := gatewaytest.Do(t, e.srv, tc.method, "/v1/me", tc.tok, ""); status != tc.want {
				t.Errorf("%d %s, want %d", status, body, tc.want)
			}
		})
	}
}

// BenchmarkMe is the work of GET /v1/me past authentication: the key's
// budgets among 200 in force, its limits, and its standing in the pool.
func BenchmarkMe(b *testing.B) {
	e, _ := budgetEnv(b, []string{"http://127.0.0.1:1"}, "")
	k, _, err := e.gw.CreateKey(b.Context(), KeyRequest{Team: "lab-nlp", Name: "bench", Owner: "alice", RPM: 60, Tags: []string{"t"}}, Principal{})
	if err != nil {
		b.Fatal(err)
	}
	putBudget(b, e, `{"kind":"team","name":"lab-nlp","period":"month","max_cost":10}`)
	for i := range 199 {
		putBudget(b, e, fmt.Sprintf(`{"kind":"tag","name":"other-%d","period":"day","max_cost":1}`, i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if me := e.gw.meOf(&k); len(me.Budgets) != 1 {
			b.Fatalf("budgets %+v", me.Budgets)
		}
	}
}
