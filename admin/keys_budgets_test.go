package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/store"
)

// Bad client keys from an address throttle client keys only: the master
// key still works on the admin API from that address.
func TestNoAdminLockoutByClientKeys(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "") // auth_failures_per_minute = 60
	var limited int
	for i := range 100 {
		code, _ := e.do(t, http.MethodPost, "/v1/chat/completions", gatewaytest.BadClientKey(i), chatBody)
		switch code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			limited++
		default:
			t.Fatalf("bad key %d: status %d", i, code)
		}
	}
	if limited < 39 {
		t.Fatalf("%d of 100 bad keys were throttled, want ≥ 39", limited)
	}
	if code, body := e.do(t, http.MethodGet, "/admin/keys", e.master, ""); code != http.StatusOK {
		t.Fatalf("master key after 100 bad client keys: %d %s", code, body)
	}
	if code, body := e.do(t, http.MethodPost, "/admin/keys", e.master, `{"team":"lab-nlp","name":"new"}`); code != http.StatusCreated {
		t.Fatalf("create key after 100 bad client keys: %d %s", code, body)
	}
}

// Bad master keys throttle the operator routes of that network only (the
// master key included): client keys keep working, and so do other
// networks' admins.
func TestBadMasterKeyThrottlesAdminOnly(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	clock := gatewaytest.NewClock()
	e := newEnv(t, []string{up.srv.URL}, "limits { auth_failures_per_minute = 5 }", func(o *envOptions) { o.Now = clock.Now })
	for i := range 5 {
		if code, _ := e.do(t, http.MethodGet, "/admin/keys", "wrong-master", ""); code != http.StatusUnauthorized {
			t.Fatalf("bad master key %d: %d, want 401", i, code)
		}
	}
	if code, _ := e.do(t, http.MethodGet, "/admin/keys", "wrong-master", ""); code != http.StatusTooManyRequests {
		t.Fatalf("6th bad master key: %d, want 429", code)
	}
	if code, _ := e.do(t, http.MethodGet, "/admin/keys", e.master, ""); code != http.StatusTooManyRequests {
		t.Fatalf("master key from a network throttled for master-key failures: %d, want 429", code)
	}
	// client keys from the same network are not affected, cached or not
	if code, body := e.do(t, http.MethodPost, "/v1/chat/completions", e.key, chatBody); code != http.StatusOK {
		t.Fatalf("client key: %d %s", code, body)
	}
	fresh := e.newKey(t, "lab-nlp")
	if code, body := e.do(t, http.MethodPost, "/v1/chat/completions", fresh, chatBody); code != http.StatusOK {
		t.Fatalf("uncached client key: %d %s", code, body)
	}
	// other networks are not affected
	if _, err := e.adm.principal(gatewaytest.AdminRequest("203.0.113.7:1", e.master)); err != nil {
		t.Fatalf("master key from another network: %v", err)
	}
	// the bucket refills: one failure back after 12 s at 5 a minute
	clock.Add(13 * time.Second)
	if code, body := e.do(t, http.MethodGet, "/admin/keys", e.master, ""); code != http.StatusOK {
		t.Fatalf("master key after refill: %d %s", code, body)
	}
	text := e.metricsText(t)
	for _, want := range []string{`llmflow_denied_total{reason="admin_auth"} 5`, `llmflow_denied_total{reason="admin_auth_rate_limited"} 2`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestRevokedKeyRefused(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	list := adminDo(t, e, http.MethodGet, "/admin/keys", "")
	var keys struct {
		Data []keyView `json:"data"`
	}
	gatewaytest.DecodeJSON(t, list, &keys)
	if len(keys.Data) != 1 || keys.Data[0].Key != "" {
		t.Fatalf("listing %+v: want one key without secret", keys.Data)
	}
	resp = adminDo(t, e, http.MethodDelete, "/admin/keys/"+keys.Data[0].ID, "")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("revoke status %d", resp.StatusCode)
	}
	resp = e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `"type":"authentication_error"`) {
		t.Fatalf("revoked key: %d %s", resp.StatusCode, b)
	}
}

// TestKeyLimitRoutesRefuse: the key limit and activation routes refuse
// what is not a limit or an activation, and an unknown key.
func TestKeyLimitRoutesRefuse(t *testing.T) {
	e := newAdminEnv(t, "")
	id := e.keyA.ID
	for _, tc := range []struct{ path, body string }{
		{"/admin/keys/" + id + "/limits", `{"rpm":-1}`},
		{"/admin/keys/" + id + "/limits", `{"rpm":1,"bogus":2}`},
		{"/admin/keys/" + id + "/active", `{}`},
		{"/admin/keys/" + id + "/active", `{"active":"no"}`},
	} {
		e.must(t, http.MethodPut, tc.path, "master", tc.body, 400)
	}
	e.must(t, http.MethodPut, "/admin/keys/key_nope/limits", "master", `{"rpm":1}`, 404)
}

