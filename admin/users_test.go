package admin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// flakyAdmin is an AdminStore that can be taken down: every read fails
// while down is set (a stopped PostgreSQL, a locked file).
type flakyAdmin struct {
	AdminStore
	down  atomic.Bool
	reads atomic.Int64 // principal reads (token, user, roles)
}

var errStoreDown = errors.New("store down")

func (f *flakyAdmin) AdminGeneration(ctx context.Context) (int64, error) {
	if f.down.Load() {
		return 0, errStoreDown
	}
	return f.AdminStore.AdminGeneration(ctx)
}

func (f *flakyAdmin) AdminTokenByHash(ctx context.Context, h [32]byte) (llmflow.AdminToken, error) {
	f.reads.Add(1)
	if f.down.Load() {
		return llmflow.AdminToken{}, errStoreDown
	}
	return f.AdminStore.AdminTokenByHash(ctx, h)
}

func (f *flakyAdmin) User(ctx context.Context, name string) (llmflow.User, error) {
	if f.down.Load() {
		return llmflow.User{}, errStoreDown
	}
	return f.AdminStore.User(ctx, name)
}

func (f *flakyAdmin) Roles(ctx context.Context, user string) ([]llmflow.RoleGrant, error) {
	if f.down.Load() {
		return nil, errStoreDown
	}
	return f.AdminStore.Roles(ctx, user)
}

// TestAdminPrincipalCache: a principal is read once and then served from
// the cache while the store's generation holds; a revoked token, a
// disabled user and a removed role take effect at the next request; with
// the store down, a principal confirmed within 5 minutes keeps reading,
// an unknown token gets 503 (not 401: nothing says it is bad), and after
// 5 minutes every token gets 503.
func TestAdminPrincipalCache(t *testing.T) {
	clock := gatewaytest.NewClock()
	var fl *flakyAdmin
	e := newAdminEnv(t, "", func(o *envOptions) {
		fl = &flakyAdmin{AdminStore: o.Admin}
		o.Admin, o.Now = fl, clock.Now
	})
	tok := e.tokens["oadmin"]
	e.must(t, "GET", "/admin/teams", "oadmin", "", 200)
	reads := fl.reads.Load()
	for range 5 {
		e.must(t, "GET", "/admin/teams", "oadmin", "", 200)
	}
	if n := fl.reads.Load() - reads; n != 0 {
		t.Errorf("%d store reads of a cached principal", n)
	}

	e.must(t, "GET", "/admin/whoami", "tadmin", "", 200)
	// the store goes down: the cached principals keep reading
	fl.down.Store(true)
	clock.Add(4 * time.Minute)
	if b := e.must(t, "GET", "/admin/teams", "oadmin", "", 200); !strings.Contains(b, "lab-nlp") {
		t.Errorf("cached read: %s", b)
	}
	if code, b := e.do(t, "GET", "/admin/teams", "llma-"+strings.Repeat("0", 64), ""); code != http.StatusServiceUnavailable {
		t.Errorf("unknown token with the store down: %d %s, want 503", code, b)
	}
	if code, b := e.do(t, "GET", "/admin/teams", e.tokens["tadmin"], ""); code != http.StatusOK {
		t.Errorf("another cached principal with the store down: %d %s", code, b)
	}
	clock.Add(2 * time.Minute)
	if code, b := e.do(t, "GET", "/admin/teams", tok, ""); code != http.StatusServiceUnavailable {
		t.Errorf("principal unconfirmed for 6 minutes: %d %s, want 503", code, b)
	}
	fl.down.Store(false)
	e.must(t, "GET", "/admin/teams", "oadmin", "", 200)

	// a removed role applies at the next request
	e.must(t, "DELETE", "/admin/users/oadmin/roles?role=org_admin&org=etabA", "master", "", 200)
	if b := e.must(t, "GET", "/admin/teams", "oadmin", "", 200); strings.Contains(b, "lab-nlp") {
		t.Errorf("removed role still applies: %s", b)
	}
	// a revoked token stops at once
	var ts struct{ Data []tokenView }
	json.Unmarshal([]byte(e.must(t, "GET", "/admin/users/tadmin/tokens", "master", "", 200)), &ts)
	e.must(t, "DELETE", "/admin/users/tadmin/tokens/"+ts.Data[0].ID, "tadmin", "", 200)
	if code, _ := e.do(t, "GET", "/admin/whoami", e.tokens["tadmin"], ""); code != http.StatusUnauthorized {
		t.Errorf("revoked token: %d, want 401", code)
	}
	// a disabled user's tokens stop at once
	e.must(t, "DELETE", "/admin/users/member", "master", "", 200)
	if code, _ := e.do(t, "GET", "/admin/whoami", e.tokens["member"], ""); code != http.StatusUnauthorized {
		t.Errorf("disabled user's token: %d, want 401", code)
	}
}

