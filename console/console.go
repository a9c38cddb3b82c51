// Package console is llmflow's web console: a page embedded in the binary
// (plain HTML, JavaScript and hand-drawn SVG; no CDN, no external font)
// served at /console/ on the admin listener, or on the client listener
// when there is none, and the sign-in that goes with it.
//
// The page is built on the admin API (package adminapi's routes): it
// shows what the caller's roles let the API answer, so a narrow role sees
// its scope only, in the page as in the API. People sign in through the
// centre's OpenID Connect provider (authorization code with PKCE, package
// github.com/coreos/go-oidc/v3; config oidc) or with an admin token; a
// session lives in this process, named by a Secure, HttpOnly,
// SameSite=Strict cookie, and the admin API takes it as a principal
// (admin.Sessions) for requests without an Authorization header. Writes
// need the session's CSRF token in a header as well as a same-origin
// request (net/http's CrossOriginProtection); every answer carries a
// strict Content-Security-Policy.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
)

//go:embed static
var staticFiles embed.FS

// Prefix is the console's path: IsPath reports whether a request is the
// console's.
const Prefix = "/console/"

// IsPath reports whether path is the console's (/console or /console/…).
func IsPath(path string) bool { return path == "/console" || strings.HasPrefix(path, Prefix) }

// Auth is what the console asks the admin API (admin.Handler implements
// it): whether a user signed in through the provider is an llmflow user,
// and whether a token signs in.
type Auth interface {
	// UserExists returns nil when name is an enabled llmflow user.
	UserExists(ctx context.Context, name string) error
	// CheckToken authenticates an admin token or the master key as a
	// request like r bearing it, and returns its principal's name.
	CheckToken(r *http.Request, token string) (string, error)
}

// Options configure a Console. Auth is required.
type Options struct {
	Auth Auth
	// OIDC is single sign-on (config oidc); nil: tokens only.
	OIDC *config.OIDC
	// ClientSecret is the OIDC client's secret (read from
	// OIDC.ClientSecretFile); "" for a public client.
	ClientSecret string
	// AllowedOrigins are other origins whose pages may post to the
	// console (config admin { allowed_origins }).
	AllowedOrigins []string
	// Store keeps the sessions; nil: a new one with the oidc block's
	// session_ttl.
	Store *Store
	// HTTPClient talks to the provider; nil: no environment proxy, no
	// redirects followed, 10 s per call.
	HTTPClient *http.Client
	Log        *slog.Logger
	Now        func() time.Time
}

// Console serves /console/. Create it with New.
type Console struct {
	auth     Auth
	oidc     *oidcClient // nil: tokens only
	sessions *Store
	log      *slog.Logger
	now      func() time.Time
	mux      http.Handler
	static   http.Handler
	pageTmpl *template.Template
}

// New builds the console.
func New(o Options) (*Console, error) {
	if o.Auth == nil {
		return nil, errors.New("new console: Auth is required")
	}
	c := &Console{auth: o.Auth, log: o.Log, now: o.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	ttl := config.DefaultSessionTTL
	if o.OIDC != nil {
		ttl = o.OIDC.SessionTTL
		hc := o.HTTPClient
		if hc == nil {
			hc = &http.Client{
				Transport:     &http.Transport{Proxy: nil},
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
				Timeout:       10 * time.Second,
			}
		}
		c.oidc = &oidcClient{cfg: *o.OIDC, secret: o.ClientSecret, hc: hc}
	}
	if c.sessions = o.Store; c.sessions == nil {
		c.sessions = NewStore(ttl, c.now)
	}
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("new console: %w", err)
	}
	c.static = http.StripPrefix("/console", http.FileServer(http.FS(sub)))
	c.pageTmpl = template.Must(template.New("page").Parse(pageHTML))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
	})
	mux.HandleFunc("GET /console/", c.serveStatic)
	mux.HandleFunc("GET /console/session", c.session)
	mux.HandleFunc("POST /console/login/token", c.loginToken)
	mux.HandleFunc("POST /console/logout", c.logout)
	mux.HandleFunc("GET /console/login", c.login)
	mux.HandleFunc("GET /console/callback", c.callback)
	cop := http.NewCrossOriginProtection()
	for _, origin := range o.AllowedOrigins {
		if err := cop.AddTrustedOrigin(origin); err != nil {
			return nil, fmt.Errorf("new console: allowed origin: %w", err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.log.Warn("cross-origin console request refused", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		c.fail(w, r, llmflow.Errorf(llmflow.EFORBIDDEN, "cross-origin request refused"))
	}))
	c.mux = cop.Handler(mux)
	return c, nil
}

// csp is the console's Content-Security-Policy: its own scripts, styles
// and API only; no inline script or style, no frames, no form posts
// elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// ServeHTTP serves /console/… with the security headers on every answer.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	c.static.ServeHTTP(w, r)
}

// fail answers err: JSON for the page's calls, an HTML page for a
// browser's navigation (the sign-in flow).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	msg := llmflow.ErrorMessage(err)
	if status >= 500 {
		c.log.Error("console", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		c.pageTmpl.Execute(w, struct{ Title, Message string }{http.StatusText(status), msg})
		return
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "code": llmflow.ErrorCode(err)}})
}

var statuses = map[string]int{
	llmflow.EINVALID: 400, llmflow.EUNAUTHORIZED: 401, llmflow.EFORBIDDEN: 403, llmflow.ENOTFOUND: 404,
	llmflow.ERATELIMIT: 429, llmflow.EUNAVAILABLE: 503, llmflow.EUPSTREAM: 502,
}

func statusOf(err error) int {
	if s, ok := statuses[llmflow.ErrorCode(err)]; ok {
		return s
	}
	return http.StatusInternalServerError
}

const pageHTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmflow: {{.Title}}</title>
<link rel="stylesheet" href="/console/style.css"></head>
<body><main class="narrow"><h1>llmflow</h1><p class="error">{{.Message}}</p>
<p><a href="/console/">Back to the console</a></p></main></body></html>
`