// TestBudgetRoutesRefuse: the budget routes refuse what names nothing or
// is not a budget.
func TestBudgetRoutesRefuse(t *testing.T) {
	e := newAdminEnv(t, "")
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"PUT", "/admin/budgets", `{"kind":"team","name":"nope","period":"day","max_cost":1}`, 404},
		{"PUT", "/admin/budgets", `{"kind":"team","name":"lab-nlp","model":"nope","period":"day","max_cost":1}`, 404},
		{"PUT", "/admin/budgets", `{"kind":"key","name":"key_nope","period":"day","max_cost":1}`, 404},
		{"PUT", "/admin/budgets", `{"kind":"org","name":"lab-nlp","period":"day","max_cost":1}`, 404},
		{"PUT", "/admin/budgets", `{"kind":"user","name":"x","period":"day","max_cost":1}`, 400},
		{"PUT", "/admin/budgets", `{"kind":"team","name":"lab-nlp","period":"year","max_cost":1}`, 400},
		{"PUT", "/admin/budgets", `{"kind":"team","name":"lab-nlp","period":"day"}`, 400},
		{"PUT", "/admin/budgets", `{"kind":"team","name":"lab-nlp","period":"day","max_cost":-1}`, 400},
		{"DELETE", "/admin/budgets?kind=team&name=lab-nlp&model=m", "", 404},
		{"DELETE", "/admin/budgets?kind=team&nme=lab-nlp", "", 400},
		{"POST", "/admin/budgets/increase", `{"kind":"team","name":"lab-nlp","amount":1,"expires_at":"2099-01-01T00:00:00Z"}`, 400},
		{"POST", "/admin/budgets/increase", `{"kind":"project","name":"chem-p1","amount":1,"expires_at":"` + time.Now().Add(time.Hour).Format(time.RFC3339) + `"}`, 404},
		{"GET", "/admin/budgets?bogus=1", "", 400},
	} {
		if code, b := e.do(t, tc.method, tc.path, e.tokens["master"], tc.body); code != tc.status || !strings.Contains(b, `"message"`) {
			t.Errorf("%s %s %s: %d %s, want %d", tc.method, tc.path, tc.body, code, b, tc.status)
		}
	}
}

// countingKeys counts a store's key lookups.
type countingKeys struct {
	*store.SQLite
	byID, lists atomic.Int64
}

func (c *countingKeys) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	c.byID.Add(1)
	return c.SQLite.KeyByID(ctx, id)
}

func (c *countingKeys) ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error) {
	c.lists.Add(1)
	return c.SQLite.ListKeys(ctx, f)
}

// TestScopedBudgetListingKeys: a team admin's budget listing shows the
// budgets of its team's keys and not another team's, reading the keys
// once for the listing, not once per key budget.
func TestScopedBudgetListingKeys(t *testing.T) {
	var keys *countingKeys
	e := newAdminEnv(t, "", func(o *envOptions) {
		keys = &countingKeys{SQLite: o.Keys.(*store.SQLite)}
		o.Keys = keys
	})
	var ids []string
	for i := range 5 {
		team := "lab-nlp"
		if i%2 == 1 {
			team = "lab-chem"
		}
		k := e.newKeyOf(t, fmt.Sprintf(`{"team":%q,"name":"budgeted-%d"}`, team, i))
		e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"key","name":"`+k.ID+`","period":"day","max_cost":1}`, 200)
		ids = append(ids, k.ID)
	}
	byID, lists := keys.byID.Load(), keys.lists.Load()
	body := e.must(t, "GET", "/admin/budgets?kind=key", "tadmin", "", 200)
	for i, id := range ids {
		if shown := strings.Contains(body, id); shown != (i%2 == 0) {
			t.Errorf("key budget %d (lab-nlp: %v) shown to lab-nlp's team admin: %v\n%s", i, i%2 == 0, shown, body)
		}
	}
	if n, l := keys.byID.Load()-byID, keys.lists.Load()-lists; n != 0 || l != 1 {
		t.Fatalf("the listing read %d keys one by one and listed keys %d times; want 0 and 1", n, l)
	}
}
