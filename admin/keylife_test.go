package admin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// TestKeyExpiryModelsRotate: a key created with an expiry and a model
// list shows them (in its creation, GET /admin/keys/{id} and the
// listing), with bad values refused; a rotation answers the new secret
// once, both secrets work during the grace, the trail records it, and a
// revoked key or a bad grace is refused.
func TestKeyExpiryModelsRotate(t *testing.T) {
	e := newAdminEnv(t, "")
	exp := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	for _, tc := range []struct {
		name, body string
		want       int
		has        string
	}{
		{"past expiry", `{"team":"lab-nlp","name":"x","expires_at":"2001-01-01T00:00:00Z"}`, 400, "expires_at must be in the future"},
		{"unknown model", `{"team":"lab-nlp","name":"x","models":["gpt-9"]}`, 400, `unknown model \"gpt-9\"`},
		{"empty model", `{"team":"lab-nlp","name":"x","models":[""]}`, 400, `unknown model \"\"`},
	} {
		if code, body := e.do(t, "POST", "/admin/keys", e.tokens["master"], tc.body); code != tc.want || !strings.Contains(body, tc.has) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, body, tc.want, tc.has)
		}
	}
	var k adminapi.Key
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys", "member", `{"team":"lab-nlp","name":"mine","expires_at":"`+exp.Format(time.RFC3339)+`","models":["m"]}`, 201)), &k)
	if k.ExpiresAt == nil || !k.ExpiresAt.Equal(exp) || len(k.Models) != 1 || k.Key == "" {
		t.Fatalf("created %+v", k)
	}
	var got adminapi.Key
	json.Unmarshal([]byte(e.must(t, "GET", "/admin/keys/"+k.ID, "member", "", 200)), &got)
	if got.Key != "" || got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || strings.Join(got.Models, ",") != "m" || got.Owner != "member" {
		t.Errorf("GET one key: %+v", got)
	}
	if code, _ := e.do(t, "GET", "/admin/keys/key_nope", e.tokens["master"], ""); code != 404 {
		t.Errorf("GET an unknown key: %d", code)
	}
	// the key's model list holds at the gateway
	chat := func(secret, model string) int {
		return gatewayPost(t, e, secret, `{"model":"`+model+`","messages":[]}`)
	}
	if c := chat(k.Key, "m"); c != 200 {
		t.Errorf("its model: %d", c)
	}
	if c := chat(k.Key, "batchm"); c != 404 {
		t.Errorf("another model: %d", c)
	}

	for _, g := range []string{`{"grace":"-1s"}`, `{"grace":"721h"}`, `{"grace":"soon"}`, `{"nope":1}`} {
		if code, body := e.do(t, "POST", "/admin/keys/"+k.ID+"/rotate", e.tokens["member"], g); code != 400 {
			t.Errorf("rotate with %s: %d %s", g, code, body)
		}
	}
	var rot adminapi.Key
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys/"+k.ID+"/rotate", "member", `{"grace":"1h"}`, 200)), &rot)
	if !strings.HasPrefix(rot.Key, "llmf-") || rot.Key == k.Key || rot.Hint == k.Hint || rot.PreviousValidUntil == nil ||
		time.Until(*rot.PreviousValidUntil) < 59*time.Minute || time.Until(*rot.PreviousValidUntil) > time.Hour {
		t.Fatalf("rotated %+v", rot)
	}
	for name, secret := range map[string]string{"new": rot.Key, "previous, in its grace": k.Key} {
		if c := chat(secret, "m"); c != 200 {
			t.Errorf("%s secret: %d", name, c)
		}
	}
	audit := e.must(t, "GET", "/admin/audit?actor=member", "master", "", 200)
	if !strings.Contains(audit, `"action":"key.rotate"`) || strings.Contains(audit, rot.Key) || strings.Contains(audit, k.Key) {
		t.Errorf("audit: %s", audit)
	}
	// rotating with no grace stops the previous secret at once
	var rot2 adminapi.Key
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys/"+k.ID+"/rotate", "master", `{"grace":"0s"}`, 200)), &rot2)
	if c := chat(rot.Key, "m"); c != 401 {
		t.Errorf("the previous secret after a rotation without grace: %d", c)
	}
	if c := chat(rot2.Key, "m"); c != 200 {
		t.Errorf("the newest secret: %d", c)
	}
	// revoked in a rotation's grace: both secrets stop at once (both
	// were cached)
	var rot3 adminapi.Key
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys/"+k.ID+"/rotate", "master", `{"grace":"1h"}`, 200)), &rot3)
	for _, s := range []string{rot2.Key, rot3.Key} {
		if c := chat(s, "m"); c != 200 {
			t.Errorf("before the revocation: %d", c)
		}
	}
	e.must(t, "DELETE", "/admin/keys/"+k.ID, "member", "", 200)
	for _, s := range []string{rot2.Key, rot3.Key} {
		if c := chat(s, "m"); c != 401 {
			t.Errorf("a secret of the revoked key: %d", c)
		}
	}
	if code, body := e.do(t, "POST", "/admin/keys/"+k.ID+"/rotate", e.tokens["member"], `{}`); code != 409 {
		t.Errorf("rotate a revoked key: %d %s", code, body)
	}
}

// gatewayPost sends a chat request with a client key and returns the
// status.
func gatewayPost(t *testing.T, e *adminEnv, secret, body string) int {
	t.Helper()
	resp := gatewaytest.Post(t, e.srv, secret, "/v1/chat/completions", body)
	resp.Body.Close()
	return resp.StatusCode
}
