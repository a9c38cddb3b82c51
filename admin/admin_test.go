package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

func adminDo(t testing.TB, e *testEnv, method, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.master)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestAdminKeys(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")

	resp := adminDo(t, e, http.MethodPost, "/admin/keys", `{"team":"lab-chem","name":"ci","tags":["x"]}`)
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var created keyView
	gatewaytest.DecodeJSON(t, resp, &created)
	if !strings.HasPrefix(created.Key, "llmf-") || created.Org != "etabB" || len(created.Tags) != 1 {
		t.Fatalf("created %+v", created)
	}
	// the new key works at once
	e.key = created.Key
	resp = e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("new key: %d", resp.StatusCode)
	}
	// listings never show a secret
	resp = adminDo(t, e, http.MethodGet, "/admin/keys?team=lab-chem", "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), created.Key) || strings.Contains(string(b), created.Key[5:20]) {
		t.Fatalf("listing shows the secret: %s", b)
	}

	for _, tc := range []struct {
		name, method, path, body, auth string
		status                         int
	}{
		{"no auth", "GET", "/admin/keys", "", "none", 401},
		{"client key is not admin", "GET", "/admin/keys", "", "client", 401},
		{"unknown team", "POST", "/admin/keys", `{"team":"nope","name":"x"}`, "", 404},
		{"missing team", "POST", "/admin/keys", `{"name":"x"}`, "", 400},
		{"unknown field", "POST", "/admin/keys", `{"team":"lab-nlp","bogus":1}`, "", 400},
		{"two values", "POST", "/admin/keys", `{"team":"lab-nlp"}{}`, "", 400},
		{"negative limit", "POST", "/admin/keys", `{"team":"lab-nlp","rpm":-1}`, "", 400},
		{"negative tpm", "POST", "/admin/keys", `{"team":"lab-nlp","tpm":-1}`, "", 400},
		{"negative max_inflight", "POST", "/admin/keys", `{"team":"lab-nlp","max_inflight":-4}`, "", 400},
		{"project of another organisation", "POST", "/admin/keys", `{"team":"lab-nlp","project":"lab-chem"}`, "", 400},
		{"unknown project", "POST", "/admin/keys", `{"team":"lab-nlp","project":"p1"}`, "", 400},
		{"too large", "POST", "/admin/keys", `{"team":"lab-nlp","name":"` + strings.Repeat("a", 70<<10) + `"}`, "", 413},
		{"revoke unknown", "DELETE", "/admin/keys/key_0000", "", "", 404},
		{"wrong method", "PUT", "/admin/keys", "", "", 405},
		{"include_revoked not a boolean", "GET", "/admin/keys?include_revoked=1", "", "", 400},
		{"include_revoked misspelt", "GET", "/admin/keys?include_revoked=ture", "", "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, e.srv.URL+tc.path, strings.NewReader(tc.body))
			switch tc.auth {
			case "":
				req.Header.Set("Authorization", "Bearer "+e.master)
			case "client":
				req.Header.Set("Authorization", "Bearer "+created.Key)
			}
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body gatewaytest.ErrorBody
			gatewaytest.DecodeJSON(t, resp, &body)
			if resp.StatusCode != tc.status || body.Error.Message == "" || body.Error.Type == "" {
				t.Errorf("%d %+v, want %d with an OpenAI-shaped error", resp.StatusCode, body, tc.status)
			}
		})
	}
}

