package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
)

// fakeSessions stands in for the console's sessions: the header
// X-Test-Session names the session's user ("user:alice"), its token
// ("token:<secret>") or an error ("bad").
type fakeSessions struct{}

func (fakeSessions) AdminSession(r *http.Request) (user, token string, err error) {
	s := r.Header.Get("X-Test-Session")
	switch {
	case s == "bad":
		return "", "", llmflow.Errorf(llmflow.EUNAUTHORIZED, "console session expired")
	case strings.HasPrefix(s, "user:"):
		return strings.TrimPrefix(s, "user:"), "", nil
	case strings.HasPrefix(s, "token:"):
		return "", strings.TrimPrefix(s, "token:"), nil
	}
	return "", "", nil
}

// sessionDo sends a request with session s and no Authorization header.
func (e *adminEnv) sessionDo(t *testing.T, method, path, s, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if s != "" {
		req.Header.Set("X-Test-Session", s)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSessionPrincipals: a console session is a principal like a token:
// a user signed in through the identity provider gets their stored roles
// (a member lists their own keys, not the team's), a session holding an
// admin token is that token, an unknown or disabled user and a refused
// session are 401; an Authorization header wins over a session.
func TestSessionPrincipals(t *testing.T) {
	e := newAdminEnv(t, "", func(o *envOptions) { o.Sessions = fakeSessions{} })
	for _, tc := range []struct {
		name, session, path string
		want                int
		has, hasNot         string
	}{
		{"sso member whoami", "user:member", "/admin/whoami", 200, `"name":"member"`, ""},
		{"sso member keys", "user:member", "/admin/keys", 200, e.keyOwn.ID, e.keyA.ID},
		{"sso org admin keys", "user:oadmin", "/admin/keys", 200, e.keyA.ID, e.keyB.ID},
		{"token session", "token:" + e.tokens["tadmin"], "/admin/whoami", 200, `"name":"tadmin"`, ""},
		{"master key session", "token:" + e.tokens["master"], "/admin/whoami", 200, `"kind":"master_key"`, ""},
		{"bad token session", "token:llma-nope", "/admin/whoami", 401, "", ""},
		{"unknown sso user", "user:mallory", "/admin/whoami", 401, "no llmflow user", ""},
		{"refused session", "bad", "/admin/whoami", 401, "expired", ""},
		{"no session", "", "/admin/whoami", 401, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.sessionDo(t, "GET", tc.path, tc.session, "")
			if code != tc.want || !strings.Contains(body, tc.has) || (tc.hasNot != "" && strings.Contains(body, tc.hasNot)) {
				t.Errorf("%d %s, want %d with %q without %q", code, body, tc.want, tc.has, tc.hasNot)
			}
		})
	}
	// a disabled user's session stops at once
	e.must(t, "DELETE", "/admin/users/member", "master", "", 200)
	if code, body := e.sessionDo(t, "GET", "/admin/whoami", "user:member", ""); code != 401 {
		t.Errorf("disabled user: %d %s", code, body)
	}
}

// TestSelfServiceKeys: a member signed in through the identity provider
// creates and revokes their own keys only with self_service { keys =
// true }; max_keys caps the active keys a member owns, tokens included;
// a team admin is never capped.
func TestSelfServiceKeys(t *testing.T) {
	for _, tc := range []struct {
		name    string
		self    SelfService
		as      string // session or token principal
		creates []int  // statuses of successive creations
		revoke  int
	}{
		{"sso, self-service off", SelfService{}, "user:member", []int{403}, 403},
		{"sso, self-service on", SelfService{Keys: true}, "user:member", []int{201, 201, 201}, 200},
		{"sso, capped at 2 (one owned already)", SelfService{Keys: true, MaxKeys: 2}, "user:member", []int{201, 403}, 200},
		{"token, self-service off", SelfService{}, "token:member", []int{201}, 200},
		{"token, capped at 1", SelfService{MaxKeys: 1}, "token:member", []int{403}, 200},
		{"sso team admin, capped", SelfService{MaxKeys: 1}, "user:tadmin", []int{201, 201}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAdminEnv(t, "", func(o *envOptions) { o.Sessions, o.SelfService = fakeSessions{}, tc.self })
			s := tc.as
			if p, ok := strings.CutPrefix(s, "token:"); ok {
				s = "token:" + e.tokens[p]
			}
			for i, want := range tc.creates {
				code, body := e.sessionDo(t, "POST", "/admin/keys", s, `{"team":"lab-nlp","name":"mine"}`)
				if code != want {
					t.Fatalf("creation %d: %d %s, want %d", i, code, body, want)
				}
			}
			code, body := e.sessionDo(t, "DELETE", "/admin/keys/"+e.keyOwn.ID, s, "")
			if code != tc.revoke {
				t.Errorf("revoke own key: %d %s, want %d", code, body, tc.revoke)
			}
		})
	}
}

// TestSelf: GET /admin/self shows a member the budgets they draw on
// (their team's, their organisation's, their own keys'), not another
// team's; a proxy reader gets every budget.
func TestSelf(t *testing.T) {
	e := newAdminEnv(t, "", func(o *envOptions) { o.Sessions, o.SelfService = fakeSessions{}, SelfService{Keys: true, MaxKeys: 3} })
	e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"org","name":"etabA","period":"month","max_cost":1000}`, 200)
	e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"key","name":"`+e.keyOwn.ID+`","period":"day","max_cost":2}`, 200)
	e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"key","name":"`+e.keyA.ID+`","period":"day","max_cost":3}`, 200)
	e.must(t, "PUT", "/admin/budgets", "master", `{"kind":"project","name":"nlp-p1","period":"day","max_cost":4}`, 200)
	for _, tc := range []struct {
		as   string
		want []string // kind/name of the budgets shown
	}{
		{"user:member", []string{"key/" + e.keyOwn.ID, "org/etabA", "project/nlp-p1", "team/lab-nlp"}},
		{"token:" + e.tokens["pview"], []string{"key/" + e.keyA.ID, "key/" + e.keyOwn.ID, "org/etabA", "project/nlp-p1", "team/lab-chem", "team/lab-nlp"}},
		{"user:nobody", []string{}},
	} {
		code, body := e.sessionDo(t, "GET", "/admin/self", tc.as, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", tc.as, code, body)
		}
		var s adminapi.Self
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, b := range s.Budgets {
			got = append(got, b.Kind+"/"+b.Name)
			if b.Remaining != b.EffectiveLimit-b.Spent-b.Held {
				t.Errorf("%s: budget %+v: remaining", tc.as, b)
			}
		}
		slices.Sort(tc.want) // the answer's order: kind, name, model
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: budgets %v, want %v", tc.as, got, tc.want)
		}
		if !s.SelfServiceKeys || s.MaxKeys != 3 {
			t.Errorf("%s: self-service %v %d", tc.as, s.SelfServiceKeys, s.MaxKeys)
		}
	}
}
