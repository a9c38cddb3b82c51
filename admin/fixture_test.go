package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/store"
)

// adminEnv is a gateway on a real SQLite store (keys, accounting, admin)
// with the principals of every role, each with an admin token:
//
//	organisation etabA, team lab-nlp, project nlp-p1  (in scope)
//	organisation etabB, team lab-chem, project chem-p1 (out of scope)
type adminEnv struct {
	*testEnv
	db     *store.SQLite
	tokens map[string]string // principal → bearer token ("master": the master key)
	keyA   llmflow.Key       // lab-nlp, no owner
	keyOwn llmflow.Key       // lab-nlp, owned by the member
	keyB   llmflow.Key       // lab-chem
}

// principals are the callers of the matrix: the master key and a user of
// each role (viewer on an organisation and on a team), and a user without
// any role. Roles are in scope etabA / lab-nlp.
var principals = []string{"master", "padmin", "pview", "oadmin", "tadmin", "member", "orgviewer", "teamviewer", "nobody"}

var principalGrants = map[string]RoleRequest{
	"padmin":     {Role: "proxy_admin"},
	"pview":      {Role: "proxy_viewer"},
	"oadmin":     {Role: "org_admin", Org: "etabA"},
	"tadmin":     {Role: "team_admin", Team: "lab-nlp"},
	"member":     {Role: "member", Team: "lab-nlp"},
	"orgviewer":  {Role: "viewer", Org: "etabA"},
	"teamviewer": {Role: "viewer", Team: "lab-nlp"},
}

// proxyWide are the principals that see everything.
var proxyWide = map[string]bool{"master": true, "padmin": true, "pview": true}

func newAdminEnv(t testing.TB, extra string, mod ...func(*envOptions)) *adminEnv {
	t.Helper()
	up := newRecordingUpstream(t, nil)
	db, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "admin.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &adminEnv{db: db, tokens: map[string]string{"master": gatewaytest.MasterKey}}
	e.testEnv = newEnv(t, []string{up.srv.URL}, extra, append([]func(*envOptions){func(o *envOptions) {
		o.Keys, o.Admin, o.Spend, o.Records, o.Budgets = db, db, db, db, db
	}}, mod...)...)
	e.must(t, "POST", "/admin/teams/lab-nlp/projects", "master", `{"name":"nlp-p1"}`, 201)
	e.must(t, "POST", "/admin/teams/lab-chem/projects", "master", `{"name":"chem-p1"}`, 201)
	for _, p := range principals[1:] {
		e.tokens[p] = e.newUser(t, p, principalGrants[p])
	}
	// users that are the targets of user routes: one in each organisation
	e.newUser(t, "targetA", RoleRequest{Role: "member", Team: "lab-nlp"})
	e.newUser(t, "targetB", RoleRequest{Role: "viewer", Team: "lab-chem"})
	// a budget on each organisation's team (admin_budgets.go)
	e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"team","name":"lab-nlp","period":"month","max_cost":100}`, 200)
	e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"team","name":"lab-chem","period":"month","max_cost":100}`, 200)
	e.keyA = e.newKeyOf(t, `{"team":"lab-nlp","name":"a"}`)
	e.keyOwn = e.newKeyOf(t, `{"team":"lab-nlp","name":"own","owner":"member"}`)
	e.keyB = e.newKeyOf(t, `{"team":"lab-chem","name":"b"}`)
	// spend: 1 request of keyA, 2 of keyOwn, 4 of keyB
	at := time.Now().UTC().Add(-time.Hour)
	var recs []llmflow.Record
	for i, k := range []llmflow.Key{e.keyA, e.keyOwn, e.keyOwn, e.keyB, e.keyB, e.keyB, e.keyB} {
		recs = append(recs, llmflow.Record{Time: at, RequestID: fmt.Sprintf("req-%d", i), KeyID: k.ID, Org: k.Org, Team: k.Team,
			Model: "m", Pool: "p", PromptTokens: 10, CompletionTokens: 1, GPUHours: 0.5, Status: 200, Outcome: llmflow.OutcomeOK})
	}
	if err := db.WriteRecords(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	return e
}

// must sends a request as principal p and fails unless the status is want.
func (e *adminEnv) must(t testing.TB, method, path, p, body string, want int) string {
	t.Helper()
	code, b := e.do(t, method, path, e.tokens[p], body)
	if code != want {
		t.Fatalf("%s %s as %s: %d %s, want %d", method, path, p, code, b, want)
	}
	return b
}

// newUser creates a user (as the master key) with a role and returns a
// new admin token of theirs.
func (e *adminEnv) newUser(t testing.TB, name string, role RoleRequest) string {
	t.Helper()
	e.must(t, "POST", "/admin/users", "master", `{"name":"`+name+`"}`, 201)
	if role.Role != "" {
		b, _ := json.Marshal(role)
		e.must(t, "PUT", "/admin/users/"+name+"/roles", "master", string(b), 200)
	}
	var tok tokenView
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/users/"+name+"/tokens", "master", `{"name":"test"}`, 201)), &tok)
	if len(tok.Token) != 69 {
		t.Fatalf("token %q", tok.Token)
	}
	return tok.Token
}

func (e *adminEnv) newKeyOf(t testing.TB, body string) llmflow.Key {
	t.Helper()
	var v keyView
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys", "master", body, http.StatusCreated)), &v)
	k, err := e.db.KeyByID(t.Context(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