// TestAdminRevocationSeenByAnotherGateway: two gateways on one store;
// a token revoked through one stops working on the other at its next
// request (the store's generation moved), though the other had it cached.
func TestAdminRevocationSeenByAnotherGateway(t *testing.T) {
	e := newAdminEnv(t, "")
	other := newEnv(t, []string{"http://127.0.0.1:1"}, "", func(o *envOptions) { o.Keys, o.Admin = e.db, e.db })
	if code, b := other.do(t, "GET", "/admin/whoami", e.tokens["pview"], ""); code != 200 {
		t.Fatalf("other gateway: %d %s", code, b)
	}
	var ts struct{ Data []tokenView }
	json.Unmarshal([]byte(e.must(t, "GET", "/admin/users/pview/tokens", "master", "", 200)), &ts)
	e.must(t, "DELETE", "/admin/users/pview/tokens/"+ts.Data[0].ID, "master", "", 200)
	if code, _ := other.do(t, "GET", "/admin/whoami", e.tokens["pview"], ""); code != http.StatusUnauthorized {
		t.Errorf("token revoked on another gateway: %d, want 401", code)
	}
}

// TestAdminTokenFailuresThrottled: bad llma- tokens count in the operator
// limiter of the network, like bad master keys: past the limit even the
// master key and a valid token from that network get 429.
func TestAdminTokenFailuresThrottled(t *testing.T) {
	clock := gatewaytest.NewClock()
	e := newAdminEnv(t, "limits { auth_failures_per_minute = 5 }", func(o *envOptions) { o.Now = clock.Now })
	for i := range 5 {
		if code, _ := e.do(t, "GET", "/admin/whoami", "llma-"+strings.Repeat("1", 63)+string(rune('a'+i)), ""); code != http.StatusUnauthorized {
			t.Fatalf("bad token %d: %d", i, code)
		}
	}
	for _, tok := range []string{e.tokens["padmin"], e.master, "llma-bad"} {
		if code, _ := e.do(t, "GET", "/admin/whoami", tok, ""); code != http.StatusTooManyRequests {
			t.Errorf("from a throttled network: %d, want 429", code)
		}
	}
	// a client key is not an admin token and not throttled by these
	if code, b := e.do(t, http.MethodPost, "/v1/chat/completions", e.key, chatBody); code != http.StatusOK {
		t.Errorf("client key: %d %s", code, b)
	}
	clock.Add(13 * time.Second)
	e.must(t, "GET", "/admin/whoami", "padmin", "", 200)
	if !strings.Contains(e.metricsText(t), `llmflow_denied_total{reason="admin_auth"} 5`) {
		t.Error("bad admin tokens not counted as admin_auth denials")
	}
	// a revoked token and a disabled user's token are failures too
	e.must(t, "DELETE", "/admin/users/nobody", "master", "", 200)
	clock.Add(time.Minute)
	for range 5 {
		e.do(t, "GET", "/admin/whoami", e.tokens["nobody"], "")
	}
	if code, _ := e.do(t, "GET", "/admin/whoami", e.tokens["padmin"], ""); code != http.StatusTooManyRequests {
		t.Errorf("after 5 uses of a disabled user's token: %d, want 429", code)
	}
}

