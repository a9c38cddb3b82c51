package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// AdminStore is what the gateway needs of a store for delegated
// administration (store.SQLite and store.Postgres implement it).
type AdminStore interface {
	AdminGeneration(ctx context.Context) (int64, error)
	CreateUser(ctx context.Context, u llmflow.User) error
	User(ctx context.Context, name string) (llmflow.User, error)
	Users(ctx context.Context) ([]llmflow.User, error)
	DisableUser(ctx context.Context, name string, at time.Time) error
	CreateAdminToken(ctx context.Context, t llmflow.AdminToken) error
	AdminTokenByHash(ctx context.Context, hash [32]byte) (llmflow.AdminToken, error)
	AdminTokens(ctx context.Context, user string) ([]llmflow.AdminToken, error)
	RevokeAdminToken(ctx context.Context, user, id string, at time.Time) error
	GrantRole(ctx context.Context, g llmflow.RoleGrant) error
	RevokeRole(ctx context.Context, g llmflow.RoleGrant) error
	Roles(ctx context.Context, user string) ([]llmflow.RoleGrant, error)
	SetTeamModels(ctx context.Context, team string, models []string) error
	TeamModels(ctx context.Context) (map[string][]string, error)
	PutAdminAccount(ctx context.Context, a llmflow.AdminAccount) error
	AdminAccounts(ctx context.Context) ([]llmflow.AdminAccount, error)
	AppendAudit(ctx context.Context, e llmflow.AuditEntry) error
	Audit(ctx context.Context, f llmflow.AuditFilter) ([]llmflow.AuditEntry, error)
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
// outage; after that the admin API answers 503.
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
func (g *Gateway) forgetUser(user string) {
	g.principals.RemoveFunc(func(_ [32]byte, e *cachedPrincipal) bool { return e.user.Name == user })
}

// adminPrincipal authenticates an admin request with the operator
// secrets (operatorAuth) and then the admin tokens: the master key is
// compared first, in constant time; an llma- token is looked up by its
// SHA-256 (principalCache). Every failure, master key or token, counts in
// the operator limiter of the caller's network, never bad client keys; a
// network past the limit is answered 429 before any comparison or lookup.
func (g *Gateway) adminPrincipal(r *http.Request) (Principal, error) {
	now := g.now()
	hdr := r.Header.Get("Authorization")
	tok, _ := bearer(hdr)
	if g.admins == nil || !llmflow.LooksLikeAdminToken(tok) || g.secretAuth.match(tok)&secretMaster != 0 {
		if _, err := g.secretAuth.check(hdr, r.RemoteAddr, now, secretMaster, errAdminAuth); err != nil {
			g.operatorDenied(err)
			return Principal{}, err
		}
		return Principal{Name: "master", Role: RoleProxyAdmin}, nil
	}
	net := clientNetwork(r.RemoteAddr)
	if blocked, after := g.secretAuth.limiter.blocked(net, now); blocked {
		err := withRetryAfter(errTooManyBad, after)
		g.operatorDenied(err)
		return Principal{}, err
	}
	e, err := g.resolveToken(r.Context(), llmflow.HashKey(tok), now)
	switch {
	case err == nil:
		return g.principalOf(e), nil
	case llmflow.ErrorCode(err) == llmflow.EUNAUTHORIZED:
		g.secretAuth.limiter.fail(net, now)
		g.operatorDenied(err)
		return Principal{}, err
	}
	return Principal{}, err
}

// resolveToken returns the cached principal of an admin token's hash,
// current at the store's admin generation (see principalCache).
func (g *Gateway) resolveToken(ctx context.Context, h [32]byte, now time.Time) (*cachedPrincipal, error) {
	cached, _, fresh := g.principals.Get(h, now)
	gen, err := g.admins.AdminGeneration(ctx)
	if err != nil {
		if cached != nil && fresh {
			g.log.Warn("admin store unavailable: serving a cached admin principal", "user", cached.user.Name, "err", err)
			return cached, nil
		}
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	if cached != nil && cached.gen == gen {
		g.principals.Put(h, cached, now) // confirmed current as of now
		return cached, nil
	}
	t, err := g.admins.AdminTokenByHash(ctx, h)
	switch {
	case errors.Is(err, llmflow.ErrNotFound) || llmflow.ErrorCode(err) == llmflow.ENOTFOUND:
		return nil, errAdminAuth
	case err != nil:
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	case subtle.ConstantTimeCompare(h[:], t.Hash[:]) != 1:
		return nil, &llmflow.Error{Code: llmflow.EINTERNAL, Message: "internal error", Err: errors.New("store returned an admin token with another hash")}
	case !t.Active():
		return nil, errAdminAuth
	}
	u, err := g.admins.User(ctx, t.User)
	if err != nil {
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	if !u.Active() {
		return nil, errAdminAuth
	}
	roles, err := g.admins.Roles(ctx, u.Name)
	if err != nil {
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	e := &cachedPrincipal{token: t, user: u, roles: roles, gen: gen}
	g.principals.Put(h, e, now)
	return e, nil
}

// principalOf places a user's grants in the tree served now: a team
// grant covers its team in the organisation the tree puts it under.
func (g *Gateway) principalOf(e *cachedPrincipal) Principal {
	v := g.accts.Load()
	p := Principal{Name: e.user.Name, User: true, Grants: make([]authz.Grant, 0, len(e.roles))}
	for _, r := range e.roles {
		gr := authz.Grant{Role: authz.Role(r.Role), Org: r.Org, Team: r.Team}
		if gr.Team != "" {
			gr.Org = v.orgOfTeam(gr.Team)
		}
		p.Grants = append(p.Grants, gr)
	}
	return p
}

// orgOfTeam is the organisation of a team in this tree, "" for a name
// that is not a team.
func (v *accountView) orgOfTeam(team string) string {
	if t, ok := v.byName[team]; ok && t.Kind == llmflow.KindTeam {
		return t.Parent
	}
	return ""
}

// teamScope is the scope of the named team in the tree served now; false
// when there is no such team.
func (g *Gateway) teamScope(team string) (authz.Scope, bool) {
	org := g.accts.Load().orgOfTeam(team)
	return authz.TeamScope(org, team), org != ""
}

// admin wraps an admin handler with authentication.
func (g *Gateway) admin(h func(w http.ResponseWriter, r *http.Request, p Principal) error) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := g.adminPrincipal(r)
		if err != nil {
			return err
		}
		return h(w, r, p)
	}
}

// withAdminStore refuses a route that needs the admin store on a gateway
// without one.
func (g *Gateway) withAdminStore(h func(w http.ResponseWriter, r *http.Request, p Principal) error) func(w http.ResponseWriter, r *http.Request, p Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		if g.admins == nil {
			return errNoAdminStore
		}
		return h(w, r, p)
	}
}

// adminRoutes registers every admin route. The route × role matrix test
// (admin_matrix_test.go) enumerates what is registered here: a route
// without a row there fails it.
func (g *Gateway) adminRoutes() {
	a := func(h func(w http.ResponseWriter, r *http.Request, p Principal) error) handler { return g.admin(h) }
	s := func(h func(w http.ResponseWriter, r *http.Request, p Principal) error) handler {
		return g.admin(g.withAdminStore(h))
	}
	g.handle(http.MethodGet, "/admin/whoami", a(g.whoami))

	g.handleMethods("/admin/users", map[string]handler{http.MethodGet: s(g.listUsers), http.MethodPost: s(g.createUser)})
	g.handle(http.MethodDelete, "/admin/users/{name}", s(g.disableUser))
	g.handleMethods("/admin/users/{name}/tokens", map[string]handler{http.MethodGet: s(g.listTokens), http.MethodPost: s(g.createToken)})
	g.handle(http.MethodDelete, "/admin/users/{name}/tokens/{id}", s(g.revokeToken))
	g.handleMethods("/admin/users/{name}/roles", map[string]handler{
		http.MethodGet: s(g.listRoles), http.MethodPut: s(g.grantRole), http.MethodDelete: s(g.revokeRole),
	})

	g.handleMethods("/admin/orgs", map[string]handler{http.MethodGet: a(g.listOrgs), http.MethodPost: s(g.createOrg)})
	g.handle(http.MethodDelete, "/admin/orgs/{name}", s(g.accountState(llmflow.KindOrg, true)))
	g.handle(http.MethodPost, "/admin/orgs/{name}/enable", s(g.accountState(llmflow.KindOrg, false)))
	g.handle(http.MethodPut, "/admin/orgs/{name}/share", s(g.setShare(llmflow.KindOrg)))
	g.handleMethods("/admin/teams", map[string]handler{http.MethodGet: a(g.listTeams), http.MethodPost: s(g.createTeam)})
	g.handle(http.MethodDelete, "/admin/teams/{name}", s(g.accountState(llmflow.KindTeam, true)))
	g.handle(http.MethodPost, "/admin/teams/{name}/enable", s(g.accountState(llmflow.KindTeam, false)))
	g.handle(http.MethodPut, "/admin/teams/{name}/share", s(g.setShare(llmflow.KindTeam)))
	g.handleMethods("/admin/teams/{team}/projects", map[string]handler{http.MethodGet: a(g.listProjects), http.MethodPost: s(g.createProject)})
	g.handle(http.MethodDelete, "/admin/teams/{team}/projects/{name}", s(g.accountState(llmflow.KindProject, true)))
	g.handle(http.MethodPost, "/admin/teams/{team}/projects/{name}/enable", s(g.accountState(llmflow.KindProject, false)))
	g.handle(http.MethodPut, "/admin/teams/{team}/projects/{name}/share", s(g.setShare(llmflow.KindProject)))
	g.handleMethods("/admin/teams/{team}/models", map[string]handler{http.MethodGet: a(g.getTeamModels), http.MethodPut: s(g.setTeamModels)})

	g.handleMethods("/admin/keys", map[string]handler{
		http.MethodGet:  a(g.listKeys),
		http.MethodPost: a(g.createKey),
	})
	g.handle(http.MethodDelete, "/admin/keys/{id}", a(g.revokeKey))

	g.handle(http.MethodGet, "/admin/fairshare", a(g.fairshareFiltered))
	g.handle(http.MethodGet, "/admin/sync", a(g.listSyncsProxyWide))
	g.handle(http.MethodGet, "/admin/spend", a(g.spendFiltered))
	g.handle(http.MethodGet, "/admin/usage.csv", a(g.usageCSVFiltered))
	g.handle(http.MethodGet, "/admin/audit", s(g.listAudit))
	g.routingRoutes(a)    // admin_upstreams.go
	g.adminBudgetRoutes() // admin_budgets.go
}

// decodeAdmin decodes an admin JSON body: at most 64 KiB, unknown fields
// refused, one value only.
func decodeAdmin(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return llmflow.Errorf(llmflow.ETOOLARGE, "admin request body larger than 64 KiB")
		}
		return llmflow.Errorf(llmflow.EINVALID, "invalid JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.Decode(new(json.RawMessage)) != io.EOF {
		return llmflow.Errorf(llmflow.EINVALID, "invalid JSON body: more than one value")
	}
	return nil
}

