// Package admin is the control plane's HTTP API: every /admin/* handler
// (keys, organisations, teams, projects, users, tokens, roles, budgets,
// key limits, runtime upstreams and aliases, team model lists, spend,
// fair-share state, Slurm import history, audit trail), its
// authentication (the master key, admin tokens) and authorization
// (package authz on the tree served now).
//
// It drives a running gateway only through the gateway's control surface
// (gateway/control.go) and reads and writes the store through the
// interfaces of its Options, each an explicit capability: nil turns that
// feature off (its routes answer 503), nothing is discovered by type
// assertion. After each store commit that a cache of another replica must
// not outlive it calls its Notifier.
//
// Handler serves /admin/* only; With composes it with the data plane on
// one listener, as serve does without an admin listener.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// Notifier tells the other replicas sharing the store about a change
// they must not serve stale. Handler calls it after the change is stored
// (never before, never for a failed write), from the request's goroutine;
// an implementation must not block for long and logs its own failures
// (the change is stored: the others see it at their next reload, within
// seconds, or when their key cache entry expires, within a minute).
//
// Every audited write calls exactly one of AdminChanged and TreeChanged;
// a write that changes keys also calls KeyChanged once per key.
type Notifier interface {
	// KeyChanged: the key whose secret hashes to hash was revoked, or its
	// limits or activation changed. Receivers forget it
	// (gateway.ForgetKey), so their next request with it reads the store.
	KeyChanged(ctx context.Context, hash [32]byte)
	// AdminChanged: users, tokens, roles, team model lists, runtime
	// upstreams or aliases, or budgets changed. Receivers reload
	// (Handler.AdminChanged).
	AdminChanged(ctx context.Context)
	// TreeChanged: an organisation, team or project was created,
	// disabled, enabled or given a share through the API. Receivers
	// reload the admin account changes (Handler.AdminChanged).
	TreeChanged(ctx context.Context)
}

// Options configure a Handler. Gateway and Keys are required; every
// other store capability is optional: nil turns its feature off.
type Options struct {
	// Gateway is the data plane the handler controls.
	Gateway *gateway.Gateway
	// Keys creates, lists and revokes client keys.
	Keys KeyStore
	// KeyLimits changes a key's limits and activation; nil answers 503 on
	// PUT /admin/keys/{id}/limits and …/active.
	KeyLimits KeyLimitStore
	// KeyRotation rotates keys; nil answers 503 on POST
	// /admin/keys/{id}/rotate.
	KeyRotation KeyRotateStore
	// Admin keeps users, admin tokens, roles, team model lists, accounts
	// changed through the API and the audit trail; nil = only the master
	// key administers, and those routes answer 503.
	Admin AdminStore
	// Routing keeps the runtime upstreams and aliases; nil = only the
	// configuration routes: the routing writes answer 503.
	Routing RoutingStore
	// Budgets writes budgets and increases; nil answers 503 on the budget
	// routes (the gateway enforces what its own budget store holds).
	Budgets BudgetWriter
	// Spend reads accounting rollups for GET /admin/spend and
	// /admin/usage.csv; nil answers 503 there.
	Spend SpendReader
	// SyncHistory lists the Slurm import runs for GET /admin/sync; nil
	// lists none.
	SyncHistory SyncHistory
	// Notifier is told of each change other replicas must not serve
	// stale; nil = one replica.
	Notifier Notifier
	// Registry receives the admin API's metrics
	// (llmflow_audit_failed_total); nil = the gateway's (served at its
	// /metrics).
	Registry prometheus.Registerer
	Log      *slog.Logger
	// Now is the clock; nil = the gateway's.
	Now func() time.Time
	// AllowedOrigins are the browser origins ("https://console.example.org")
	// whose pages may send admin writes, besides the admin API's own (config
	// admin { allowed_origins }). Every other cross-origin write is refused.
	AllowedOrigins []string
	// Sessions authenticates requests without an Authorization header by
	// their web console session (package console); nil: bearer tokens
	// only.
	Sessions Sessions
	// SelfService is what researchers may do for themselves
	// (self_service); the zero value: no keys from single sign-on, no
	// cap.
	SelfService SelfService
}

