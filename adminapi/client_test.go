package adminapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
)

const testToken = "llma-" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// seen is one request as the server saw it.
type seen struct {
	method, path, query, body, auth, ctype string
}

// recorder answers every request with status and body, and records it.
func recorder(t *testing.T, status int, body string) (*adminapi.Client, *seen) {
	t.Helper()
	var s seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s = seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(b), r.Header.Get("Authorization"), r.Header.Get("Content-Type")}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := adminapi.New(srv.URL+"/", testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, &s
}

func f64(v float64) *float64 { return &v }

// TestClientRequests checks the method, path, query and body each method
// sends, and that it decodes the answer.
func TestClientRequests(t *testing.T) {
	exp := time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)
	from := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name                      string
		call                      func(context.Context, *adminapi.Client) (any, error)
		answer                    string
		method, path, query, body string
		want                      string // fmt %v of the result
	}{
		{"whoami", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Whoami(ctx) },
			`{"kind":"user","name":"ann","roles":[{"role":"team_admin","org":"o","team":"t"}]}`,
			"GET", "/admin/whoami", "", "", "{user ann [team_admin@t]}"},
		{"users", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Users(ctx) },
			`{"data":[{"name":"ann","created_at":"2026-11-30T00:00:00Z","roles":[]}],"object":"list"}`,
			"GET", "/admin/users", "", "", "[{ann  2026-11-30 00:00:00 +0000 UTC <nil> []}]"},
		{"create user", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.CreateUser(ctx, adminapi.UserRequest{Name: "ann", Org: "o"})
		}, `{"name":"ann"}`, "POST", "/admin/users", "", `{"name":"ann","org":"o"}`, ""},
		{"disable user", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.DisableUser(ctx, "a/b") },
			`{}`, "DELETE", "/admin/users/a%2Fb", "", "", ""},
		{"tokens", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Tokens(ctx, "ann") },
			`{"data":[],"object":"list"}`, "GET", "/admin/users/ann/tokens", "", "", "[]"},
		{"create token", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.CreateToken(ctx, "ann", adminapi.TokenRequest{Name: "ci"})
		}, `{"id":"tok_1","token":"llma-x"}`, "POST", "/admin/users/ann/tokens", "", `{"name":"ci"}`, ""},
		{"revoke token", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.RevokeToken(ctx, "ann", "tok_1") },
			`{}`, "DELETE", "/admin/users/ann/tokens/tok_1", "", "", ""},
		{"roles", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Roles(ctx, "ann") },
			`{"data":[{"role":"viewer","org":"o","source":"slurm"}],"object":"list"}`, "GET", "/admin/users/ann/roles", "", "", "[viewer@o]"},
		{"grant role", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.GrantRole(ctx, "ann", adminapi.RoleRequest{Role: "team_admin", Team: "t"})
		}, `{"data":[],"object":"list"}`, "PUT", "/admin/users/ann/roles", "", `{"role":"team_admin","team":"t"}`, "[]"},
		{"revoke role", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.RevokeRole(ctx, "ann", adminapi.RoleRequest{Role: "viewer", Org: "o"})
		}, `{"data":[],"object":"list"}`, "DELETE", "/admin/users/ann/roles", "org=o&role=viewer", "", "[]"},
		{"orgs", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Orgs(ctx) },
			`{"data":[{"name":"o","share":2,"disabled":false,"source":"config"}],"object":"list"}`, "GET", "/admin/orgs", "", "", "[{o    2 false config}]"},
		{"create org", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.CreateOrg(ctx, adminapi.OrgRequest{Name: "o", Share: f64(0)})
		}, `{}`, "POST", "/admin/orgs", "", `{"name":"o","share":0}`, ""},
		{"teams", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Teams(ctx, "o") },
			`{"data":[],"object":"list"}`, "GET", "/admin/teams", "org=o", "", "[]"},
		{"teams of every org", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Teams(ctx, "") },
			`{"data":[],"object":"list"}`, "GET", "/admin/teams", "", "", "[]"},
		{"create team", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.CreateTeam(ctx, adminapi.TeamRequest{Name: "t", Org: "o", Share: f64(1.5)})
		}, `{}`, "POST", "/admin/teams", "", `{"name":"t","org":"o","share":1.5}`, ""},
		{"projects", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Projects(ctx, "t") },
			`{"data":[],"object":"list"}`, "GET", "/admin/teams/t/projects", "", "", "[]"},
		{"create project", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.CreateProject(ctx, "t", adminapi.ProjectRequest{Name: "p"})
		}, `{}`, "POST", "/admin/teams/t/projects", "", `{"name":"p","share":null}`, ""},
		{"disable org", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.DisableAccount(ctx, adminapi.Org("o"))
		},
			`{"account":{"name":"o","share":0,"disabled":true,"source":"admin"},"keys_revoked":3}`, "DELETE", "/admin/orgs/o", "", "", "{{o    0 true admin} 3}"},
		{"disable team", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.DisableAccount(ctx, adminapi.Team("t"))
		},
			`{}`, "DELETE", "/admin/teams/t", "", "", ""},
		{"disable project", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.DisableAccount(ctx, adminapi.Project("t", "p"))
		}, `{}`, "DELETE", "/admin/teams/t/projects/p", "", "", ""},
		{"enable project", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.EnableAccount(ctx, adminapi.Project("t", "p"))
		}, `{"account":{"name":"p","share":0,"disabled":false,"source":"admin"},"keys_revoked_stay_revoked":true}`,
			"POST", "/admin/teams/t/projects/p/enable", "", "", "{{p    0 false admin} true}"},
		{"share", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.SetShare(ctx, adminapi.Team("t"), 2.5)
		},
			`{}`, "PUT", "/admin/teams/t/share", "", `{"share":2.5}`, ""},
		{"team models", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.TeamModels(ctx, "t") },
			`{"team":"t","models":["m"]}`, "GET", "/admin/teams/t/models", "", "", "{t [m]}"},
		{"set team models: none is every model", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.SetTeamModels(ctx, "t", nil)
		}, `{"team":"t","models":[]}`, "PUT", "/admin/teams/t/models", "", `{"models":[]}`, "{t []}"},
		{"keys", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.Keys(ctx, adminapi.KeyQuery{Team: "t", IncludeRevoked: true})
		}, `{"data":[],"object":"list"}`, "GET", "/admin/keys", "include_revoked=true&team=t", "", "[]"},
		{"create key", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.CreateKey(ctx, adminapi.KeyRequest{Team: "t", Name: "n"})
		}, `{}`, "POST", "/admin/keys", "", `{"team":"t","name":"n"}`, ""},
		{"revoke key", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.RevokeKey(ctx, "key_1") },
			`{}`, "DELETE", "/admin/keys/key_1", "", "", ""},
		{"key limits", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.SetKeyLimits(ctx, "key_1", adminapi.Limits{RPM: 10})
		}, `{}`, "PUT", "/admin/keys/key_1/limits", "", `{"rpm":10,"tpm":0,"max_inflight":0}`, ""},
		{"key active", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.SetKeyActive(ctx, "key_1", false) },
			`{}`, "PUT", "/admin/keys/key_1/active", "", `{"active":false}`, ""},
		{"budgets", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.Budgets(ctx, adminapi.BudgetScope{Kind: "team"})
		}, `{"data":[],"object":"list"}`, "GET", "/admin/budgets", "kind=team", "", "[]"},
		{"budgets JSON", func(ctx context.Context, c *adminapi.Client) (any, error) {
			b, err := c.BudgetsJSON(ctx, adminapi.BudgetScope{})
			return string(b), err
		}, `{"data":[],"object":"list"}` + "\n", "GET", "/admin/budgets", "", "", `{"data":[],"object":"list"}`},
		{"set budget", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.SetBudget(ctx, adminapi.BudgetRequest{Kind: "team", Name: "t", Period: "day", MaxCost: f64(5)})
		}, `{}`, "PUT", "/admin/budgets", "", `{"kind":"team","name":"t","model":"","period":"day","max_cost":5,"soft_limit":0}`, ""},
		{"delete budget", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.DeleteBudget(ctx, adminapi.BudgetScope{Kind: "team", Name: "t", Model: "m"})
		}, `{"deleted":true,"kind":"team","model":"m","name":"t"}`, "DELETE", "/admin/budgets", "kind=team&model=m&name=t", "", "{true team m t}"},
		{"increase budget", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.IncreaseBudget(ctx, adminapi.Increase{Kind: "org", Name: "o", Amount: 5, ExpiresAt: exp})
		}, `{}`, "POST", "/admin/budgets/increase", "", `{"kind":"org","name":"o","model":"","amount":5,"expires_at":"2026-12-31T00:00:00Z"}`, ""},
		{"upstreams", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Upstreams(ctx) },
			`{"data":[],"object":"list"}`, "GET", "/admin/upstreams", "", "", "[]"},
		{"model upstreams", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.ModelUpstreams(ctx, "m") },
			`{"data":[],"object":"list"}`, "GET", "/admin/models/m/upstreams", "", "", "[]"},
		{"add upstream", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.AddUpstream(ctx, "m", adminapi.UpstreamRequest{Name: "u", BaseURL: "http://e:8000"})
		}, `{}`, "POST", "/admin/models/m/upstreams", "", `{"name":"u","base_url":"http://e:8000"}`, ""},
		{"put upstream", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.PutUpstream(ctx, "m", "u", adminapi.UpstreamRequest{BaseURL: "http://e:8000", InheritKey: true})
		},
			`{}`, "PUT", "/admin/models/m/upstreams/u", "", `{"base_url":"http://e:8000","inherit_key":true}`, ""},
		{"remove upstream", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.RemoveUpstream(ctx, "m", "u") },
			`{}`, "DELETE", "/admin/models/m/upstreams/u", "", "", ""},
		{"aliases", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Aliases(ctx) },
			`{"data":[],"object":"list"}`, "GET", "/admin/aliases", "", "", "[]"},
		{"set alias: slashes stay, segments escaped", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.SetAlias(ctx, "openai/gpt 4o", "m")
		}, `{}`, "PUT", "/admin/aliases/openai/gpt%204o", "", `{"model":"m"}`, ""},
		{"remove alias", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.RemoveAlias(ctx, "a/b") },
			`{}`, "DELETE", "/admin/aliases/a/b", "", "", ""},
		{"audit", func(ctx context.Context, c *adminapi.Client) (any, error) {
			return c.Audit(ctx, adminapi.AuditQuery{From: from, Actor: "ann", Limit: 5})
		}, `{"data":[],"object":"list"}`, "GET", "/admin/audit", "actor=ann&from=2026-11-30T00%3A00%3A00Z&limit=5", "", "[]"},
		{"fairshare", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.Fairshare(ctx) },
			`{"pools":[{"pool":"p","scheduler":"priority","capacity":4,"in_flight":0,"borrowing":0,"queued":0,"accounts":[{"account":"root","depth":0,"raw_shares":0,"norm_shares":0,"raw_usage":0,"norm_usage":1,"effectv_usage":1,"level_fs":null,"fair_share":"inf","rank":0,"reserved":4,"in_flight":0,"within":0,"borrowing":0}]}]}`,
			"GET", "/admin/fairshare", "", "", "{[{p priority 4 0 0 0 [{root   0 0 false 0 0 1 1  inf 0 4 0 0 0}] <nil>}]}"},
		{"sync runs", func(ctx context.Context, c *adminapi.Client) (any, error) { return c.SyncRuns(ctx, 1) },
			`{"data":[],"object":"list"}`, "GET", "/admin/sync", "limit=1", "", "[]"},
		{"spend", func(ctx context.Context, c *adminapi.Client) (any, error) {
			r, err := c.Spend(ctx, adminapi.SpendQuery{From: "2026-11-01", To: "2026-12-01", GroupBy: []string{"org", "team"}})
			return r.Data, err
		}, `{"from":"2026-11-01T00:00:00Z","to":"2026-12-01T00:00:00Z","group_by":["org"],"data":[{"cached_tokens":0,"completion_tokens":2,"estimated_requests":0,"gpu_hours":0.5,"org":"o","prompt_tokens":1,"requests":1}]}`,
			"GET", "/admin/spend", "format=json&from=2026-11-01&group_by=org%2Cteam&to=2026-12-01", "", "[{map[org:o] 1 1 2 0 0.5 0}]"},
		{"spend csv", func(ctx context.Context, c *adminapi.Client) (any, error) {
			b, err := c.SpendText(ctx, adminapi.SpendQuery{From: "2026-11-01", To: "2026-12-01", Format: "csv"})
			return string(b), err
		}, "org,team\n", "GET", "/admin/spend", "format=csv&from=2026-11-01&to=2026-12-01", "", "org,team\n"},
		{"usage.csv", func(ctx context.Context, c *adminapi.Client) (any, error) {
			b, err := c.UsageCSV(ctx, "2026-11-01", "")
			return string(b), err
		}, "team,pool\n", "GET", "/admin/usage.csv", "from=2026-11-01", "", "team,pool\n"},
	}
	called := map[string]bool{} // goldenRoutes the client calls, by method
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, s := recorder(t, http.StatusOK, tc.answer)
			got, err := tc.call(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			called[fmt.Sprint(s.method, routeOf(s.method, s.path))] = true
			if s.method != tc.method || s.path != tc.path || s.query != tc.query || s.body != tc.body {
				t.Errorf("sent %s %s ? %s body %s\nwant %s %s ? %s body %s", s.method, s.path, s.query, s.body, tc.method, tc.path, tc.query, tc.body)
			}
			if s.auth != "Bearer "+testToken {
				t.Errorf("Authorization %q", s.auth)
			}
			if (tc.body != "") != (s.ctype == "application/json") {
				t.Errorf("Content-Type %q with body %q", s.ctype, s.body)
			}
			if tc.want != "" {
				if g := fmt.Sprintf("%v", got); g != tc.want {
					t.Errorf("result %s, want %s", g, tc.want)
				}
			}
		})
	}
	// every route of the golden script that answered has a method
	goldenCalls(t, func(method, path, status, ctype, file string) {
		if i := routeOf(method, path); status[0] == '2' && i >= 0 && !called[fmt.Sprint(method, i)] {
			t.Errorf("no Client method calls %s %s (%s)", method, path, file)
		}
	})
}

