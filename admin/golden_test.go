package admin

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
)

var updateGolden = flag.Bool("update", false, "rewrite the admin API golden files in testdata/admin-golden")

// goldenCall is one admin request of the golden script. Path and body may
// name the fixture's keys as {keyA}, {keyOwn}, {keyB}, and the id of the
// last key or token created as {lastKey}, {lastToken}.
type goldenCall struct {
	as, method, path, body string
}

// goldenScript exercises every admin route (and its usual refusals) in
// an order where each call sees the state the previous ones left.
var goldenScript = []goldenCall{
	// who am I, unauthenticated, unknown route, wrong method
	{"master", "GET", "/admin/whoami", ""},
	{"oadmin", "GET", "/admin/whoami", ""},
	{"member", "GET", "/admin/whoami", ""},
	{"", "GET", "/admin/whoami", ""},
	{"bad", "GET", "/admin/whoami", ""},
	{"master", "GET", "/admin/nope", ""},
	{"master", "PATCH", "/admin/keys", ""},
	{"master", "GET", "/admin/whoami?x=1", ""},

	// users, tokens, roles
	{"master", "GET", "/admin/users", ""},
	{"oadmin", "GET", "/admin/users", ""},
	{"master", "POST", "/admin/users", `{"name":"gold","org":"etabA"}`},
	{"master", "POST", "/admin/users", `{"name":"gold","org":"etabA"}`},
	{"master", "POST", "/admin/users", `{"name":"gold2","bogus":1}`},
	{"master", "POST", "/admin/users", `not json`},
	{"oadmin", "POST", "/admin/users", `{"name":"gold3","org":"etabB"}`},
	{"master", "GET", "/admin/users/gold/tokens", ""},
	{"master", "POST", "/admin/users/gold/tokens", `{"name":"ci"}`},
	{"master", "GET", "/admin/users/gold/tokens", ""},
	{"master", "DELETE", "/admin/users/gold/tokens/{lastToken}", ""},
	{"master", "DELETE", "/admin/users/gold/tokens/tok_0000000000000000", ""},
	{"master", "PUT", "/admin/users/gold/roles", `{"role":"team_admin","team":"lab-nlp"}`},
	{"master", "PUT", "/admin/users/gold/roles", `{"role":"wizard","team":"lab-nlp"}`},
	{"master", "GET", "/admin/users/gold/roles", ""},
	{"tadmin", "GET", "/admin/users/gold/roles", ""},
	{"master", "DELETE", "/admin/users/gold/roles?role=team_admin&team=lab-nlp", ""},
	{"master", "DELETE", "/admin/users/gold", ""},
	{"master", "DELETE", "/admin/users/nosuch", ""},

	// organisations, teams, projects, shares, model lists
	{"master", "GET", "/admin/orgs", ""},
	{"oadmin", "GET", "/admin/orgs", ""},
	{"master", "POST", "/admin/orgs", `{"name":"etabG","share":2}`},
	{"master", "POST", "/admin/orgs", `{"name":"etabA"}`},
	{"master", "PUT", "/admin/orgs/etabG/share", `{"share":3}`},
	{"master", "PUT", "/admin/orgs/etabA/share", `{"share":3}`},
	{"master", "DELETE", "/admin/orgs/etabG", ""},
	{"master", "POST", "/admin/orgs/etabG/enable", ""},
	{"master", "GET", "/admin/teams", ""},
	{"master", "GET", "/admin/teams?org=etabA", ""},
	{"tadmin", "GET", "/admin/teams", ""},
	{"master", "POST", "/admin/teams", `{"name":"lab-g","org":"etabG","share":1}`},
	{"master", "POST", "/admin/teams", `{"name":"lab-h"}`},
	{"master", "PUT", "/admin/teams/lab-g/share", `{"share":5}`},
	{"master", "DELETE", "/admin/teams/lab-g", ""},
	{"master", "POST", "/admin/teams/lab-g/enable", ""},
	{"master", "GET", "/admin/teams/lab-nlp/projects", ""},
	{"master", "POST", "/admin/teams/lab-g/projects", `{"name":"g-p1","share":1}`},
	{"master", "PUT", "/admin/teams/lab-g/projects/g-p1/share", `{"share":4}`},
	{"master", "DELETE", "/admin/teams/lab-g/projects/g-p1", ""},
	{"master", "POST", "/admin/teams/lab-g/projects/g-p1/enable", ""},
	{"master", "GET", "/admin/teams/lab-g/projects", ""},
	{"master", "GET", "/admin/orgs", ""},
	{"master", "GET", "/admin/teams/lab-nlp/models", ""},
	{"master", "PUT", "/admin/teams/lab-nlp/models", `{"models":["m","m"]}`},
	{"master", "PUT", "/admin/teams/lab-nlp/models", `{"models":["nosuch"]}`},
	{"member", "GET", "/admin/teams/lab-nlp/models", ""},

	// keys, their limits and state
	{"master", "GET", "/admin/keys", ""},
	{"master", "GET", "/admin/keys?team=lab-nlp", ""},
	{"master", "GET", "/admin/keys?tema=lab-nlp", ""},
	{"master", "GET", "/admin/keys?include_revoked=yes", ""},
	{"member", "GET", "/admin/keys", ""},
	{"master", "POST", "/admin/keys", `{"team":"lab-nlp","project":"nlp-p1","name":"g","rpm":5,"tpm":50,"max_inflight":1,"tags":["x","y"]}`},
	{"master", "POST", "/admin/keys", `{"team":"nosuch","name":"g"}`},
	{"master", "POST", "/admin/keys", `{"team":"lab-nlp","name":"g","rpm":-1}`},
	{"member", "POST", "/admin/keys", `{"team":"lab-nlp","name":"mine","owner":"padmin"}`},
	{"master", "PUT", "/admin/keys/{lastKey}/limits", `{"rpm":10,"tpm":1000,"max_inflight":2}`},
	{"master", "PUT", "/admin/keys/{lastKey}/active", `{"active":false}`},
	{"master", "PUT", "/admin/keys/{lastKey}/active", `{}`},
	{"master", "PUT", "/admin/keys/{lastKey}/active", `{"active":true}`},
	{"member", "PUT", "/admin/keys/{keyB}/limits", `{"rpm":1}`},
	{"master", "PUT", "/admin/keys/key_0000000000000000/limits", `{"rpm":1}`},
	{"master", "DELETE", "/admin/keys/{lastKey}", ""},
	{"master", "GET", "/admin/keys?include_revoked=true&team=lab-nlp", ""},
	{"master", "DELETE", "/admin/keys/key_0000000000000000", ""},
	{"member", "DELETE", "/admin/keys/{keyA}", ""},

	// budgets and increases
	{"master", "GET", "/admin/budgets", ""},
	{"oadmin", "GET", "/admin/budgets", ""},
	{"master", "PUT", "/admin/budgets", `{"kind":"org","name":"etabA","period":"day","max_cost":50,"soft_limit":0.8}`},
	{"master", "PUT", "/admin/budgets", `{"kind":"team","name":"lab-nlp","model":"m","period":"week","max_cost":7}`},
	{"master", "PUT", "/admin/budgets", `{"kind":"galaxy","name":"x","period":"day","max_cost":1}`},
	{"master", "PUT", "/admin/budgets", `{"kind":"team","name":"lab-nlp","period":"day"}`},
	{"master", "POST", "/admin/budgets/increase", `{"kind":"org","name":"etabA","amount":5,"expires_at":"{tomorrow}"}`},
	{"master", "POST", "/admin/budgets/increase", `{"kind":"org","name":"etabA","amount":5,"expires_at":"2001-01-01T00:00:00Z"}`},
	{"master", "GET", "/admin/budgets", ""},
	{"master", "GET", "/admin/budgets?kind=org&name=etabA", ""},
	{"master", "DELETE", "/admin/budgets?kind=team&name=lab-nlp&model=m", ""},
	{"master", "DELETE", "/admin/budgets?kind=team&name=lab-nlp&model=m", ""},
	{"tadmin", "PUT", "/admin/budgets", `{"kind":"org","name":"etabA","period":"day","max_cost":1}`},

	// runtime routing
	{"master", "GET", "/admin/upstreams", ""},
	{"master", "POST", "/admin/models/m/upstreams", `{"name":"rt1","base_url":"http://127.0.0.1:20001"}`},
	{"master", "POST", "/admin/models/m/upstreams", `{"name":"rt1","base_url":"http://127.0.0.1:20001"}`},
	{"master", "POST", "/admin/models/m/upstreams", `{"name":"rt2","base_url":"ftp://x"}`},
	{"master", "PUT", "/admin/models/m/upstreams/rt2", `{"base_url":"http://127.0.0.1:20002"}`},
	{"master", "PUT", "/admin/models/m/upstreams/rt2", `{"base_url":"http://127.0.0.1:20003"}`},
	{"master", "GET", "/admin/models/m/upstreams", ""},
	{"master", "GET", "/admin/upstreams?model=m", ""},
	{"master", "GET", "/admin/models/nosuch/upstreams", ""},
	{"master", "DELETE", "/admin/models/m/upstreams/rt1", ""},
	{"master", "DELETE", "/admin/models/m/upstreams/rt1", ""},
	{"master", "GET", "/admin/aliases", ""},
	{"master", "PUT", "/admin/aliases/openai/gpt-4o", `{"model":"m"}`},
	{"master", "PUT", "/admin/aliases/openai/gpt-4o", `{"model":"batchm"}`},
	{"master", "PUT", "/admin/aliases/m", `{"model":"batchm"}`},
	{"master", "GET", "/admin/aliases", ""},
	{"master", "DELETE", "/admin/aliases/openai/gpt-4o", ""},
	{"tadmin", "PUT", "/admin/aliases/x", `{"model":"m"}`},
	{"pview", "GET", "/admin/upstreams", ""},

	// fair share, sync runs
	{"master", "GET", "/admin/fairshare", ""},
	{"oadmin", "GET", "/admin/fairshare", ""},
	{"teamviewer", "GET", "/admin/fairshare", ""},
	{"master", "GET", "/admin/fairshare?pool=p", ""},
	{"master", "GET", "/admin/sync", ""},
	{"master", "GET", "/admin/sync?limit=1", ""},
	{"master", "GET", "/admin/sync?limit=0", ""},
	{"oadmin", "GET", "/admin/sync", ""},

	// spend
	{"master", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01", ""},
	{"master", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&group_by=model", ""},
	{"master", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&group_by=org,team,project&format=csv", ""},
	{"master", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&group_by=team&format=parsable2", ""},
	{"master", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&format=xml", ""},
	{"master", "GET", "/admin/spend?from=2100-01-01&to=2000-01-01", ""},
	{"master", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&group_by=galaxy", ""},
	{"master", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&grup_by=team", ""},
	{"oadmin", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01", ""},
	{"oadmin", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&format=xml", ""},
	{"member", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&group_by=key", ""},
	{"nobody", "GET", "/admin/spend?from=2000-01-01&to=2100-01-01", ""},
	{"master", "GET", "/admin/usage.csv?from=2000-01-01&to=2100-01-01", ""},
	{"tadmin", "GET", "/admin/usage.csv?from=2000-01-01&to=2100-01-01", ""},
	{"master", "GET", "/admin/usage.csv?from=2000-01-01&to=2100-01-01&format=json", ""},

	// the audit trail of all the above
	{"master", "GET", "/admin/audit?limit=40", ""},
	{"oadmin", "GET", "/admin/audit?limit=5", ""},
	{"master", "GET", "/admin/audit?actor=member", ""},
	{"master", "GET", "/admin/audit?from=yesterday", ""},
	{"member", "GET", "/admin/audit", ""},
}

// Normalisation of what is truly variable in a body or path, in this
// order (the rest is compared byte for byte):
//
//   - a key or token secret (llmf-/llma- and 64 hex digits) → <secret>;
//   - its hint (llmf-/llma-, 4 hex digits and "…") → llmf-<hint>…;
//   - an id "key_"/"tok_" and 16 hex digits → key_<n>/tok_<n>, numbered
//     in order of first appearance in the script (so one id keeps one
//     name throughout); the all-zero ids of the script stay;
//   - an RFC 3339 time → <time>;
//   - a loopback port (127.0.0.1:NNNNN, the test upstream) → 127.0.0.1:<port>,
//     except the runtime upstreams' fixed 2000x ports of the script.
var (
	goldenSecret = regexp.MustCompile(`\bllm[af]-[0-9a-f]{64}\b`)
	goldenHint   = regexp.MustCompile(`\b(llm[af]-)[0-9a-f]{4}…`)
	goldenID     = regexp.MustCompile(`\b(key|tok)_[0-9a-f]{16}\b`)
	goldenTime   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	goldenPort   = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)
)

type goldenNames map[string]string

func (n goldenNames) normalise(s string) string {
	s = goldenSecret.ReplaceAllString(s, "<secret>")
	s = goldenHint.ReplaceAllString(s, "$1<hint>…")
	s = goldenID.ReplaceAllStringFunc(s, func(id string) string {
		if strings.HasSuffix(id, "_0000000000000000") {
			return id
		}
		if v, ok := n[id]; ok {
			return v
		}
		v := id[:4] + "<" + strconv.Itoa(len(n)+1) + ">"
		n[id] = v
		return v
	})
	s = goldenTime.ReplaceAllString(s, "<time>")
	return goldenPort.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, "127.0.0.1:2000") && len(m) == len("127.0.0.1:20001") {
			return m
		}
		return "127.0.0.1:<port>"
	})
}

// TestAdminGolden runs goldenScript against a gateway on a real store
// over HTTP and compares each answer (status, content type, body) with
// testdata/admin-golden: calls.txt lists the calls and their status, one
// file per call holds the body, normalised as above. -update rewrites
// them. The admin API's paths and bodies are a contract (the CLI, the
// console, scripts): a difference here is a breaking change.
func TestAdminGolden(t *testing.T) {
	e := newAdminEnv(t, "", func(o *envOptions) { o.SyncHistory = o.Admin.(*store.SQLite) })
	e.tokens["bad"] = "llma-" + strings.Repeat("0", 64)
	if _, err := e.db.SaveSync(t.Context(), nil, llmflow.SyncRun{
		Started: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), Finished: time.Date(2026, 11, 30, 3, 0, 2, 0, time.UTC),
		Source: "sacctmgr", DryRun: true, Outcome: "applied", Created: 3, SharesChanged: 1, Unchanged: 7,
	}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("testdata", "admin-golden")
	if *updateGolden {
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := goldenNames{}
	var calls strings.Builder
	calls.WriteString("# the admin API golden script (admin_golden_test.go): n, call, status, content type\n")
	vars := map[string]string{"{keyA}": e.keyA.ID, "{keyOwn}": e.keyOwn.ID, "{keyB}": e.keyB.ID}
	// the fixture's keys get the first names
	for _, id := range []string{e.keyA.ID, e.keyOwn.ID, e.keyB.ID} {
		names.normalise(id)
	}
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Truncate(time.Second).Format(time.RFC3339)
	for i, c := range goldenScript {
		path, body := c.path, strings.ReplaceAll(c.body, "{tomorrow}", tomorrow)
		for k, v := range vars {
			path = strings.ReplaceAll(path, k, v)
		}
		req, err := http.NewRequest(c.method, e.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tok := e.tokens[c.as]; tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`"id":"(key_[0-9a-f]{16})","key":"llmf-`).FindSubmatch(b); m != nil {
			vars["{lastKey}"] = string(m[1])
		}
		if m := regexp.MustCompile(`"id":"(tok_[0-9a-f]{16})","token":"llma-`).FindSubmatch(b); m != nil {
			vars["{lastToken}"] = string(m[1])
		}
		as := c.as
		if as == "" {
			as = "(none)"
		}
		ext := "json"
		ct := resp.Header.Get("Content-Type")
		switch {
		case strings.HasPrefix(ct, "text/csv"):
			ext = "csv"
		case strings.HasPrefix(ct, "text/plain"):
			ext = "txt"
		}
		file := fmt.Sprintf("%03d.%s", i+1, ext)
		fmt.Fprintf(&calls, "%03d %s %s as %s", i+1, c.method, names.normalise(path), as)
		if c.body != "" {
			fmt.Fprintf(&calls, " %s", c.body)
		}
		fmt.Fprintf(&calls, "\n    → %d %s %s\n", resp.StatusCode, ct, file)
		got := names.normalise(string(b))
		if *updateGolden {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Errorf("%03d %s %s: %v (run with -update)", i+1, c.method, c.path, err)
			continue
		}
		if got != string(want) {
			t.Errorf("%03d %s %s as %s: body differs from %s\n got: %s\nwant: %s", i+1, c.method, c.path, as, file, got, want)
		}
	}
	if *updateGolden {
		if err := os.WriteFile(filepath.Join(dir, "calls.txt"), []byte(calls.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(filepath.Join(dir, "calls.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if calls.String() != string(want) {
		t.Errorf("calls or statuses differ from calls.txt:\n got:\n%s\nwant:\n%s", calls.String(), want)
	}
}