// TestAdminNoEscalation: nobody grants above their own scope, through
// HTTP.
func TestAdminNoEscalation(t *testing.T) {
	e := newAdminEnv(t, "")
	for _, tc := range []struct {
		p, body string
		want    int
	}{
		{"oadmin", `{"role":"proxy_admin"}`, 403},
		{"oadmin", `{"role":"proxy_viewer"}`, 403},
		{"oadmin", `{"role":"org_admin","org":"etabB"}`, 403},
		{"oadmin", `{"role":"team_admin","team":"lab-chem"}`, 403},
		{"oadmin", `{"role":"team_admin","team":"lab-nlp","org":"etabB"}`, 400}, // the team is not in etabB
		{"oadmin", `{"role":"team_admin","team":"lab-nlp"}`, 200},
		{"oadmin", `{"role":"org_admin","org":"etabA"}`, 200},
		{"tadmin", `{"role":"team_admin","team":"lab-nlp"}`, 403},
		{"tadmin", `{"role":"org_admin","org":"etabA"}`, 403},
		{"tadmin", `{"role":"viewer","org":"etabA"}`, 403},
		{"tadmin", `{"role":"member","team":"lab-nlp"}`, 200},
		{"member", `{"role":"member","team":"lab-nlp"}`, 403},
		{"orgviewer", `{"role":"viewer","org":"etabA"}`, 403},
		{"pview", `{"role":"viewer","org":"etabA"}`, 403},
		{"oadmin", `{"role":"team_admin","team":"no-such-team"}`, 403}, // unknown names are not confirmed
		{"padmin", `{"role":"team_admin","team":"no-such-team"}`, 404},
		{"padmin", `{"role":"root"}`, 400},
		{"padmin", `{"role":"member","org":"etabA"}`, 400},
		{"padmin", `{"role":"member","team":"lab-nlp","extra":1}`, 400},
	} {
		code, b := e.do(t, "PUT", "/admin/users/targetA/roles", e.tokens[tc.p], tc.body)
		if code != tc.want {
			t.Errorf("%s grants %s: %d %s, want %d", tc.p, tc.body, code, b, tc.want)
		}
	}
	// a member may not give their keys another owner, nor revoke another's
	if code, b := e.do(t, "POST", "/admin/keys", e.tokens["member"], `{"team":"lab-nlp","name":"x","owner":"tadmin"}`); code != 403 {
		t.Errorf("member creating a key for another owner: %d %s", code, b)
	}
	var k keyView
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys", "member", `{"team":"lab-nlp","name":"mine"}`, 201)), &k)
	if k.Owner != "member" {
		t.Errorf("member's key owner %q", k.Owner)
	}
	if code, _ := e.do(t, "DELETE", "/admin/keys/"+e.keyA.ID, e.tokens["member"], ""); code != 403 {
		t.Errorf("member revoking a key they do not own: %d", code)
	}
	// an org admin creates users in their organisation only
	e.must(t, "POST", "/admin/users", "oadmin", `{"name":"newbie"}`, 201)
	b := e.must(t, "GET", "/admin/users", "oadmin", "", 200)
	if !strings.Contains(b, `"newbie"`) || !strings.Contains(b, `"org":"etabA"`) {
		t.Errorf("org admin's new user not listed under etabA: %s", b)
	}
	if code, _ := e.do(t, "POST", "/admin/users", e.tokens["tadmin"], `{"name":"x2","org":"etabA"}`); code != 403 {
		t.Errorf("team admin creating a user: %d", code)
	}
	for _, bad := range []string{`{"name":"master"}`, `{"name":"a b"}`, `{"name":"a,b"}`, `{"name":""}`, `{"name":"-x"}`} {
		if code, _ := e.do(t, "POST", "/admin/users", e.master, bad); code != 400 {
			t.Errorf("user %s: %d, want 400", bad, code)
		}
	}
	if code, _ := e.do(t, "POST", "/admin/users", e.master, `{"name":"targetA"}`); code != 409 {
		t.Errorf("duplicate user: %d, want 409", code)
	}
}

// TestAdminBodies: 64 KiB at most, unknown fields and trailing values
// refused, on every admin route with a body.
func TestAdminBodies(t *testing.T) {
	e := newAdminEnv(t, "")
	for _, route := range []struct{ method, path string }{
		{"POST", "/admin/users"}, {"POST", "/admin/users/targetA/tokens"}, {"PUT", "/admin/users/targetA/roles"},
		{"POST", "/admin/orgs"}, {"POST", "/admin/teams"}, {"POST", "/admin/teams/lab-nlp/projects"},
		{"PUT", "/admin/teams/lab-nlp/models"}, {"POST", "/admin/keys"},
	} {
		for _, tc := range []struct {
			body string
			want int
		}{
			{`{"name":"` + strings.Repeat("a", 65<<10) + `"}`, 413},
			{`{"bogus":1}`, 400},
			{`{}{}`, 400},
			{`[`, 400},
		} {
			if code, b := e.do(t, route.method, route.path, e.master, tc.body); code != tc.want {
				t.Errorf("%s %s %.20q: %d %.200s, want %d", route.method, route.path, tc.body, code, b, tc.want)
			}
		}
	}
}