// Handler serves the admin API. Create it with New.
type Handler struct {
	gw          *gateway.Gateway
	keys        KeyStore
	keyLimits   KeyLimitStore
	keyRotation KeyRotateStore
	store       AdminStore
	routing     RoutingStore
	budgets     BudgetWriter
	spend       SpendReader
	syncs       SyncHistory
	notify      Notifier
	sessions    Sessions    // nil: bearer tokens only (session.go)
	selfService SelfService // session.go
	log         *slog.Logger
	now         func() time.Time

	principals *principalCache
	// adminGen is the highest admin generation this handler read from
	// the store: a principal cached at an older one is never served
	// stale (something changed since, a revocation maybe).
	adminGen    atomic.Int64
	auditFailed prometheus.Counter
	mux         http.Handler // the routes behind the cross-origin check

	treeMu    sync.Mutex // serialises account changes: store, then publish
	modelsMu  sync.Mutex // serialises team model list changes
	routingMu sync.Mutex // serialises routing changes: read, check, store, apply
}

// New builds the admin handler of gw and puts in force what the store
// keeps of the control plane's state: the admin account changes, the team
// model lists and the runtime upstreams and aliases.
func New(o Options) (*Handler, error) {
	if o.Gateway == nil || o.Keys == nil {
		return nil, errors.New("new admin handler: Gateway and Keys are required")
	}
	h := &Handler{
		gw: o.Gateway, keys: o.Keys, keyLimits: o.KeyLimits, keyRotation: o.KeyRotation, store: o.Admin, routing: o.Routing, budgets: o.Budgets,
		spend: o.Spend, syncs: o.SyncHistory, notify: o.Notifier, sessions: o.Sessions, selfService: o.SelfService,
		log: o.Log, now: o.Now,
		principals: newPrincipalCache(10_000, 5*time.Minute),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = h.gw.Now
	}
	h.auditFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmflow_audit_failed_total", Help: "Admin writes whose audit entry could not be stored (logged instead).",
	})
	reg := o.Registry
	if reg == nil {
		reg = h.gw.Registry()
	}
	if err := reg.Register(h.auditFailed); err != nil {
		return nil, fmt.Errorf("new admin handler: %w", err)
	}
	if err := h.load(context.Background()); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for path, rs := range h.byPath() {
		mux.HandleFunc(path, h.serveMethods(path, rs))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		gateway.WriteError(w, h.log, gateway.NotFound(r))
	})
	cop := http.NewCrossOriginProtection()
	for _, o := range o.AllowedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("new admin handler: allowed origin: %w", err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(h.crossOriginRefused))
	h.mux = cop.Handler(mux)
	return h, nil
}

// crossOriginRefused answers an admin write that a browser sent from a
// page of another origin (net/http's CrossOriginProtection: Sec-Fetch-Site,
// else Origin against Host) and that Options.AllowedOrigins does not list:
// 403 in the OpenAI error shape, logged. Reads, and requests without those
// headers (the CLI, scripts), are not checked.
func (h *Handler) crossOriginRefused(w http.ResponseWriter, r *http.Request) {
	h.log.Warn("cross-origin admin write refused", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"),
		"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
	gateway.WriteError(w, h.log, llmflow.Errorf(llmflow.EFORBIDDEN,
		"cross-origin admin write refused: a browser page of another origin may not change llmflow (admin { allowed_origins } lists the ones that may)"))
}

// IsPath reports whether path is the admin API's (/admin/…): what With
// sends to the admin handler, and what a client listener without the
// admin API refuses.
func IsPath(path string) bool { return strings.HasPrefix(path, "/admin/") }

// ServeHTTP serves /admin/*; any other path is 404 in the OpenAI error
// shape. Admin writes from browser pages of other origins are refused
// (crossOriginRefused).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gateway.CloseAfterAmbiguousFraming(w, r)
	h.mux.ServeHTTP(w, r)
}

// With serves /admin/* with h and every other path with data (the
// gateway): one listener for both, the paths, answers and errors as when
// the gateway served its admin routes itself.
func (h *Handler) With(data http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsPath(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		data.ServeHTTP(w, r)
	})
}

