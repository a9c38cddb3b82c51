package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// matrixRow is one admin route of the route × role matrix: how to call it
// in scope (etabA, lab-nlp, or the caller themselves) and out of scope
// (etabB, lab-chem, another user), and who may.
type matrixRow struct {
	// call returns the path and body of a call by principal p, in or out
	// of scope; case is unique per call (for names of things created).
	// It may prepare the target with the master key.
	call func(t *testing.T, e *adminEnv, p string, in bool, c int) (path, body string)
	// in and out list the principals allowed in and out of scope; the
	// others get 403. A listing (listing true) answers 200 to everyone,
	// filtered.
	in, out []string
	ok      int // status when allowed
	listing bool
	// shows says what a listing must show whom (so that a listing that
	// filters everything away fails): principal → substrings; proxy-wide
	// principals must show oadmin's and the out-of-scope outMark too.
	shows   func(e *adminEnv) shown
	outMark func(e *adminEnv) string
}

var (
	writersOrg  = []string{"master", "padmin", "oadmin"}
	writersTeam = []string{"master", "padmin", "oadmin", "tadmin"}
	readersTeam = []string{"master", "padmin", "pview", "oadmin", "tadmin", "orgviewer", "teamviewer"}
	proxyAdmins = []string{"master", "padmin"}
	proxyRead   = []string{"master", "padmin", "pview"}
)

// scoped returns in-scope or out-of-scope names.
func scoped(in bool, a, b string) string {
	if in {
		return a
	}
	return b
}

func fixed(path, body string) func(*testing.T, *adminEnv, string, bool, int) (string, string) {
	return func(*testing.T, *adminEnv, string, bool, int) (string, string) { return path, body }
}

// self is the user a user route targets: the caller in scope (the first
// user for the master key, which is none), another user out of scope.
func self(p string, in bool) string {
	if !in {
		return "targetB"
	}
	if p == "master" {
		return "targetA"
	}
	return p
}

var allUsers = principals

