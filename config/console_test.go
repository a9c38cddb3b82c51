package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

// TestParseConsole: the oidc and self_service blocks with their defaults,
// and the client secret among the secrets check-config opens.
func TestParseConsole(t *testing.T) {
	const base = `
pool "p" { capacity = 4 }
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:8000" }
}
`
	for _, tc := range []struct {
		name, src string
		oidc      *config.OIDC
		self      *config.SelfService
	}{
		{name: "none", src: base},
		{name: "defaults", src: base + `
oidc {
  issuer       = "http://127.0.0.1:9998"
  client_id    = "llmflow"
  redirect_url = "http://localhost:8080/console/callback"
}
self_service {}
`, oidc: &config.OIDC{Issuer: "http://127.0.0.1:9998", ClientID: "llmflow", RedirectURL: "http://localhost:8080/console/callback",
			UsernameClaim: "preferred_username", Scopes: []string{"openid", "profile"}, SessionTTL: 8 * time.Hour},
			self: &config.SelfService{}},
		{name: "all", src: base + `
oidc {
  issuer             = "https://cilogon.org"
  client_id          = "cilogon:/client_id/1234"
  client_secret_file = "oidc.secret"
  redirect_url       = "https://llmflow.example.org/console/callback"
  username_claim     = "uid"
  scopes             = ["openid", "email", "org.cilogon.userinfo"]
  session_ttl        = "12h"
}
self_service {
  keys     = true
  max_keys = 5
}
`, oidc: &config.OIDC{Issuer: "https://cilogon.org", ClientID: "cilogon:/client_id/1234", ClientSecretFile: "oidc.secret",
			RedirectURL: "https://llmflow.example.org/console/callback", UsernameClaim: "uid",
			Scopes: []string{"openid", "email", "org.cilogon.userinfo"}, SessionTTL: 12 * time.Hour},
			self: &config.SelfService{Keys: true, MaxKeys: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "gateway.hcl")
			if err := os.WriteFile(file, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			if (cfg.OIDC == nil) != (tc.oidc == nil) {
				t.Fatalf("oidc %+v, want %+v", cfg.OIDC, tc.oidc)
			}
			if o := cfg.OIDC; o != nil {
				w := *tc.oidc
				if w.ClientSecretFile != "" {
					w.ClientSecretFile = filepath.Join(dir, w.ClientSecretFile)
				}
				w.DefRange = o.DefRange
				if o.Issuer != w.Issuer || o.ClientID != w.ClientID || o.ClientSecretFile != w.ClientSecretFile || o.RedirectURL != w.RedirectURL ||
					o.UsernameClaim != w.UsernameClaim || !slices.Equal(o.Scopes, w.Scopes) || o.SessionTTL != w.SessionTTL {
					t.Errorf("oidc %+v, want %+v", *o, w)
				}
				hasSecret := slices.ContainsFunc(cfg.Secrets(), func(s config.Secret) bool { return s.What == "oidc client_secret_file" })
				if hasSecret != (w.ClientSecretFile != "") {
					t.Errorf("secrets %+v", cfg.Secrets())
				}
			}
			if (cfg.SelfService == nil) != (tc.self == nil) {
				t.Fatalf("self_service %+v, want %+v", cfg.SelfService, tc.self)
			}
			if s := cfg.SelfService; s != nil && (s.Keys != tc.self.Keys || s.MaxKeys != tc.self.MaxKeys) {
				t.Errorf("self_service %+v, want %+v", *s, *tc.self)
			}
		})
	}
}
