package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/internal/boundedcache"
)

// Role is an administrative role (authz.Roles): the policy lives in the
// pure package authz; this package resolves who is calling and where a
// resource sits in the tree served now.
type Role = authz.Role

// RoleProxyAdmin is what the master key is.
const RoleProxyAdmin = authz.ProxyAdmin

// Principal is who is calling the admin API: the master key, or a user
// with an admin token (llma-…) and the roles the store says they hold.
type Principal struct {
	Name string
	// Role is a proxy-wide role held without a stored grant: proxy_admin
	// for the master key (and for code acting as it).
	Role Role
	// Grants are the user's roles, team grants with the team's
	// organisation in the tree served when the request came.
	Grants []authz.Grant
	// User is true for a user's token, false for the master key.
	User bool
	// SSO is true for a user signed in to the console through the
	// identity provider (session.go).
	SSO bool
}

// authz is p as the policy sees it.
func (p Principal) authz() authz.Principal {
	if p.Role == "" {
		return authz.Principal{Name: p.Name, Grants: p.Grants}
	}
	return authz.Principal{Name: p.Name, Grants: append(slices.Clip(p.Grants), authz.Grant{Role: p.Role})}
}

// may reports whether p may do a on a resource in scope s. Handlers of
// every admin route ask it (budgets: authz.BudgetAction(kind)).
func (p Principal) may(a authz.Action, s authz.Scope) bool { return p.authz().May(a, s) }

// everywhere reports whether p may do a on every scope: a listing of a
// needs no filtering.
func (p Principal) everywhere(a authz.Action) bool { return p.authz().Everywhere(a) }

// mayManageTeam reports whether p may manage every key of the team.
func (p Principal) mayManageTeam(org, team string) bool {
	return p.may(authz.ManageKeys, authz.TeamScope(org, team))
}

// mayReadKey reports whether p may see k (listings) in the tree: readers
// of its team, and a member for the keys they own.
func (p Principal) mayReadKey(s authz.Scope, k *llmflow.Key) bool {
	return p.may(authz.Read, s) || p.mayOwnKey(s, k)
}

// mayOwnKey reports whether p manages k as its owner: a member of its team
// whose name the key carries as owner, or anyone who manages the team's
// keys.
func (p Principal) mayOwnKey(s authz.Scope, k *llmflow.Key) bool {
	return p.may(authz.ManageKeys, s) || (p.User && k.Owner == p.Name && p.may(authz.OwnKeys, s))
}

// forbidden is the answer to a write out of the caller's scope.
func forbidden(format string, args ...any) error {
	return llmflow.Errorf(llmflow.EFORBIDDEN, format, args...)
}

var (
	errAdminAuth    = &llmflow.Error{Code: llmflow.EUNAUTHORIZED, Message: "admin routes need Authorization: Bearer <master key or admin token llma-…>"}
	errNoAdminStore = llmflow.Errorf(llmflow.EUNAVAILABLE, "this gateway keeps no admin store: only the master key administers")
)

// principalCache keeps the principals of admin tokens, so the admin API
// does not read them from the store on every request (and keeps working
// through a short store outage).
//
// Every admin request still asks the store one small question, its admin
// generation, which every change of users, tokens or roles bumps in the
// same transaction (on any gateway sharing the store). A cached principal
// read at the current generation is used as is; another generation reads
// it again, so a revoked token, a disabled user or a removed role takes
// effect at the next request, everywhere. When the store cannot answer,
// a principal confirmed within staleFor (the cache's TTL: each
// confirmation puts it again) keeps working: admin reads (and writes,
// which then fail on the store themselves) stay available through a short
// outage; after that the admin API answers 503. Only a principal
// confirmed at the latest generation this gateway read (at a request, at
// a reload, at another replica's notice) is served so: after any change
// it could not read again, a revocation maybe, the outage answers 503 to
// it; and a token the store refused leaves the cache at once. So a
// revocation seen anywhere is never undone by a stale cache.
type principalCache = boundedcache.Cache[[32]byte, *cachedPrincipal]

type cachedPrincipal struct {
	token llmflow.AdminToken
	user  llmflow.User
	roles []llmflow.RoleGrant
	gen   int64
}

func newPrincipalCache(max int, staleFor time.Duration) *principalCache {
	return boundedcache.New[[32]byte, *cachedPrincipal](max, staleFor)
}

// forgetUser drops every cached token of user (after a change of their
// tokens or roles on this gateway).
func (h *Handler) forgetUser(user string) {
	h.principals.RemoveFunc(func(_ [32]byte, e *cachedPrincipal) bool { return e.user.Name == user })
}

