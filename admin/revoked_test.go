package admin

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestAdminRevokedNeverRevived: two gateways on one store (SQLite), each
// with the other's admin tokens cached. A token revoked through one is
// never served again from a stale cache on the other when the store then
// goes down (the issue: it worked again for 5 minutes): neither when the
// other refused it once since (the refusal drops it from the cache), nor
// when the other only read the store's new admin generation (a reload, a
// notice from another replica) without trying that token.
func TestAdminRevokedNeverRevived(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, other *testEnv, tok string) // between the revocation and the outage
	}{
		{"refused once", func(t *testing.T, other *testEnv, tok string) {
			if code, _ := other.do(t, "GET", "/admin/whoami", tok, ""); code != http.StatusUnauthorized {
				t.Fatalf("revoked token on the other gateway: %d, want 401", code)
			}
		}},
		{"generation read", func(t *testing.T, other *testEnv, _ string) {
			if err := other.adm.AdminChanged(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAdminEnv(t, "")
			fl := &flakyAdmin{AdminStore: e.db}
			other := newEnv(t, []string{"http://127.0.0.1:1"}, "", func(o *envOptions) { o.Keys, o.Admin = e.db, fl })
			tok, kept := e.tokens["pview"], e.tokens["tadmin"]
			for _, k := range []string{tok, kept} {
				if code, b := other.do(t, "GET", "/admin/whoami", k, ""); code != http.StatusOK {
					t.Fatalf("other gateway: %d %s", code, b)
				}
			}
			var ts struct{ Data []tokenView }
			json.Unmarshal([]byte(e.must(t, "GET", "/admin/users/pview/tokens", "master", "", 200)), &ts)
			e.must(t, "DELETE", "/admin/users/pview/tokens/"+ts.Data[0].ID, "master", "", 200)
			tc.before(t, other, tok)
			fl.down.Store(true)
			if code, b := other.do(t, "GET", "/admin/whoami", tok, ""); code == http.StatusOK {
				t.Fatalf("revoked token served from a stale cache with the store down: %d %s", code, b)
			}
		})
	}
}