var matrix = map[string]matrixRow{
	"GET /admin/whoami": {call: fixed("/admin/whoami", ""), in: allUsers, out: allUsers, ok: 200},
	"GET /admin/self":   {call: fixed("/admin/self", ""), in: allUsers, out: allUsers, ok: 200},

	"GET /admin/users": {call: fixed("/admin/users", ""), ok: 200, listing: true,
		shows: func(e *adminEnv) shown {
			return each(readersTeam, `"targetA"`).and("member", `"name":"member"`).and("nobody", `"name":"nobody"`)
		}, outMark: mark(`"targetB"`)},
	"POST /admin/users": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/users", fmt.Sprintf(`{"name":"u%d","org":%q}`, c, scoped(in, "etabA", "etabB"))
	}, in: writersOrg, out: proxyAdmins, ok: 201},
	"DELETE /admin/users/{name}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		name := fmt.Sprintf("d%d", c)
		e.must(t, "POST", "/admin/users", "master", fmt.Sprintf(`{"name":%q,"org":%q}`, name, scoped(in, "etabA", "etabB")), 201)
		return "/admin/users/" + name, ""
	}, in: proxyAdmins, out: proxyAdmins, ok: 200},

	"GET /admin/users/{name}/tokens": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/users/" + self(p, in) + "/tokens", ""
	}, in: allUsers, out: proxyAdmins, ok: 200},
	"POST /admin/users/{name}/tokens": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/users/" + self(p, in) + "/tokens", `{"name":"ci"}`
	}, in: allUsers, out: proxyAdmins, ok: 201},
	"DELETE /admin/users/{name}/tokens/{id}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		u := self(p, in)
		var tok tokenView
		json.Unmarshal([]byte(e.must(t, "POST", "/admin/users/"+u+"/tokens", "master", `{}`, 201)), &tok)
		return "/admin/users/" + u + "/tokens/" + tok.ID, ""
	}, in: allUsers, out: proxyAdmins, ok: 200},

	"GET /admin/users/{name}/roles": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/users/" + scoped(in, "targetA", "targetB") + "/roles", ""
	}, in: readersTeam, out: proxyRead, ok: 200},
	"PUT /admin/users/{name}/roles": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/users/targetA/roles", fmt.Sprintf(`{"role":"viewer","team":%q}`, scoped(in, "lab-nlp", "lab-chem"))
	}, in: writersTeam, out: proxyAdmins, ok: 200},
	"DELETE /admin/users/{name}/roles": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		team := scoped(in, "lab-nlp", "lab-chem")
		e.must(t, "PUT", "/admin/users/targetA/roles", "master", `{"role":"viewer","team":"`+team+`"}`, 200)
		return "/admin/users/targetA/roles?role=viewer&team=" + team, ""
	}, in: writersTeam, out: proxyAdmins, ok: 200},

	"GET /admin/orgs": {call: fixed("/admin/orgs", ""), ok: 200, listing: true,
		shows:   func(e *adminEnv) shown { return each(append(slices.Clone(readersTeam), "member"), `"etabA"`) },
		outMark: mark(`"etabB"`)},
	"POST /admin/orgs": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/orgs", fmt.Sprintf(`{"name":"org%d"}`, c)
	}, in: proxyAdmins, out: proxyAdmins, ok: 201},
	"DELETE /admin/orgs/{name}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/orgs/" + scoped(in, "etabA", "etabB"), ""
	}, in: proxyAdmins, out: proxyAdmins, ok: 200},

	"POST /admin/orgs/{name}/enable": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		name := fmt.Sprintf("eo%d", c)
		e.must(t, "POST", "/admin/orgs", "master", `{"name":"`+name+`"}`, 201)
		e.must(t, "DELETE", "/admin/orgs/"+name, "master", "", 200)
		return "/admin/orgs/" + name + "/enable", ""
	}, in: proxyAdmins, out: proxyAdmins, ok: 200},

	"PUT /admin/orgs/{name}/share": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		name := fmt.Sprintf("so%d", c)
		e.must(t, "POST", "/admin/orgs", "master", `{"name":"`+name+`"}`, 201)
		return "/admin/orgs/" + name + "/share", `{"share":2}`
	}, in: proxyAdmins, out: proxyAdmins, ok: 200},

	"GET /admin/teams": {call: fixed("/admin/teams", ""), ok: 200, listing: true,
		shows:   func(e *adminEnv) shown { return each(append(slices.Clone(readersTeam), "member"), `"lab-nlp"`) },
		outMark: mark(`"lab-chem"`)},
	"POST /admin/teams": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/teams", fmt.Sprintf(`{"name":"team%d","org":%q}`, c, scoped(in, "etabA", "etabB"))
	}, in: writersOrg, out: proxyAdmins, ok: 201},
	"DELETE /admin/teams/{name}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		name := fmt.Sprintf("dt%d", c)
		e.must(t, "POST", "/admin/teams", "master", fmt.Sprintf(`{"name":%q,"org":%q}`, name, scoped(in, "etabA", "etabB")), 201)
		return "/admin/teams/" + name, ""
	}, in: writersOrg, out: proxyAdmins, ok: 200},

	"POST /admin/teams/{name}/enable": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		name := fmt.Sprintf("et%d", c)
		e.must(t, "POST", "/admin/teams", "master", fmt.Sprintf(`{"name":%q,"org":%q}`, name, scoped(in, "etabA", "etabB")), 201)
		e.must(t, "DELETE", "/admin/teams/"+name, "master", "", 200)
		return "/admin/teams/" + name + "/enable", ""
	}, in: writersOrg, out: proxyAdmins, ok: 200},

	"PUT /admin/teams/{name}/share": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		name := fmt.Sprintf("st%d", c)
		e.must(t, "POST", "/admin/teams", "master", fmt.Sprintf(`{"name":%q,"org":%q}`, name, scoped(in, "etabA", "etabB")), 201)
		return "/admin/teams/" + name + "/share", `{"share":0.01}` // a fraction: the configured teams' rule
	}, in: writersOrg, out: proxyAdmins, ok: 200},

	"GET /admin/teams/{team}/projects": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/teams/" + scoped(in, "lab-nlp", "lab-chem") + "/projects", ""
	}, in: readersTeam, out: proxyRead, ok: 200},
	"POST /admin/teams/{team}/projects": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/teams/" + scoped(in, "lab-nlp", "lab-chem") + "/projects", fmt.Sprintf(`{"name":"proj%d"}`, c)
	}, in: writersTeam, out: proxyAdmins, ok: 201},
	"DELETE /admin/teams/{team}/projects/{name}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		team, name := scoped(in, "lab-nlp", "lab-chem"), fmt.Sprintf("dp%d", c)
		e.must(t, "POST", "/admin/teams/"+team+"/projects", "master", `{"name":"`+name+`"}`, 201)
		return "/admin/teams/" + team + "/projects/" + name, ""
	}, in: writersTeam, out: proxyAdmins, ok: 200},

	"POST /admin/teams/{team}/projects/{name}/enable": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		team, name := scoped(in, "lab-nlp", "lab-chem"), fmt.Sprintf("ep%d", c)
		e.must(t, "POST", "/admin/teams/"+team+"/projects", "master", `{"name":"`+name+`"}`, 201)
		e.must(t, "DELETE", "/admin/teams/"+team+"/projects/"+name, "master", "", 200)
		return "/admin/teams/" + team + "/projects/" + name + "/enable", ""
	}, in: writersTeam, out: proxyAdmins, ok: 200},

	"PUT /admin/teams/{team}/projects/{name}/share": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		team, name := scoped(in, "lab-nlp", "lab-chem"), fmt.Sprintf("sp%d", c)
		e.must(t, "POST", "/admin/teams/"+team+"/projects", "master", `{"name":"`+name+`"}`, 201)
		return "/admin/teams/" + team + "/projects/" + name + "/share", `{"share":2}`
	}, in: writersTeam, out: proxyAdmins, ok: 200},

	"GET /admin/teams/{team}/models": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/teams/" + scoped(in, "lab-nlp", "lab-chem") + "/models", ""
	}, in: append(slices.Clone(readersTeam), "member"), out: proxyRead, ok: 200},
	"PUT /admin/teams/{team}/models": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/teams/" + scoped(in, "lab-nlp", "lab-chem") + "/models", `{"models":["m"]}`
	}, in: writersTeam, out: proxyAdmins, ok: 200},

	"GET /admin/keys": {call: fixed("/admin/keys", ""), ok: 200, listing: true,
		shows:   func(e *adminEnv) shown { return each(readersTeam, e.keyA.ID, e.keyOwn.ID).and("member", e.keyOwn.ID) },
		outMark: func(e *adminEnv) string { return e.keyB.ID }},
	"POST /admin/keys": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/keys", fmt.Sprintf(`{"team":%q,"name":"k%d"}`, scoped(in, "lab-nlp", "lab-chem"), c)
	}, in: append(slices.Clone(writersTeam), "member"), out: proxyAdmins, ok: 201},
	"DELETE /admin/keys/{id}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		// a key the member owns, in or out of the member's team
		k := e.newKeyOf(t, fmt.Sprintf(`{"team":%q,"name":"r%d","owner":"member"}`, scoped(in, "lab-nlp", "lab-chem"), c))
		return "/admin/keys/" + k.ID, ""
	}, in: append(slices.Clone(writersTeam), "member"), out: proxyAdmins, ok: 200},

	"GET /admin/fairshare": {call: fixed("/admin/fairshare", ""), ok: 200, listing: true,
		shows: func(e *adminEnv) shown {
			return each([]string{"oadmin", "orgviewer"}, `"etabA"`, `"lab-nlp"`).and("tadmin", `"lab-nlp"`).and("teamviewer", `"lab-nlp"`)
		}, outMark: mark(`"lab-chem"`)},
	"GET /admin/sync": {call: fixed("/admin/sync", ""), in: proxyRead, out: proxyRead, ok: 200},
	"GET /admin/spend": {call: fixed("/admin/spend?from=2000-01-01&to=2100-01-01&group_by=org,team,project,key,owner", ""),
		ok: 200, listing: true,
		shows:   func(e *adminEnv) shown { return each(readersTeam, e.keyA.ID, e.keyOwn.ID).and("member", e.keyOwn.ID) },
		outMark: func(e *adminEnv) string { return e.keyB.ID }},
	"GET /admin/usage.csv": {call: fixed("/admin/usage.csv?from=2000-01-01&to=2100-01-01", ""), ok: 200, listing: true,
		shows:   func(e *adminEnv) shown { return each(append(slices.Clone(readersTeam), "member"), "lab-nlp,") },
		outMark: mark("lab-chem,")},
	"GET /admin/audit": {call: fixed("/admin/audit?limit=10000", ""), ok: 200, listing: true,
		shows:   func(e *adminEnv) shown { return each(readersTeam, "project nlp-p1") },
		outMark: mark("project chem-p1")},

	// budgets (budgets.go): who may set each kind (authz.BudgetAction) — a team's
	// budget by its organisation's admins and above, not by the team
	// admin (authz.BudgetTeam)
	"GET /admin/budgets": {call: fixed("/admin/budgets", ""), ok: 200, listing: true,
		shows:   func(e *adminEnv) shown { return each(readersTeam, `"name":"lab-nlp"`) },
		outMark: mark(`"name":"lab-chem"`)},
	"PUT /admin/budgets": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/budgets", fmt.Sprintf(`{"kind":"team","name":%q,"period":"month","max_cost":%d}`, scoped(in, "lab-nlp", "lab-chem"), c)
	}, in: writersOrg, out: proxyAdmins, ok: 200},
	"DELETE /admin/budgets": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		team := scoped(in, "lab-nlp", "lab-chem")
		e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"team","name":"`+team+`","period":"day","max_cost":1}`, 200)
		return "/admin/budgets?kind=team&name=" + team, ""
	}, in: writersOrg, out: proxyAdmins, ok: 200},
	"POST /admin/budgets/increase": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		team := scoped(in, "lab-nlp", "lab-chem")
		e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"team","name":"`+team+`","period":"day","max_cost":1}`, 200)
		return "/admin/budgets/increase", fmt.Sprintf(`{"kind":"team","name":%q,"amount":1,"expires_at":%q}`,
			team, time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339))
	}, in: writersOrg, out: proxyAdmins, ok: 201},
	"GET /admin/keys/{id}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		// a key the member owns, in or out of the member's team
		k := e.newKeyOf(t, fmt.Sprintf(`{"team":%q,"name":"g%d","owner":"member"}`, scoped(in, "lab-nlp", "lab-chem"), c))
		return "/admin/keys/" + k.ID, ""
	}, in: append(slices.Clone(readersTeam), "member"), out: proxyRead, ok: 200},
	"POST /admin/keys/{id}/rotate": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		k := e.newKeyOf(t, fmt.Sprintf(`{"team":%q,"name":"o%d","owner":"member"}`, scoped(in, "lab-nlp", "lab-chem"), c))
		return "/admin/keys/" + k.ID + "/rotate", `{"grace":"10m"}`
	}, in: append(slices.Clone(writersTeam), "member"), out: proxyAdmins, ok: 200},
	"PUT /admin/keys/{id}/limits": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		k := e.newKeyOf(t, fmt.Sprintf(`{"team":%q,"name":"l%d","owner":"member"}`, scoped(in, "lab-nlp", "lab-chem"), c))
		return "/admin/keys/" + k.ID + "/limits", `{"rpm":10,"tpm":1000,"max_inflight":2}`
	}, in: writersTeam, out: proxyAdmins, ok: 200},
	"PUT /admin/keys/{id}/active": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		k := e.newKeyOf(t, fmt.Sprintf(`{"team":%q,"name":"a%d","owner":"member"}`, scoped(in, "lab-nlp", "lab-chem"), c))
		return "/admin/keys/" + k.ID + "/active", `{"active":false}`
	}, in: writersTeam, out: proxyAdmins, ok: 200},

	// runtime routing is proxy-wide (admin_upstreams.go): proxy admins
	// write, proxy readers read, in and out of scope alike
	"GET /admin/upstreams":                {call: fixed("/admin/upstreams", ""), in: proxyRead, out: proxyRead, ok: 200},
	"GET /admin/models/{model}/upstreams": {call: fixed("/admin/models/m/upstreams", ""), in: proxyRead, out: proxyRead, ok: 200},
	"POST /admin/models/{model}/upstreams": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return "/admin/models/m/upstreams", fmt.Sprintf(`{"name":"rt%d","base_url":"http://127.0.0.1:%d"}`, c, 20000+c)
	}, in: proxyAdmins, out: proxyAdmins, ok: 201},
	"PUT /admin/models/{model}/upstreams/{name}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return fmt.Sprintf("/admin/models/m/upstreams/rt%d", c), fmt.Sprintf(`{"base_url":"http://127.0.0.1:%d"}`, 20000+c)
	}, in: proxyAdmins, out: proxyAdmins, ok: 201},
	"DELETE /admin/models/{model}/upstreams/{name}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		path := fmt.Sprintf("/admin/models/m/upstreams/rt%d", c)
		e.must(t, "PUT", path, "master", fmt.Sprintf(`{"base_url":"http://127.0.0.1:%d"}`, 20000+c), 201)
		return path, ""
	}, in: proxyAdmins, out: proxyAdmins, ok: 200},
	"GET /admin/aliases": {call: fixed("/admin/aliases", ""), in: proxyRead, out: proxyRead, ok: 200},
	"PUT /admin/aliases/{name...}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		return fmt.Sprintf("/admin/aliases/al%d", c), `{"model":"m"}`
	}, in: proxyAdmins, out: proxyAdmins, ok: 201},
	"DELETE /admin/aliases/{name...}": {call: func(t *testing.T, e *adminEnv, p string, in bool, c int) (string, string) {
		path := fmt.Sprintf("/admin/aliases/al%d", c)
		e.must(t, "PUT", path, "master", `{"model":"m"}`, 201)
		return path, ""
	}, in: proxyAdmins, out: proxyAdmins, ok: 200},
}