// principal authenticates an admin request with the gateway's operator
// secrets and then the admin tokens: the master key is compared first, in
// constant time; an llma- token is looked up by its SHA-256
// (principalCache). Every failure, master key or token, counts in the
// gateway's operator limiter of the caller's network, never bad client
// keys; a network past the limit is answered 429 before any comparison or
// lookup.
func (h *Handler) principal(r *http.Request) (Principal, error) {
	p, r, done, err := h.sessionPrincipal(r) // a console session (session.go)
	if done {
		return p, err
	}
	tok, _ := bearer(r.Header.Get("Authorization"))
	if h.store == nil || !llmflow.LooksLikeAdminToken(tok) || h.gw.IsMasterKey(tok) {
		if err := h.gw.CheckMasterKey(r, errAdminAuth); err != nil {
			return Principal{}, err
		}
		return Principal{Name: "master", Role: RoleProxyAdmin}, nil
	}
	if err := h.gw.OperatorLimited(r); err != nil {
		return Principal{}, err
	}
	e, err := h.resolveToken(r.Context(), llmflow.HashKey(tok), h.now())
	switch {
	case err == nil:
		return h.principalOf(e), nil
	case llmflow.ErrorCode(err) == llmflow.EUNAUTHORIZED:
		h.gw.OperatorFailed(r, err)
		return Principal{}, err
	}
	return Principal{}, err
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(hdr string) (string, bool) {
	const p = "Bearer "
	if len(hdr) <= len(p) || !strings.EqualFold(hdr[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(hdr[len(p):]), true
}

// resolveToken returns the cached principal of an admin token's hash,
// current at the store's admin generation (see principalCache).
func (h *Handler) resolveToken(ctx context.Context, hash [32]byte, now time.Time) (*cachedPrincipal, error) {
	cached, _, fresh := h.principals.Get(hash, now)
	gen, err := h.store.AdminGeneration(ctx)
	if err != nil {
		if cached != nil && fresh && cached.gen >= h.adminGen.Load() {
			h.log.Warn("admin store unavailable: serving a cached admin principal", "user", cached.user.Name, "err", err)
			return cached, nil
		}
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	h.sawGeneration(gen)
	if cached != nil && cached.gen == gen {
		h.principals.Put(hash, cached, now) // confirmed current as of now
		return cached, nil
	}
	e, err := h.readPrincipal(ctx, hash, gen)
	if err == errAdminAuth {
		h.principals.Remove(hash) // refused by the store: never served stale
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	h.principals.Put(hash, e, now)
	return e, nil
}

// sawGeneration records an admin generation read from the store.
func (h *Handler) sawGeneration(gen int64) {
	for {
		g := h.adminGen.Load()
		if gen <= g || h.adminGen.CompareAndSwap(g, gen) {
			return
		}
	}
}

// readPrincipal reads the principal of an admin token's hash from the
// store, at admin generation gen: errAdminAuth when the token, or its
// user, is unknown or inactive.
func (h *Handler) readPrincipal(ctx context.Context, hash [32]byte, gen int64) (*cachedPrincipal, error) {
	t, err := h.store.AdminTokenByHash(ctx, hash)
	switch {
	case errors.Is(err, llmflow.ErrNotFound) || llmflow.ErrorCode(err) == llmflow.ENOTFOUND:
		return nil, errAdminAuth
	case err != nil:
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	case subtle.ConstantTimeCompare(hash[:], t.Hash[:]) != 1:
		return nil, &llmflow.Error{Code: llmflow.EINTERNAL, Message: "internal error", Err: errors.New("store returned an admin token with another hash")}
	case !t.Active():
		return nil, errAdminAuth
	}
	u, err := h.store.User(ctx, t.User)
	if err != nil {
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	if !u.Active() {
		return nil, errAdminAuth
	}
	roles, err := h.store.Roles(ctx, u.Name)
	if err != nil {
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	return &cachedPrincipal{token: t, user: u, roles: roles, gen: gen}, nil
}

// principalOf places a user's grants in the tree served now: a team
// grant covers its team in the organisation the tree puts it under.
func (h *Handler) principalOf(e *cachedPrincipal) Principal {
	v := h.gw.Accounts()
	p := Principal{Name: e.user.Name, User: true, Grants: make([]authz.Grant, 0, len(e.roles))}
	for _, r := range e.roles {
		gr := authz.Grant{Role: authz.Role(r.Role), Org: r.Org, Team: r.Team}
		if gr.Team != "" {
			gr.Org = v.OrgOfTeam(gr.Team)
		}
		p.Grants = append(p.Grants, gr)
	}
	return p
}

// teamScope is the scope of the named team in the tree served now; false
// when there is no such team.
func (h *Handler) teamScope(team string) (authz.Scope, bool) {
	org := h.gw.Accounts().OrgOfTeam(team)
	return authz.TeamScope(org, team), org != ""
}
