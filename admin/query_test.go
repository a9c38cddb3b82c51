package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// An unknown query parameter on an admin listing is a 400 naming it, not
// the unfiltered list.
func TestListKeysUnknownParameter(t *testing.T) {
	e := newEnv(t, []string{"http://127.0.0.1:1"}, "")
	resp := adminDo(t, e, http.MethodGet, "/admin/keys?tem=lab-chem", "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `\"tem\"`) {
		t.Errorf("?tem=: %d %s, want 400 naming tem", resp.StatusCode, b)
	}
	resp = adminDo(t, e, http.MethodGet, "/admin/keys?team=lab-nlp&include_revoked=true", "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("known parameters: %d", resp.StatusCode)
	}
}
