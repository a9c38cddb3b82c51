package admin

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
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
	base := slices.Clone(e.gw.BaseAccounts())
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

// TestAccountShare: a team created through the admin API with a share
// follows the configuration's rule (README, Fair share): its share is a
// fraction of the organisation's reservation, the configured team without
// a share splits what is left (a share 1 next to it halved it: 1:1
// normalised), and shares summing above 1 are refused; its share can be
// changed (0: it only borrows), but not a configured team's; bad shares
// are 400s naming the field.
func TestAccountShare(t *testing.T) {
	e := newAdminEnv(t, "")
	reserved := func(acct string) int {
		for _, p := range e.gw.FairshareReport().Pools {
			for _, a := range p.Accounts {
				if a.Account == acct {
					return a.Reserved
				}
			}
		}
		return -1
	}
	org := reserved("etabA")
	e.must(t, "POST", "/admin/teams", "oadmin", `{"name":"lab-new","org":"etabA","share":0.25}`, 201)
	if n, c := reserved("lab-new"), reserved("lab-nlp"); n+c != org || n < org/4-1 || n > org/4+1 {
		t.Fatalf("share 0.25 next to a configured team without a share, in a reservation of %d: %d and %d", org, n, c)
	}
	for _, tc := range []struct {
		share       string
		code        int
		newR, nlpR  int
		description string
	}{
		{`{"share":3}`, 400, -1, -1, "above 1: refused, not normalised"},
		{`{"share":0}`, 200, 0, org, "none: it only borrows"},
		{`{"share":1}`, 200, org, 0, "all of it: the configured team has what is left, nothing"},
		{`{"share":0.5}`, 200, org / 2, org - org/2, "half"},
	} {
		code, b := e.do(t, "PUT", "/admin/teams/lab-new/share", e.tokens["oadmin"], tc.share)
		if code != tc.code || (code == 400 && !strings.Contains(b, `"param":"share"`)) {
			t.Fatalf("%s: %d %s, want %d", tc.share, code, b, tc.code)
		}
		if code != 200 {
			continue
		}
		if n, c := reserved("lab-new"), reserved("lab-nlp"); n+c != org || n-tc.newR > 1 || tc.newR-n > 1 || c-tc.nlpR > 1 || tc.nlpR-c > 1 {
			t.Fatalf("%s (%s): lab-new %d, lab-nlp %d of %d; want %d and %d", tc.share, tc.description, n, c, org, tc.newR, tc.nlpR)
		}
	}
	if code, b := e.do(t, "POST", "/admin/teams", e.tokens["oadmin"], `{"name":"lab-more","org":"etabA","share":0.75}`); code != 400 {
		t.Fatalf("a second team taking the sum above 1: %d %s", code, b)
	}
	e.must(t, "PUT", "/admin/teams/lab-new/share", "oadmin", `{"share":1}`, 200)
	if code, b := e.do(t, "PUT", "/admin/teams/lab-nlp/share", e.tokens["oadmin"], `{"share":2}`); code != 409 || !strings.Contains(b, "its share is set there") {
		t.Fatalf("share of a configured team: %d %s", code, b)
	}
	for _, bad := range []string{`{"share":-1}`, `{"share":1e12}`, `{"share":"2"}`, `{}`} {
		if code, b := e.do(t, "PUT", "/admin/teams/lab-new/share", e.tokens["oadmin"], bad); code != 400 {
			t.Errorf("%s: %d %s, want 400", bad, code, b)
		}
	}
	if code, _ := e.do(t, "POST", "/admin/teams", e.tokens["oadmin"], `{"name":"lab-neg","org":"etabA","share":-2}`); code != 400 {
		t.Errorf("create with a negative share: %d", code)
	}
	// the share survives a restart of the gateway on the same store
	as, err := e.db.AdminAccounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(as, func(a llmflow.AdminAccount) bool { return a.Name == "lab-new" }); i < 0 || as[i].Shares != 1 {
		t.Fatalf("stored: %+v", as)
	}
}