// TestAdminAudit: every admin write leaves an entry with who, what,
// before/after, when and from where, and no secret (key or token, or
// their hashes) anywhere in the trail.
func TestAdminAudit(t *testing.T) {
	e := newAdminEnv(t, "")
	var k keyView
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys", "tadmin", `{"team":"lab-nlp","name":"audited"}`, 201)), &k)
	e.must(t, "DELETE", "/admin/keys/"+k.ID, "tadmin", "", 200)
	e.must(t, "PUT", "/admin/teams/lab-nlp/models", "tadmin", `{"models":["m"]}`, 200)
	var tok tokenView
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/users/tadmin/tokens", "tadmin", `{"name":"second"}`, 201)), &tok)

	b := e.must(t, "GET", "/admin/audit", "master", "", 200)
	var list struct{ Data []auditView }
	if err := json.Unmarshal([]byte(b), &list); err != nil {
		t.Fatal(err)
	}
	byAction := map[string]auditView{}
	for _, a := range list.Data {
		if _, ok := byAction[a.Action]; !ok { // newest first
			byAction[a.Action] = a
		}
	}
	for _, want := range []string{"user.create", "role.grant", "token.create", "key.create", "key.revoke", "team.models", "project.create"} {
		a, ok := byAction[want]
		if !ok {
			t.Errorf("no %s entry", want)
			continue
		}
		if a.Actor == "" || a.Time.IsZero() || a.Remote != "127.0.0.1/32" || a.Target == "" {
			t.Errorf("%s entry incomplete: %+v", want, a)
		}
	}
	if a := byAction["key.revoke"]; a.Actor != "tadmin" || !strings.Contains(string(a.Before), `"id":"`+k.ID) ||
		!strings.Contains(string(a.After), `"revoked_at"`) || strings.Contains(string(a.Before), "revoked_at") {
		t.Errorf("key.revoke entry: %+v", a)
	}
	if a := byAction["team.models"]; string(a.Before) != `{"team":"lab-nlp","models":[]}` || string(a.After) != `{"team":"lab-nlp","models":["m"]}` {
		t.Errorf("team.models entry: before %s after %s", a.Before, a.After)
	}
	// no secret: the key, the tokens, or their SHA-256 in hex
	h := llmflow.HashKey(k.Key)
	th := llmflow.HashKey(tok.Token)
	for _, s := range []string{k.Key, k.Key[5:], tok.Token, tok.Token[5:], e.tokens["padmin"][5:], hex.EncodeToString(h[:]), hex.EncodeToString(th[:])} {
		if strings.Contains(b, s) {
			t.Errorf("audit trail shows a secret %.12q…", s)
		}
	}
	// a team admin sees their team's entries, not the other organisation's
	b = e.must(t, "GET", "/admin/audit?actor=master", "tadmin", "", 200)
	if strings.Contains(b, "lab-chem") || !strings.Contains(b, "nlp-p1") {
		t.Errorf("team admin's audit: %s", b)
	}
	// a member reads nothing of the team, but sees their own writes
	e.must(t, "POST", "/admin/keys", "member", `{"team":"lab-nlp","name":"mine"}`, 201)
	b = e.must(t, "GET", "/admin/audit", "member", "", 200)
	if !strings.Contains(b, `"actor":"member"`) || strings.Contains(b, `"actor":"tadmin"`) {
		t.Errorf("member's audit: %s", b)
	}
	if code, _ := e.do(t, "GET", "/admin/audit?actr=x", e.master, ""); code != 400 {
		t.Errorf("misspelt filter: %d", code)
	}
}