// TestAdminRouteRoleMatrix calls every admin route of the routes table
// as every principal, in scope and out of scope, and checks the status;
// listings answer everyone and must not show another scope's names, keys
// or spend. A route of the table without a row fails the test.
func TestAdminRouteRoleMatrix(t *testing.T) {
	var routes []string
	for _, rt := range Routes() {
		r := rt.Method + " " + rt.Pattern
		routes = append(routes, r)
		if _, ok := matrix[r]; !ok {
			t.Errorf("admin route %s has no row in the route × role matrix (matrix_test.go)", r)
		}
	}
	for r := range matrix {
		if !slices.Contains(routes, r) {
			t.Errorf("matrix row %s is not a registered route", r)
		}
	}
	c := 0
	for _, route := range routes {
		row, ok := matrix[route]
		if !ok {
			continue
		}
		method, _, _ := strings.Cut(route, " ")
		t.Run(route, func(t *testing.T) {
			// a fresh gateway per route: writes of one row (an
			// organisation disabled) must not change another's answers
			e := newAdminEnv(t, "")
			for _, in := range []bool{true, false} {
				allowed := row.out
				if in {
					allowed = row.in
				}
				for _, p := range principals {
					c++
					path, body := row.call(t, e, p, in, c)
					code, b := e.do(t, method, path, e.tokens[p], body)
					want := http.StatusForbidden
					if row.listing || slices.Contains(allowed, p) {
						want = row.ok
					}
					if code != want {
						t.Errorf("%s %s as %s (in scope %v): %d %s, want %d", method, path, p, in, code, b, want)
					}
					if row.listing && !proxyWide[p] {
						checkNoLeak(t, e, route, p, b)
					}
					if row.shows != nil && code == row.ok {
						want := row.shows(e)[p]
						if proxyWide[p] {
							want = append(slices.Clone(row.shows(e)["oadmin"]), row.outMark(e))
						}
						for _, w := range want {
							if !strings.Contains(b, w) {
								t.Errorf("%s as %s does not show %q: %s", route, p, w, b)
							}
						}
					}
				}
			}
		})
	}
}

