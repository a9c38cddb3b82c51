package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
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

func decodeJSON(t testing.TB, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func TestAdminKeys(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")

	resp := adminDo(t, e, http.MethodPost, "/admin/keys", `{"team":"lab-chem","project":"p1","name":"ci","rpm":10,"tags":["x"]}`)
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var created keyView
	decodeJSON(t, resp, &created)
	if !strings.HasPrefix(created.Key, "llmf-") || created.Org != "etabB" || created.Project != "p1" || created.RPM != 10 {
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
		{"too large", "POST", "/admin/keys", `{"team":"lab-nlp","name":"` + strings.Repeat("a", 70<<10) + `"}`, "", 413},
		{"revoke unknown", "DELETE", "/admin/keys/key_0000", "", "", 404},
		{"wrong method", "PUT", "/admin/keys", "", "", 405},
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
			var body errorBody
			decodeJSON(t, resp, &body)
			if resp.StatusCode != tc.status || body.Error.Message == "" || body.Error.Type == "" {
				t.Errorf("%d %+v, want %d with an OpenAI-shaped error", resp.StatusCode, body, tc.status)
			}
		})
	}
}