// handlerFunc is an admin route's handler: p is the authenticated caller;
// an error goes to gateway.WriteError.
type handlerFunc func(h *Handler, w http.ResponseWriter, r *http.Request, p Principal) error

// Route is one admin route: its method and pattern (net/http), the authz
// action its handler checks on the scope the request names (0: decided
// per request, by the budget's kind or the role granted, or none:
// whoami), whether it needs the admin store (503 without), and its
// handler.
type Route struct {
	Method, Pattern string
	Action          authz.Action
	NeedsStore      bool
	handle          handlerFunc
}

// routes is every admin route. The route × role matrix test iterates it:
// a route without a row there fails.
var routes = []Route{
	{"GET", "/admin/whoami", 0, false, (*Handler).whoami},
	{"GET", "/admin/self", 0, false, (*Handler).self}, // session.go

	{"GET", "/admin/users", authz.Read, true, (*Handler).listUsers},
	{"POST", "/admin/users", authz.CreateUsers, true, (*Handler).createUser},
	{"DELETE", "/admin/users/{name}", authz.DisableUsers, true, (*Handler).disableUser},
	{"GET", "/admin/users/{name}/tokens", authz.ManageTokens, true, (*Handler).listTokens},
	{"POST", "/admin/users/{name}/tokens", authz.ManageTokens, true, (*Handler).createToken},
	{"DELETE", "/admin/users/{name}/tokens/{id}", authz.ManageTokens, true, (*Handler).revokeToken},
	{"GET", "/admin/users/{name}/roles", authz.Read, true, (*Handler).listRoles},
	{"PUT", "/admin/users/{name}/roles", 0, true, (*Handler).grantRole},
	{"DELETE", "/admin/users/{name}/roles", 0, true, (*Handler).revokeRole},

	{"GET", "/admin/orgs", authz.Read, false, (*Handler).listOrgs},
	{"POST", "/admin/orgs", authz.ManageOrgs, true, (*Handler).createOrg},
	{"DELETE", "/admin/orgs/{name}", authz.ManageOrgs, true, accountState(llmflow.KindOrg, true)},
	{"POST", "/admin/orgs/{name}/enable", authz.ManageOrgs, true, accountState(llmflow.KindOrg, false)},
	{"PUT", "/admin/orgs/{name}/share", authz.ManageOrgs, true, setShare(llmflow.KindOrg)},
	{"GET", "/admin/teams", authz.Read, false, (*Handler).listTeams},
	{"POST", "/admin/teams", authz.ManageTeams, true, (*Handler).createTeam},
	{"DELETE", "/admin/teams/{name}", authz.ManageTeams, true, accountState(llmflow.KindTeam, true)},
	{"POST", "/admin/teams/{name}/enable", authz.ManageTeams, true, accountState(llmflow.KindTeam, false)},
	{"PUT", "/admin/teams/{name}/share", authz.ManageTeams, true, setShare(llmflow.KindTeam)},
	{"GET", "/admin/teams/{team}/projects", authz.Read, false, (*Handler).listProjects},
	{"POST", "/admin/teams/{team}/projects", authz.ManageProjects, true, (*Handler).createProject},
	{"DELETE", "/admin/teams/{team}/projects/{name}", authz.ManageProjects, true, accountState(llmflow.KindProject, true)},
	{"POST", "/admin/teams/{team}/projects/{name}/enable", authz.ManageProjects, true, accountState(llmflow.KindProject, false)},
	{"PUT", "/admin/teams/{team}/projects/{name}/share", authz.ManageProjects, true, setShare(llmflow.KindProject)},
	{"GET", "/admin/teams/{team}/models", authz.Read, false, (*Handler).getTeamModels},
	{"PUT", "/admin/teams/{team}/models", authz.SetModels, true, (*Handler).setTeamModels},

	{"GET", "/admin/keys", authz.Read, false, (*Handler).listKeys},
	{"POST", "/admin/keys", authz.OwnKeys, false, (*Handler).createKey},
	{"GET", "/admin/keys/{id}", authz.Read, false, (*Handler).getKey},
	{"DELETE", "/admin/keys/{id}", authz.OwnKeys, false, (*Handler).revokeKey},
	{"POST", "/admin/keys/{id}/rotate", authz.OwnKeys, false, (*Handler).rotateKey},
	{"PUT", "/admin/keys/{id}/limits", authz.ManageKeys, false, (*Handler).setKeyLimits},
	{"PUT", "/admin/keys/{id}/active", authz.ManageKeys, false, (*Handler).setKeyActive},

	{"GET", "/admin/budgets", authz.Read, false, (*Handler).listBudgets},
	{"PUT", "/admin/budgets", 0, false, (*Handler).putBudget},
	{"DELETE", "/admin/budgets", 0, false, (*Handler).deleteBudget},
	{"POST", "/admin/budgets/increase", 0, false, (*Handler).increaseBudget},

	{"GET", "/admin/fairshare", authz.Read, false, (*Handler).fairshare},
	{"GET", "/admin/sync", authz.Read, false, (*Handler).listSyncs},
	{"GET", "/admin/spend", authz.Read, false, (*Handler).spendReport},
	{"GET", "/admin/usage.csv", authz.Read, false, (*Handler).usageCSV},
	{"GET", "/admin/audit", authz.Read, true, (*Handler).listAudit},

	{"GET", "/admin/upstreams", authz.Read, false, (*Handler).listAllUpstreams},
	{"GET", "/admin/models/{model}/upstreams", authz.Read, false, (*Handler).listModelUpstreams},
	{"POST", "/admin/models/{model}/upstreams", authz.ManageRouting, false, (*Handler).createUpstream},
	{"PUT", "/admin/models/{model}/upstreams/{name}", authz.ManageRouting, false, (*Handler).replaceUpstream},
	{"DELETE", "/admin/models/{model}/upstreams/{name}", authz.ManageRouting, false, (*Handler).removeUpstream},
	{"GET", "/admin/aliases", authz.Read, false, (*Handler).listAliases},
	{"PUT", "/admin/aliases/{name...}", authz.ManageRouting, false, (*Handler).setAlias},
	{"DELETE", "/admin/aliases/{name...}", authz.ManageRouting, false, (*Handler).removeAlias},
}