// TestClientErrors checks that a refusal becomes an *Error with the
// status, code, param and message, unwrapping to the llmflow code, and
// that an answer not in the error shape keeps its text.
func TestClientErrors(t *testing.T) {
	tests := []struct {
		status                   int
		body                     string
		wantCode, wantParam, msg string
		llmflowCode              string
		text                     string
	}{
		{404, `{"error":{"message":"no key \"x\"","type":"invalid_request_error","param":null,"code":"not_found"}}` + "\n",
			"not_found", "", `no key "x"`, llmflow.ENOTFOUND, `404 Not Found: no key "x"`},
		{400, `{"error":{"message":"max_cost is required","type":"invalid_request_error","param":"max_cost","code":"invalid_request"}}`,
			"invalid_request", "max_cost", "max_cost is required", llmflow.EINVALID, "400 Bad Request: max_cost is required"},
		{403, `{"error":{"message":"you may not","type":"permission_error","param":null,"code":"forbidden"}}`,
			"forbidden", "", "you may not", llmflow.EFORBIDDEN, "403 Forbidden: you may not"},
		{502, "<html>bad gateway</html>\n", "", "", "<html>bad gateway</html>", llmflow.EINTERNAL, "502 Bad Gateway: <html>bad gateway</html>"},
		{302, "", "", "", "", llmflow.EINTERNAL, "302 Found: "},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			c, _ := recorder(t, tc.status, tc.body)
			_, err := c.Keys(t.Context(), adminapi.KeyQuery{})
			var e *adminapi.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *adminapi.Error", err, err)
			}
			if e.Status != tc.status || e.Code != tc.wantCode || e.Param != tc.wantParam || e.Message != tc.msg {
				t.Errorf("got %+v", e)
			}
			if got := llmflow.ErrorCode(err); got != tc.llmflowCode {
				t.Errorf("llmflow.ErrorCode = %s, want %s", got, tc.llmflowCode)
			}
			if err.Error() != tc.text {
				t.Errorf("Error() = %q, want %q", err.Error(), tc.text)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Error("the error holds the token")
			}
		})
	}
}

