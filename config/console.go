package config

import (
	"net/url"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// OIDC is oidc { issuer, client_id, client_secret_file, redirect_url,
// username_claim, scopes, session_ttl }: single sign-on to the web console
// (/console/) through the centre's OpenID Connect provider, with the
// authorization code flow and PKCE. The username claim is the Slurm user
// name: the user of that name in llmflow (created by the Slurm import
// for users with associations or coordinator roles, or by an admin) is
// who signs in, with their roles.
type OIDC struct {
	Issuer           string // https://idp.example.org/realms/hpc (http only for a loopback host)
	ClientID         string
	ClientSecretFile string // "" = a public client (PKCE alone)
	// RedirectURL is the console's callback as registered at the
	// provider: scheme://host[:port]/console/callback.
	RedirectURL string
	// UsernameClaim names the claim holding the Slurm user name, read
	// from the ID token or else from the userinfo endpoint; default
	// DefaultUsernameClaim. It is compared in lower case, as Slurm keeps
	// user names.
	UsernameClaim string
	Scopes        []string      // default openid, profile
	SessionTTL    time.Duration // a console session's lifetime, default DefaultSessionTTL
	DefRange      hcl.Range
}

// SelfService is self_service { keys, max_keys }: what researchers signed
// in to the console may do for themselves. Keys lets a member (a Slurm
// user with an association in a team) create and revoke keys owned by
// themselves in their teams from the console; MaxKeys (0: no cap) bounds
// the active keys a member owns, however they were created.
type SelfService struct {
	Keys     bool
	MaxKeys  int
	DefRange hcl.Range
}

// Defaults of the oidc block.
const (
	DefaultUsernameClaim = "preferred_username"
	DefaultSessionTTL    = 8 * time.Hour
)

var oidcSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "issuer", Required: true},
		{Name: "client_id", Required: true},
		{Name: "client_secret_file"},
		{Name: "redirect_url", Required: true},
		{Name: "username_claim"},
		{Name: "scopes"},
		{Name: "session_ttl"},
	},
}

// decodeOIDC decodes oidc { … }.
func (d *decoder) decodeOIDC(b *hcl.Block) {
	if b == nil {
		return
	}
	o := &OIDC{UsernameClaim: DefaultUsernameClaim, Scopes: []string{"openid", "profile"}, SessionTTL: DefaultSessionTTL, DefRange: b.DefRange}
	c := d.content(b.Body, oidcSchema)
	if a := d.str(c.Attributes, "issuer", &o.Issuer); a != nil {
		if err := checkWebURL(o.Issuer); err != nil {
			d.errorf(a.Expr.Range(), "issuer %q: %v", o.Issuer, err)
		}
	}
	d.str(c.Attributes, "client_id", &o.ClientID)
	d.secretPath(c.Attributes, "client_secret_file", "oidc client_secret_file", &o.ClientSecretFile)
	if a := d.str(c.Attributes, "redirect_url", &o.RedirectURL); a != nil {
		if err := checkWebURL(o.RedirectURL); err != nil {
			d.errorf(a.Expr.Range(), "redirect_url %q: %v", o.RedirectURL, err)
		} else if u, _ := url.Parse(o.RedirectURL); u.Path != "/console/callback" {
			d.errorf(a.Expr.Range(), "redirect_url %q: the console's callback is scheme://host[:port]/console/callback", o.RedirectURL)
		}
	}
	d.str(c.Attributes, "username_claim", &o.UsernameClaim)
	if a := d.strList(c.Attributes, "scopes", &o.Scopes); a != nil {
		hasOpenID := false
		for _, s := range o.Scopes {
			hasOpenID = hasOpenID || s == "openid"
		}
		if !hasOpenID {
			d.errorf(a.Expr.Range(), "scopes must include \"openid\"")
		}
	}
	if a := d.duration(c.Attributes, "session_ttl", &o.SessionTTL); a != nil && (o.SessionTTL < time.Minute || o.SessionTTL > 30*24*time.Hour) {
		d.errorf(a.Expr.Range(), "session_ttl must be between 1m and 720h")
	}
	d.cfg.OIDC = o
}

// checkWebURL checks an issuer or redirect URL: https, or http to a
// loopback host (a provider on the same machine, tests); no credentials,
// query or fragment.
func checkWebURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "https" && !(u.Scheme == "http" && isLoopbackHost(u.Hostname())):
		return errorString("want https:// (http:// only for a loopback host)")
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return errorString("want scheme://host[:port][/path], without credentials, query or fragment")
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

var selfServiceSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "keys"},
		{Name: "max_keys"},
	},
}

// decodeSelfService decodes self_service { keys, max_keys }.
func (d *decoder) decodeSelfService(b *hcl.Block) {
	if b == nil {
		return
	}
	s := &SelfService{DefRange: b.DefRange}
	c := d.content(b.Body, selfServiceSchema)
	d.bool(c.Attributes, "keys", &s.Keys)
	intAttr(d, c.Attributes, "max_keys", 0, 10000, &s.MaxKeys)
	d.cfg.SelfService = s
}