// Routes returns the admin routes, in table order.
func Routes() []Route { return slices.Clone(routes) }

// byPath groups the routes by pattern.
func (h *Handler) byPath() map[string][]Route {
	m := map[string][]Route{}
	for _, rt := range routes {
		m[rt.Pattern] = append(m[rt.Pattern], rt)
	}
	return m
}

// serveMethods serves one pattern's routes: authentication, then the
// admin store check, then the handler; any other method gets 405 with
// Allow, in the OpenAI error shape.
func (h *Handler) serveMethods(path string, rs []Route) http.HandlerFunc {
	byMethod := map[string]Route{}
	for _, rt := range rs {
		byMethod[rt.Method] = rt
	}
	allow := strings.Join(slices.Sorted(maps.Keys(byMethod)), ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		rt, ok := byMethod[r.Method]
		if !ok {
			w.Header().Set("Allow", allow)
			gateway.WriteError(w, h.log, gateway.MethodNotAllowed(r.Method, path))
			return
		}
		if err := h.serve(w, r, rt); err != nil {
			gateway.WriteError(w, h.log, err)
		}
	}
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, rt Route) error {
	p, err := h.principal(r)
	if err != nil {
		return err
	}
	if rt.NeedsStore && h.store == nil {
		return errNoAdminStore
	}
	return rt.handle(h, w, r, p)
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

func writeJSON(w http.ResponseWriter, status int, v any) error {
	return gateway.WriteJSON(w, status, v)
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// forgetKey drops a changed key from this gateway's caches and tells the
// other replicas: under its secret, and under the one before its last
// rotation when it has one (cached too while it worked).
func (h *Handler) forgetKey(ctx context.Context, k *llmflow.Key) {
	for _, hash := range [][32]byte{k.Hash, k.PrevHash} {
		if hash == ([32]byte{}) {
			continue
		}
		h.gw.ForgetKey(hash)
		if h.notify != nil {
			h.notify.KeyChanged(ctx, hash)
		}
	}
}