// TestTeamModelLists: a hidden model answers 404 exactly like an unknown
// one and is left out of /v1/models; an empty list gives every model back.
func TestTeamModelLists(t *testing.T) {
	e := newAdminEnv(t, "")
	send := func(model string) (int, string) {
		return e.do(t, "POST", "/v1/chat/completions", e.key, `{"model":"`+model+`","messages":[]}`)
	}
	if code, b := send("batchm"); code != 200 {
		t.Fatalf("before the list: %d %s", code, b)
	}
	e.must(t, "PUT", "/admin/teams/lab-nlp/models", "tadmin", `{"models":["m"]}`, 200)
	codeH, hidden := send("batchm")
	codeU, unknown := send("nope")
	if codeH != 404 || codeU != 404 || strings.Replace(hidden, "batchm", "nope", 1) != unknown {
		t.Errorf("hidden %d %s, unknown %d %s: want the same 404", codeH, hidden, codeU, unknown)
	}
	if code, _ := send("m"); code != 200 {
		t.Errorf("listed model: %d", code)
	}
	_, models := e.do(t, "GET", "/v1/models", e.key, "")
	if strings.Contains(models, "batchm") || !strings.Contains(models, `"m"`) {
		t.Errorf("/v1/models: %s", models)
	}
	if code, _ := e.do(t, "GET", "/v1/models/batchm", e.key, ""); code != 404 {
		t.Errorf("/v1/models/batchm: %d", code)
	}
	// another team is not affected
	other := e.newKey(t, "lab-chem")
	if code, b := e.do(t, "POST", "/v1/chat/completions", other, `{"model":"batchm","messages":[]}`); code != 200 {
		t.Errorf("other team: %d %s", code, b)
	}
	if code, _ := e.do(t, "PUT", "/admin/teams/lab-nlp/models", e.master, `{"models":["gpt-9"]}`); code != 400 {
		t.Errorf("unknown model in a list: %d", code)
	}
	// kept across a restart (a new gateway on the same store)
	again := newEnv(t, []string{"http://127.0.0.1:1"}, "", func(o *envOptions) { o.Keys, o.Admin = e.db, e.db })
	if _, b := again.do(t, "GET", "/v1/models", e.key, ""); strings.Contains(b, "batchm") {
		t.Errorf("list lost at restart: %s", b)
	}
	e.must(t, "PUT", "/admin/teams/lab-nlp/models", "tadmin", `{"models":[]}`, 200)
	if code, _ := send("batchm"); code != 200 {
		t.Errorf("after clearing the list: %d", code)
	}
}

// TestAdminAccounts: accounts created here serve keys at once, have no
// share, survive a restart and a new base tree (a Slurm sync); disabling
// an organisation stops and revokes its keys.
func TestAdminAccounts(t *testing.T) {
	e := newAdminEnv(t, "")
	e.must(t, "POST", "/admin/orgs", "master", `{"name":"etabC"}`, 201)
	e.must(t, "POST", "/admin/teams", "master", `{"name":"lab-c","org":"etabC"}`, 201)
	if code, _ := e.do(t, "POST", "/admin/teams", e.master, `{"name":"lab-nlp","org":"etabC"}`); code != 409 {
		t.Errorf("team name taken: %d, want 409", code)
	}
	key := e.newKey(t, "lab-c")
	if code, b := e.do(t, "POST", "/v1/chat/completions", key, chatBody); code != 200 {
		t.Fatalf("key of a created team: %d %s", code, b)
	}
	b := e.must(t, "GET", "/admin/orgs", "master", "", 200)
	if !strings.Contains(b, `{"name":"etabC","share":0,"disabled":false,"source":"admin"}`) {
		t.Errorf("created organisation: %s", b)
	}
	// a new base tree (what a Slurm sync does) keeps the admin changes
	e.gw.SetAccounts(e.cfg.Accounts())
	if code, b := e.do(t, "POST", "/v1/chat/completions", key, chatBody); code != 200 {
		t.Fatalf("after a new base tree: %d %s", code, b)
	}
	// and so does a restart
	again := newEnv(t, []string{"http://127.0.0.1:1"}, "", func(o *envOptions) { o.Keys, o.Admin = e.db, e.db })
	if _, b := again.do(t, "GET", "/admin/teams?org=etabC", again.master, ""); !strings.Contains(b, "lab-c") {
		t.Errorf("created team lost at restart: %s", b)
	}
	b = e.must(t, "DELETE", "/admin/orgs/etabA", "master", "", 200)
	if !strings.Contains(b, `"keys_revoked":4`) {
		t.Errorf("disable etabA: %s", b)
	}
	if code, _ := e.do(t, "POST", "/v1/chat/completions", e.key, chatBody); code == 200 {
		t.Error("key of a disabled organisation still works")
	}
	if code, _ := e.do(t, "POST", "/admin/teams", e.master, `{"name":"late","org":"etabA"}`); code != 403 {
		t.Errorf("team in a disabled organisation: %d", code)
	}
}