// shown maps principals to what a listing must show them.
type shown map[string][]string

func each(ps []string, ss ...string) shown {
	m := shown{}
	for _, p := range ps {
		m[p] = ss
	}
	return m
}

func (m shown) and(p string, ss ...string) shown {
	m[p] = append(m[p], ss...)
	return m
}

func mark(s string) func(*adminEnv) string { return func(*adminEnv) string { return s } }

// checkNoLeak fails when a scoped principal's listing shows anything of
// the other organisation (etabB: its name, team, project, key, user) or,
// for a member, a key of their team they do not own.
func checkNoLeak(t *testing.T, e *adminEnv, route, p, body string) {
	t.Helper()
	leaks := []string{"etabB", "lab-chem", "chem-p1", e.keyB.ID, "targetB"}
	if p == "member" || p == "nobody" {
		leaks = append(leaks, e.keyA.ID)
	}
	if p == "nobody" {
		leaks = append(leaks, "lab-nlp", e.keyOwn.ID)
	}
	for _, s := range leaks {
		if strings.Contains(body, s) {
			t.Errorf("%s as %s shows %q (out of scope): %s", route, p, s, body)
		}
	}
}

// TestAdminSpendFiltered checks the numbers: an organisation's admin
// sees its organisation's requests only, a member their own keys', a user
// without a role nothing, a proxy viewer all.
func TestAdminSpendFiltered(t *testing.T) {
	e := newAdminEnv(t, "")
	total := func(p, group string) (n int64, rows int) {
		t.Helper()
		b := e.must(t, "GET", "/admin/spend?from=2000-01-01&to=2100-01-01&group_by="+group, p, "", 200)
		var rep struct {
			Data []struct {
				Requests int64 `json:"requests"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(b), &rep); err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Data {
			n += r.Requests
		}
		return n, len(rep.Data)
	}
	for _, tc := range []struct {
		p     string
		group string
		want  int64
		rows  int
	}{
		{"pview", "org", 7, 2},
		{"padmin", "model", 7, 1},
		{"oadmin", "org", 3, 1},
		{"oadmin", "model", 3, 1}, // grouped by something else than the scope: still only etabA's
		{"tadmin", "key", 3, 2},
		{"orgviewer", "team", 3, 1},
		{"teamviewer", "pool", 3, 1},
		{"member", "key", 2, 1},
		{"member", "model", 2, 1},
		{"nobody", "org", 0, 0},
	} {
		if n, rows := total(tc.p, tc.group); n != tc.want || rows != tc.rows {
			t.Errorf("%s group_by=%s: %d requests in %d rows, want %d in %d", tc.p, tc.group, n, rows, tc.want, tc.rows)
		}
	}
}
