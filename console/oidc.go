package console

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
)

// oidcClient is the console's side of the authorization code flow with
// PKCE. The provider is discovered at the first sign-in (and again after
// a failure), so a provider that is down does not stop the gateway.
type oidcClient struct {
	cfg    config.OIDC
	secret string
	hc     *http.Client

	mu       sync.Mutex
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
	pending  map[string]pendingLogin // by state
}

// pendingLogin is a sign-in sent to the provider and not back yet.
type pendingLogin struct {
	verifier, nonce string
	expires         time.Time
}

// loginTTL bounds the time at the provider's login page.
const loginTTL = 10 * time.Minute

// maxPending bounds the sign-ins in progress (the oldest go first).
const maxPending = 10_000

func (o *oidcClient) ctx(ctx context.Context) context.Context { return oidc.ClientContext(ctx, o.hc) }

// discover returns the provider, discovering it once.
func (o *oidcClient) discover(ctx context.Context) (*oidc.Provider, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, o.verifier, nil
	}
	p, err := oidc.NewProvider(o.ctx(ctx), o.cfg.Issuer)
	if err != nil {
		return nil, nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "the identity provider cannot be reached; try again later",
			Err: fmt.Errorf("discover %s: %w", o.cfg.Issuer, err)}
	}
	o.provider, o.verifier = p, p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID})
	return o.provider, o.verifier, nil
}

func (o *oidcClient) oauth2(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.secret, Endpoint: p.Endpoint(),
		RedirectURL: o.cfg.RedirectURL, Scopes: o.cfg.Scopes}
}

// begin records a sign-in in progress and returns its state.
func (o *oidcClient) begin(now time.Time) (state string, pl pendingLogin) {
	state = random(32)
	pl = pendingLogin{verifier: oauth2.GenerateVerifier(), nonce: random(32), expires: now.Add(loginTTL)}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending == nil {
		o.pending = map[string]pendingLogin{}
	}
	if len(o.pending) >= maxPending {
		for k, v := range o.pending {
			if !v.expires.After(now) || len(o.pending) >= maxPending {
				delete(o.pending, k)
			}
		}
	}
	o.pending[state] = pl
	return state, pl
}

// take returns and forgets the sign-in of state: each is used once.
func (o *oidcClient) take(state string, now time.Time) (pendingLogin, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pl, ok := o.pending[state]
	delete(o.pending, state)
	return pl, ok && pl.expires.After(now)
}

var errNoOIDC = llmflow.Errorf(llmflow.ENOTFOUND, "single sign-on is not configured on this gateway (oidc block): sign in with an admin token")

// login is GET /console/login: off to the provider, with a fresh state
// (also in a short-lived cookie, so the callback comes back to this
// browser), nonce and PKCE verifier.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.oidc == nil {
		c.fail(w, r, errNoOIDC)
		return
	}
	p, _, err := c.oidc.discover(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	state, pl := c.oidc.begin(c.now())
	// Lax: the provider's redirect back is a cross-site navigation
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: state, Path: "/", MaxAge: int(loginTTL.Seconds()),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, c.oidc.oauth2(p).AuthCodeURL(state, oidc.Nonce(pl.nonce), oauth2.S256ChallengeOption(pl.verifier)), http.StatusFound)
}

var errLogin = llmflow.Errorf(llmflow.EUNAUTHORIZED, "the sign-in could not be completed (expired, used twice or started in another browser): sign in again")

