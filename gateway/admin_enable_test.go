package gateway

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestEnableAccount: a team disabled by an admin (its keys revoked) is
// enabled again by its organisation's admin: new keys work there, the
// revoked ones stay revoked; enabling what is not disabled, or what its
// source disabled (Slurm deleted it), is a 409; the audit has both.
func TestEnableAccount(t *testing.T) {
	e := newAdminEnv(t, "")
	chat := func(key string) int {
		code, _ := e.do(t, "POST", "/v1/chat/completions", key, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		return code
	}
	var old keyView
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys", "master", `{"team":"lab-nlp","name":"before"}`, 201)), &old)
	if c := chat(old.Key); c != 200 {
		t.Fatalf("key before: %d", c)
	}
	e.must(t, "DELETE", "/admin/teams/lab-nlp", "oadmin", "", 200)
	if c := chat(old.Key); c != 401 && c != 403 {
		t.Fatalf("key of the disabled team: %d", c)
	}
	// another organisation's admin may not; its own may
	if code, _ := e.do(t, "POST", "/admin/teams/lab-chem/enable", e.tokens["oadmin"], ""); code != 403 {
		t.Fatalf("enable another organisation's team: %d", code)
	}
	body := e.must(t, "POST", "/admin/teams/lab-nlp/enable", "oadmin", "", 200)
	if !strings.Contains(body, `"disabled":false`) || !strings.Contains(body, `"keys_revoked_stay_revoked":true`) {
		t.Fatalf("enable: %s", body)
	}
	if c := chat(old.Key); c != 401 {
		t.Fatalf("a key revoked with the team after it is enabled: %d, want 401 (revocation is final)", c)
	}
	var fresh keyView
	json.Unmarshal([]byte(e.must(t, "POST", "/admin/keys", "tadmin", `{"team":"lab-nlp","name":"after"}`, 201)), &fresh)
	if c := chat(fresh.Key); c != 200 {
		t.Fatalf("new key of the enabled team: %d", c)
	}
	e.must(t, "POST", "/admin/teams/lab-nlp/enable", "oadmin", "", 409) // not disabled
	if code, _ := e.do(t, "POST", "/admin/teams/nope/enable", e.tokens["master"], ""); code != 404 {
		t.Fatalf("enable an unknown team: %d", code)
	}
	// disabled by its source: enabled there, not here
	e.gw.tree.mu.Lock()
	base := slices.Clone(e.gw.tree.base)
	e.gw.tree.mu.Unlock()
	for i := range base {
		if base[i].Name == "lab-chem" {
			base[i].Disabled = true
		}
	}
	e.gw.SetAccounts(base)
	if code, b := e.do(t, "POST", "/admin/teams/lab-chem/enable", e.tokens["master"], ""); code != 409 || !strings.Contains(b, "by its source") {
		t.Fatalf("enable a team its source disabled: %d %s", code, b)
	}
	audit := e.must(t, "GET", "/admin/audit?limit=100", "master", "", 200)
	if !strings.Contains(audit, `"team.disable"`) || !strings.Contains(audit, `"team.enable"`) {
		t.Fatalf("audit lacks the disable or the enable: %s", audit)
	}
}