// TestClientNoRedirectNoToken: a redirect is not followed (the token goes
// nowhere else), and neither the client's printed form nor a transport
// error shows the token.
func TestClientNoRedirectNoToken(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect was followed, Authorization %q", r.Header.Get("Authorization"))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.RedirectHandler(other.URL+"/admin/keys", http.StatusTemporaryRedirect))
	defer srv.Close()
	c, err := adminapi.New(srv.URL, testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Keys(t.Context(), adminapi.KeyQuery{}); err == nil {
		t.Fatal("a redirect answered as success")
	}
	type holder struct{ c adminapi.Client }
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%v %+v %#v", *c, *c, *c),
		fmt.Sprintf("%v %+v %#v", holder{*c}, holder{*c}, holder{*c})} {
		if strings.Contains(s, testToken) || strings.Contains(s, "0123456789abcdef") {
			t.Errorf("printed client shows the token: %s", s)
		}
	}
	srv.Close()
	_, err = c.Whoami(t.Context())
	if err == nil || strings.Contains(err.Error(), testToken) {
		t.Errorf("transport error %v", err)
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "ftp://h", "http://", "http://user:pw@h:1", "localhost:8080"} {
		_, err := adminapi.New(u, testToken, nil)
		if err == nil {
			t.Errorf("New(%q) accepted", u)
			continue
		}
		if strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), testToken) {
			t.Errorf("New(%q): %v shows a secret", u, err)
		}
	}
}