// callback is GET /console/callback: the provider's answer. The state
// must be the one this browser started with (its cookie), used once and
// recent; the code is exchanged with the PKCE verifier; the ID token
// verified (issuer, audience, expiry, signature) with the nonce; the
// username claim read from it or else from the userinfo endpoint (same
// subject), in lower case as Slurm keeps user names; and that name must
// be an llmflow user. Then a session starts.
func (c *Console) callback(w http.ResponseWriter, r *http.Request) {
	if c.oidc == nil {
		c.fail(w, r, errNoOIDC)
		return
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		c.fail(w, r, llmflow.Errorf(llmflow.EUNAUTHORIZED, "the identity provider refused the sign-in: %s %s", truncate(e, 100), truncate(q.Get("error_description"), 300)))
		return
	}
	state := q.Get("state")
	ck, err := r.Cookie(loginCookie)
	if err != nil || state == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(state)) != 1 {
		c.fail(w, r, errLogin)
		return
	}
	clearCookie(w, loginCookie, http.SameSiteLaxMode)
	pl, ok := c.oidc.take(state, c.now())
	if !ok {
		c.fail(w, r, errLogin)
		return
	}
	name, idToken, err := c.oidc.finish(r.Context(), q.Get("code"), pl)
	if err != nil {
		c.log.Warn("console sign-in failed", "err", err, "remote", r.RemoteAddr)
		c.fail(w, r, err)
		return
	}
	if err := c.auth.UserExists(r.Context(), name); err != nil {
		c.log.Info("console sign-in of a person without an llmflow user", "user", name, "err", err)
		c.fail(w, r, llmflow.Errorf(llmflow.EFORBIDDEN, "you signed in as %q, but %s", name, llmflow.ErrorMessage(err)))
		return
	}
	id, s := c.sessions.create(session{user: name, name: name, idToken: idToken})
	c.setSession(w, id, s)
	c.log.Info("console sign-in", "user", name, "remote", r.RemoteAddr)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// finish exchanges the code and returns the username claim and the raw
// ID token (for the provider's logout).
func (o *oidcClient) finish(ctx context.Context, code string, pl pendingLogin) (string, string, error) {
	fail := func(format string, args ...any) error {
		return &llmflow.Error{Code: llmflow.EUNAUTHORIZED, Message: "the sign-in could not be verified: sign in again", Err: fmt.Errorf(format, args...)}
	}
	p, v, err := o.discover(ctx)
	if err != nil {
		return "", "", err
	}
	ctx = o.ctx(ctx)
	tok, err := o.oauth2(p).Exchange(ctx, code, oauth2.VerifierOption(pl.verifier))
	if err != nil {
		return "", "", fail("exchange the code: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", "", fail("the token answer has no id_token")
	}
	idt, err := v.Verify(ctx, raw)
	if err != nil {
		return "", "", fail("verify the ID token: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(pl.nonce)) != 1 {
		return "", "", fail("the ID token's nonce is not the sign-in's")
	}
	claims := map[string]any{}
	if err := idt.Claims(&claims); err != nil {
		return "", "", fail("read the ID token's claims: %w", err)
	}
	name, _ := claims[o.cfg.UsernameClaim].(string)
	if name == "" {
		ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return "", "", fail("the ID token has no %q claim, and userinfo: %w", o.cfg.UsernameClaim, err)
		}
		if ui.Subject != idt.Subject {
			return "", "", fail("userinfo answered for another subject")
		}
		claims = map[string]any{}
		if err := ui.Claims(&claims); err != nil {
			return "", "", fail("read the userinfo claims: %w", err)
		}
		name, _ = claims[o.cfg.UsernameClaim].(string)
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" || len(name) > 128 || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return "", "", &llmflow.Error{Code: llmflow.EFORBIDDEN,
			Message: fmt.Sprintf("the identity provider gives no usable %q claim (oidc username_claim): ask an administrator", o.cfg.UsernameClaim)}
	}
	return name, raw, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// endSessionURL is where a browser signs out at the provider: its
// end_session_endpoint (RP-initiated logout) with the session's ID token
// as the hint; "" when the provider publishes none.
func (o *oidcClient) endSessionURL(ctx context.Context, idToken string) string {
	p, _, err := o.discover(ctx)
	if err != nil {
		return ""
	}
	var meta struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := p.Claims(&meta); err != nil || meta.EndSession == "" {
		return ""
	}
	u, err := url.Parse(meta.EndSession)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return ""
	}
	q := u.Query()
	q.Set("id_token_hint", idToken)
	q.Set("client_id", o.cfg.ClientID)
	u.RawQuery = q.Encode()
	return u.String()
}