// TestAdminKeysRefuseWhatDoesNotHold checks through HTTP that a key's
// limits are accepted and listed (they are enforced: limits_test.go), and
// that a key's project must be an account under its team.
func TestAdminKeysRefuseWhatDoesNotHold(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	for _, param := range []string{"rpm", "tpm", "max_inflight"} {
		resp := adminDo(t, e, http.MethodPost, "/admin/keys", `{"team":"lab-nlp","name":"x","`+param+`":5}`)
		var body map[string]any
		gatewaytest.DecodeJSON(t, resp, &body)
		if resp.StatusCode != http.StatusCreated || body[param] != 5.0 {
			t.Errorf("%s: %d %+v, want 201 with %s 5", param, resp.StatusCode, body, param)
		}
	}
	resp := adminDo(t, e, http.MethodGet, "/admin/keys", "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, f := range []string{`"rpm":5`, `"tpm":5`, `"max_inflight":5`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("listing does not show %s: %s", f, b)
		}
	}

	// A Slurm-like tree: project nlp-llm under lab-nlp, chem-x under lab-chem.
	accts := e.cfg.Accounts()
	accts = append(accts,
		llmflow.Account{Name: "nlp-llm", Kind: llmflow.KindProject, Parent: "lab-nlp", Shares: 1},
		llmflow.Account{Name: "nlp-deep", Kind: llmflow.KindProject, Parent: "nlp-llm", Shares: 1},
		llmflow.Account{Name: "chem-x", Kind: llmflow.KindProject, Parent: "lab-chem", Shares: 1},
		llmflow.Account{Name: "nlp-old", Kind: llmflow.KindProject, Parent: "lab-nlp", Shares: 1, Disabled: true},
		llmflow.Account{Name: "nlp-old-sub", Kind: llmflow.KindProject, Parent: "nlp-old", Shares: 1})
	e.gw.SetAccounts(accts)
	for _, tc := range []struct {
		project string
		status  int
	}{
		{"lab-chem", 400}, // a team of another organisation
		{"chem-x", 400},   // a project of another team
		{"etabA", 400},    // the team's own organisation
		{"lab-nlp", 400},  // the team itself is not a project
		{"nope", 400},
		{"nlp-llm", 201},
		{"nlp-deep", 201},    // deeper under the team
		{"nlp-old", 403},     // disabled: its key would be refused at every request
		{"nlp-old-sub", 403}, // under a disabled project
	} {
		resp := adminDo(t, e, http.MethodPost, "/admin/keys", `{"team":"lab-nlp","name":"x","project":"`+tc.project+`"}`)
		if tc.status != http.StatusCreated {
			var body gatewaytest.ErrorBody
			gatewaytest.DecodeJSON(t, resp, &body)
			if resp.StatusCode != tc.status || body.Error.Param == nil || *body.Error.Param != "project" {
				t.Errorf("project %q: %d %+v, want %d naming project", tc.project, resp.StatusCode, body, tc.status)
			}
			continue
		}
		var v keyView
		gatewaytest.DecodeJSON(t, resp, &v)
		if resp.StatusCode != tc.status || v.Project != tc.project {
			t.Errorf("project %q: %d %+v, want %d", tc.project, resp.StatusCode, v, tc.status)
		}
	}

	// A key of project nlp-llm works, then is refused once a sync removes
	// the project or moves it to another team.
	resp = adminDo(t, e, http.MethodPost, "/admin/keys", `{"team":"lab-nlp","name":"p","project":"nlp-llm"}`)
	var created keyView
	gatewaytest.DecodeJSON(t, resp, &created)
	e.key = created.Key
	send := func() (int, string) {
		t.Helper()
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, b := send(); code != http.StatusOK {
		t.Fatalf("key of project nlp-llm: %d %s", code, b)
	}
	e.gw.SetAccounts(append(e.cfg.Accounts(), llmflow.Account{Name: "nlp-deep", Kind: llmflow.KindProject, Parent: "lab-nlp", Shares: 1}))
	if code, b := send(); code != http.StatusForbidden {
		t.Errorf("key whose project left the tree: %d %s, want 403", code, b)
	}
	e.gw.SetAccounts(append(e.cfg.Accounts(), llmflow.Account{Name: "nlp-llm", Kind: llmflow.KindProject, Parent: "lab-chem", Shares: 1}))
	if code, b := send(); code != http.StatusForbidden {
		t.Errorf("key whose project moved to another team: %d %s, want 403", code, b)
	}
	e.gw.SetAccounts(accts)
	if code, b := send(); code != http.StatusOK {
		t.Errorf("key whose project is back: %d %s", code, b)
	}
}

// TestCreateKeyOwnerIsSlurmUser: when the key's account comes from Slurm,
// its owner must be a user with an association there (any case: Slurm
// lower-cases names); no owner is always taken; accounts of the
// configuration take any owner.
func TestCreateKeyOwnerIsSlurmUser(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	accts := e.cfg.Accounts()
	for i := range accts {
		if accts[i].Name == "lab-nlp" {
			accts[i].Source, accts[i].Members = "slurm", []string{"alice"}
		}
	}
	accts = append(accts, llmflow.Account{Name: "nlp-llm", Kind: llmflow.KindProject, Parent: "lab-nlp", Shares: 1,
		Members: []string{"bob"}, Source: "slurm"})
	e.gw.SetAccounts(accts)
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"team user", `{"team":"lab-nlp","name":"x","owner":"alice"}`, 201},
		{"team user, other case", `{"team":"lab-nlp","name":"x","owner":"Alice"}`, 201},
		{"no owner", `{"team":"lab-nlp","name":"x"}`, 201},
		{"project user", `{"team":"lab-nlp","name":"x","project":"nlp-llm","owner":"bob"}`, 201},
		{"no Slurm user", `{"team":"lab-nlp","name":"x","owner":"mallory"}`, 400},
		{"user of the project, not of the team", `{"team":"lab-nlp","name":"x","owner":"bob"}`, 400},
		{"user of the team, not of the project", `{"team":"lab-nlp","name":"x","project":"nlp-llm","owner":"alice"}`, 400},
		{"configured team: any owner", `{"team":"lab-chem","name":"x","owner":"mallory"}`, 201},
	} {
		resp := adminDo(t, e, http.MethodPost, "/admin/keys", tc.body)
		var body gatewaytest.ErrorBody
		gatewaytest.DecodeJSON(t, resp, &body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %+v, want %d", tc.name, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.status == 400 && (body.Error.Param == nil || *body.Error.Param != "owner") {
			t.Errorf("%s: %+v, want the error to name owner", tc.name, body)
		}
	}
}