// knownParams refuses a query parameter that is not in names: a
// misspelt filter must not list everything.
func knownParams(r *http.Request, names ...string) error {
	for name := range r.URL.Query() {
		if !slices.Contains(names, name) {
			if len(names) == 0 {
				return llmflow.Errorf(llmflow.EINVALID, "unknown query parameter %q (this route takes none)", name)
			}
			return llmflow.Errorf(llmflow.EINVALID, "unknown query parameter %q (known: %s)", name, strings.Join(names, ", "))
		}
	}
	return nil
}

// KeyRequest creates a key. Project, when set, must be an account under
// Team in the tree served now. RPM, TPM and MaxInFlight are the key's
// limits (0 = unlimited): requests per minute and tokens per minute on a
// sliding 60 s window, and requests in flight.
type KeyRequest struct {
	Team        string   `json:"team"`
	Project     string   `json:"project,omitempty"`
	Name        string   `json:"name"`
	Owner       string   `json:"owner,omitempty"`
	RPM         int      `json:"rpm,omitempty"`
	TPM         int      `json:"tpm,omitempty"`
	MaxInFlight int      `json:"max_inflight,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// keyView is a key as listings show it: never the secret, never its hash.
type keyView struct {
	ID        string     `json:"id"`
	Key       string     `json:"key,omitempty"` // the secret, on creation only
	Hint      string     `json:"hint"`
	Name      string     `json:"name"`
	Org       string     `json:"org"`
	Team      string     `json:"team"`
	Project   string     `json:"project,omitempty"`
	Owner     string     `json:"owner,omitempty"`
	Tags      []string   `json:"tags"`
	RPM       int        `json:"rpm"`
	TPM       int        `json:"tpm"`
	MaxIn     int        `json:"max_inflight"`
	Active    bool       `json:"active"` // false: deactivated or revoked
	Disabled  bool       `json:"disabled,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

func viewOf(k llmflow.Key) keyView {
	v := keyView{ID: k.ID, Hint: k.Hint, Name: k.Name, Org: k.Org, Team: k.Team, Project: k.Project, Owner: k.Owner,
		Tags: k.Tags, RPM: k.RPM, TPM: k.TPM, MaxIn: k.MaxInFlight, Active: k.Active(), Disabled: k.Disabled, CreatedAt: k.CreatedAt}
	if v.Tags == nil {
		v.Tags = []string{}
	}
	if !k.RevokedAt.IsZero() {
		t := k.RevokedAt
		v.RevokedAt = &t
	}
	return v
}

// CreateKey creates a key for req on behalf of p and returns it with its
// secret, which is not kept anywhere.
func (g *Gateway) CreateKey(ctx context.Context, req KeyRequest, p Principal) (llmflow.Key, string, error) {
	team, ok := g.accts.Load().team(req.Team)
	switch {
	case req.Team == "":
		return llmflow.Key{}, "", &llmflow.Error{Code: llmflow.EINVALID, Message: "team is required", Param: "team"}
	case !ok:
		return llmflow.Key{}, "", &llmflow.Error{Code: llmflow.ENOTFOUND, Message: "unknown team " + quote(req.Team), Param: "team"}
	case !p.mayManageTeam(team.Parent, team.Name) && !p.may(authz.OwnKeys, authz.TeamScope(team.Parent, team.Name)):
		return llmflow.Key{}, "", forbidden("you may not create keys for team %q", req.Team)
	case !p.mayManageTeam(team.Parent, team.Name) && req.Owner != "" && req.Owner != p.Name:
		// a member creates keys owned by themselves only
		return llmflow.Key{}, "", &llmflow.Error{Code: llmflow.EFORBIDDEN, Param: "owner",
			Message: fmt.Sprintf("a member creates keys owned by themselves: owner must be %q or left out", p.Name)}
	case team.Disabled:
		return llmflow.Key{}, "", llmflow.Errorf(llmflow.EFORBIDDEN, "team %q is disabled", req.Team)
	}
	if req.Project != "" {
		switch under, off := g.accts.Load().projectChain(req.Project, team.Name); {
		case !under:
			return llmflow.Key{}, "", &llmflow.Error{Code: llmflow.EINVALID, Param: "project",
				Message: fmt.Sprintf("project %s is not an account under team %s", quote(req.Project), quote(team.Name))}
		case off: // its key would be refused at every request
			return llmflow.Key{}, "", &llmflow.Error{Code: llmflow.EFORBIDDEN, Param: "project",
				Message: fmt.Sprintf("project %s is disabled", quote(req.Project))}
		}
	}
	if !p.mayManageTeam(team.Parent, team.Name) {
		req.Owner = p.Name
	}
	secret, hash, hint := llmflow.NewKeySecret()
	k := llmflow.Key{
		ID: llmflow.NewID("key_"), Hash: hash, Hint: hint, Name: req.Name,
		Org: team.Parent, Team: team.Name, Project: req.Project, Owner: req.Owner,
		RPM: req.RPM, TPM: req.TPM, MaxInFlight: req.MaxInFlight, Tags: req.Tags,
		CreatedAt: g.now().UTC(),
	}
	if err := k.Validate(); err != nil {
		return llmflow.Key{}, "", err
	}
	if err := g.keys.CreateKey(ctx, k); err != nil {
		return llmflow.Key{}, "", err
	}
	g.auth.misses.Remove(hash)
	g.log.Info("key created", "id", k.ID, "team", k.Team, "project", k.Project, "by", p.Name)
	return k, secret, nil
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func (g *Gateway) createKey(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req KeyRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	k, secret, err := g.CreateKey(r.Context(), req, p)
	if err != nil {
		return err
	}
	v := viewOf(k)
	g.audit(r, p, "key.create", "key "+k.ID, authz.TeamScope(k.Org, k.Team), nil, v)
	v.Key = secret
	return writeJSON(w, http.StatusCreated, v)
}

func (g *Gateway) listKeys(w http.ResponseWriter, r *http.Request, p Principal) error {
	q := r.URL.Query()
	for name := range q {
		switch name {
		case "org", "team", "include_revoked":
		default:
			// a misspelt filter must not list every key
			return llmflow.Errorf(llmflow.EINVALID, "unknown query parameter %q (known: org, team, include_revoked)", name)
		}
	}
	f := llmflow.KeyFilter{Org: q.Get("org"), Team: q.Get("team")}
	switch v := q.Get("include_revoked"); v {
	case "true":
		f.IncludeRevoked = true
	case "", "false":
	default: // "1" or "yes" must not list the active keys only, silently
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "include_revoked",
			Message: fmt.Sprintf("include_revoked must be true or false, got %s", quote(v))}
	}
	keys, err := g.keys.ListKeys(r.Context(), f)
	if err != nil {
		return err
	}
	view := g.accts.Load()
	out := make([]keyView, 0, len(keys))
	for i := range keys {
		k := &keys[i]
		if p.mayReadKey(authz.TeamScope(view.orgOf(k), k.Team), k) {
			out = append(out, viewOf(*k))
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

func (g *Gateway) revokeKey(w http.ResponseWriter, r *http.Request, p Principal) error {
	id := r.PathValue("id")
	k, err := g.keys.KeyByID(r.Context(), id)
	if err != nil {
		if llmflow.ErrorCode(err) == llmflow.ENOTFOUND {
			return llmflow.Errorf(llmflow.ENOTFOUND, "no key %q", id)
		}
		return err
	}
	scope := authz.TeamScope(g.accts.Load().orgOf(&k), k.Team)
	if !p.mayOwnKey(scope, &k) {
		return forbidden("you may not revoke key %q", id)
	}
	if err := g.keys.RevokeKey(r.Context(), id, g.now().UTC()); err != nil {
		return err
	}
	g.auth.forget(k.Hash)
	g.log.Info("key revoked", "id", id, "by", p.Name)
	before := viewOf(k)
	k, err = g.keys.KeyByID(r.Context(), id)
	if err != nil {
		return err
	}
	g.audit(r, p, "key.revoke", "key "+id, scope, before, viewOf(k))
	return writeJSON(w, http.StatusOK, viewOf(k))
}

// initAdmin sets up delegated administration from o (New): the principal
// cache, the admin account changes (before the first view of the tree).
func (g *Gateway) initAdmin(o Options) error {
	g.admins = o.Admin
	g.principals = newPrincipalCache(10_000, 5*time.Minute)
	g.auditFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmflow_audit_failed_total", Help: "Admin writes whose audit entry could not be stored (logged instead).",
	})
	g.reg.MustRegister(g.auditFailed)
	if g.admins == nil {
		return nil
	}
	return g.loadAdminAccounts(context.Background())
}

// Routes lists every registered route as "METHOD /pattern", in
// registration order (the route × role matrix test enumerates the admin
// ones).
func (g *Gateway) Routes() []string { return slices.Clone(g.patterns) }
