package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
)

// The control surface: what the control plane (package admin, the process
// host, the replicas' bus) may ask of or tell a running gateway. It is
// the only way in. Every change is published to the request path as a
// whole snapshot behind an atomic pointer (accounts view, routing tables,
// team model lists, budget table): no request takes a lock the control
// plane holds.
//
//	accounts   SetAccounts, SetAccountChanges, PutAccountChange, AccountChanges, BaseAccounts, Accounts
//	keys       ForgetKey, ForgetAllKeys
//	models     Models, TeamModels, SetTeamModels
//	routing    Routing, ApplyRouting, CheckUpstream, CheckAlias, Backends
//	budgets    BudgetTable, RefreshBudgets
//	state      FairshareReport, ReportSync, Registry, Now
//	operators  IsMasterKey, CheckMasterKey, OperatorLimited, OperatorFailed
//	HTTP       WriteError, WriteJSON, MethodNotAllowed, NotFound, ClientNetwork, CloseAfterAmbiguousFraming

// adminTree holds the base tree (configuration or Slurm) and the changes
// made through the admin API on top; mu serialises every replacement of
// the served view (Slurm syncs and admin changes).
type adminTree struct {
	mu      sync.Mutex
	base    llmflow.Accounts
	changes []llmflow.AdminAccount
}

// withAdminAccounts returns base with the admin changes applied, and
// remembers base for the next change (g.tree.mu held).
func (g *Gateway) withAdminAccounts(base llmflow.Accounts) llmflow.Accounts {
	g.tree.base = base
	return mergeAdminAccounts(base, g.tree.changes)
}

// mergeAdminAccounts applies admin changes to a tree: a disable mark
// disables an account of the tree; an account created through the admin
// API and absent from the tree is added under its parent (skipped when the
// parent is gone, so the tree stays parents-first).
func mergeAdminAccounts(base llmflow.Accounts, changes []llmflow.AdminAccount) llmflow.Accounts {
	if len(changes) == 0 {
		return base
	}
	out := slices.Clone(base)
	idx := make(map[string]int, len(out))
	for i, a := range out {
		idx[a.Name] = i
	}
	for _, c := range changes {
		if i, ok := idx[c.Name]; ok {
			if c.Disabled {
				out[i].Disabled = true
			}
			continue
		}
		if !c.Created {
			continue
		}
		if c.Kind != llmflow.KindOrg {
			if _, ok := idx[c.Parent]; !ok {
				continue
			}
		}
		idx[c.Name] = len(out)
		out = append(out, llmflow.Account{Name: c.Name, Kind: c.Kind, Parent: c.Parent, Shares: c.Shares, Disabled: c.Disabled, Source: "admin"})
	}
	out.SplitRests() // configured teams without a share: what the others, these included, leave
	return out
}

// SetAccountChanges replaces the admin changes served on top of the base
// tree (the store's, read again after another replica changed them) and
// publishes the tree.
func (g *Gateway) SetAccountChanges(cs []llmflow.AdminAccount) {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	g.tree.changes = slices.Clone(cs)
	g.setAccountsLocked(g.tree.base)
}

// PutAccountChange adds or replaces (by name) one admin change, stored
// already, and publishes the tree.
func (g *Gateway) PutAccountChange(c llmflow.AdminAccount) {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	cs := slices.Clone(g.tree.changes)
	if i := slices.IndexFunc(cs, func(x llmflow.AdminAccount) bool { return x.Name == c.Name }); i >= 0 {
		cs[i] = c
	} else {
		cs = append(cs, c)
	}
	g.tree.changes = cs
	g.setAccountsLocked(g.tree.base)
}

// AccountChanges returns a copy of the admin changes served now.
func (g *Gateway) AccountChanges() []llmflow.AdminAccount {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	return slices.Clone(g.tree.changes)
}

// BaseAccounts returns the tree of the configuration or of the last Slurm
// sync, without the admin changes. The caller must not modify it.
func (g *Gateway) BaseAccounts() llmflow.Accounts {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	return g.tree.base
}

// AccountView is a read-only view of the organisation tree served at one
// moment (admin changes included). Accounts it returns must not be
// modified.
type AccountView struct{ v *accountView }

// Accounts returns the tree served now.
func (g *Gateway) Accounts() AccountView { return AccountView{g.accts.Load()} }

// All returns every account, parents first.
func (a AccountView) All() llmflow.Accounts { return a.v.accts }

// Account returns the named account of any kind.
func (a AccountView) Account(name string) (*llmflow.Account, bool) {
	x, ok := a.v.byName[name]
	return x, ok
}

// Team returns the named team (enabled or not).
func (a AccountView) Team(name string) (*llmflow.Account, bool) { return a.v.team(name) }

// OrgOfTeam is the organisation of a team, "" for a name that is not one.
func (a AccountView) OrgOfTeam(team string) string {
	if t, ok := a.v.byName[team]; ok && t.Kind == llmflow.KindTeam {
		return t.Parent
	}
	return ""
}

// OrgOf is the organisation of k's team in this tree; k's own when the
// team is unknown.
func (a AccountView) OrgOf(k *llmflow.Key) string { return a.v.orgOf(k) }

// ProjectChain walks the parent chain of project up to team: under
// reports whether it reaches team, disabled whether an account on the way
// (project included, team excluded) is disabled.
func (a AccountView) ProjectChain(project, team string) (under, disabled bool) {
	return a.v.projectChain(project, team)
}

// Models returns the configured model names, in configuration order
// (aliases excluded).
func (g *Gateway) Models() []string {
	out := make([]string, 0, len(g.cfg.Models))
	for _, mc := range g.cfg.Models {
		out = append(out, mc.Name)
	}
	return out
}

// IsModel reports whether name is a configured model (not an alias).
func (g *Gateway) IsModel(name string) bool { return g.routes[name] != nil }

// TeamModels returns the team model lists served now (team → models as
// set); nil when no team has one. The caller must not modify them.
func (g *Gateway) TeamModels() map[string][]string {
	if tm := g.modelLists.Load(); tm != nil {
		return tm.names
	}
	return nil
}

// SetTeamModels publishes the team model lists (stored already): a team
// with a list sees and uses only those models; names that are not
// configured models allow nothing.
func (g *Gateway) SetTeamModels(lists map[string][]string) {
	g.modelLists.Store(g.newTeamModels(lists))
}

// RoutingSnapshot is the runtime routing applied now: the stored rows and
// why some are not served.
type RoutingSnapshot struct {
	Upstreams []llmflow.RuntimeUpstream
	Aliases   []llmflow.ModelAlias
	ignored   map[string]string
}

// UpstreamReason is why the stored upstream is not served ("" when it is).
func (s RoutingSnapshot) UpstreamReason(model, name string) string {
	return s.ignored[upstreamKey(model, name)]
}

// AliasReason is why the stored alias is not served ("" when it is).
func (s RoutingSnapshot) AliasReason(name string) string { return s.ignored[aliasKey(name)] }

// Routing returns the runtime routing applied now.
func (g *Gateway) Routing() RoutingSnapshot {
	ups, als, ignored := g.routingSnapshot()
	return RoutingSnapshot{Upstreams: ups, Aliases: als, ignored: ignored}
}

// ApplyRouting publishes the routes' upstream lists and the alias table
// built from the stored rows and the configuration (rows the
// configuration shadows are left out, with their reason); new runtime
// engines are probed, gone ones stop being probed.
func (g *Gateway) ApplyRouting(ups []llmflow.RuntimeUpstream, als []llmflow.ModelAlias) {
	rs := g.routing
	rs.mu.Lock()
	defer rs.mu.Unlock()
	g.applyLocked(ups, als)
}

// CheckUpstream checks a runtime upstream against the configuration and
// the other stored rows (those ApplyRouting would serve), with the rules
// ApplyRouting applies; it returns the normalised base URL.
func (g *Gateway) CheckUpstream(u llmflow.RuntimeUpstream, others []llmflow.RuntimeUpstream) (string, error) {
	accepted := map[string][]acceptedUpstream{}
	for _, o := range others {
		if base, err := g.checkRuntimeUpstream(o, accepted); err == nil {
			accepted[o.Model] = append(accepted[o.Model], acceptedUpstream{name: o.Name, base: base.String(), u: base})
		}
	}
	base, err := g.checkRuntimeUpstream(u, accepted)
	if err != nil {
		return "", err
	}
	return base.String(), nil
}

// CheckAlias checks an alias against the configuration, with the rules
// ApplyRouting applies.
func (g *Gateway) CheckAlias(a llmflow.ModelAlias) error { return g.checkAlias(a) }

// Backend is one upstream of a model as the request path routes it now.
type Backend struct {
	Model, Name, BaseURL string
	Configured           bool // declared in the configuration, else a runtime upstream served
	Healthy              bool
	InFlight             int64
}

// Backends returns the upstreams of model ("" = every configured model,
// in configuration order): the configured ones first, then the runtime
// ones served.
func (g *Gateway) Backends(model string) []Backend {
	now := g.now()
	var out []Backend
	for _, mc := range g.cfg.Models {
		if model != "" && mc.Name != model {
			continue
		}
		rt := g.routes[mc.Name]
		served := rt.upstreams()
		for i, u := range served {
			out = append(out, Backend{Model: mc.Name, Name: u.name, BaseURL: u.b.base, Configured: i < len(rt.configured),
				Healthy: u.b.up(now), InFlight: u.b.inflight.Load()})
		}
	}
	return out
}

// BudgetTable returns the budgets in force now, with their live figures.
func (g *Gateway) BudgetTable() *budgets.Table { return g.bud.mem.Table() }

// RefreshBudgets puts the budgets in force again now (after an admin
// change), reading them from the store. The caller leaving does not cut
// the read short (a cancelled read would count as a failed refresh toward
// the fail-closed state): it is bounded by the refresh interval, at
// least 5 s.
func (g *Gateway) RefreshBudgets(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(g.bud.every, 5*time.Second))
	defer cancel()
	return g.refreshBudgets(ctx)
}

// Now is the gateway's clock (Options.Now).
func (g *Gateway) Now() time.Time { return g.now() }

// Registry is the registry /metrics serves; the control plane registers
// its own series there.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// IsMasterKey reports whether tok is the master key (constant time).
func (g *Gateway) IsMasterKey(tok string) bool { return g.secretAuth.match(tok)&secretMaster != 0 }

// CheckMasterKey authenticates r as the master key under the operator
// failure limiter: a network past its limit is answered 429 before any
// comparison; a failure counts there and in llmflow_denied_total, and
// returns refused.
func (g *Gateway) CheckMasterKey(r *http.Request, refused error) error {
	if _, err := g.secretAuth.check(r.Header.Get("Authorization"), g.clientAddr(r), g.now(), secretMaster, refused); err != nil {
		g.operatorDenied(err)
		return err
	}
	return nil
}

// OperatorLimited returns the 429 answer (counted in
// llmflow_denied_total) when r's network is past its operator failure
// limit, nil otherwise.
func (g *Gateway) OperatorLimited(r *http.Request) error {
	if blocked, after := g.secretAuth.limiter.blocked(clientNetwork(g.clientAddr(r)), g.now()); blocked {
		err := withRetryAfter(errTooManyBad, after)
		g.operatorDenied(err)
		return err
	}
	return nil
}

// OperatorFailed counts a failed operator authentication (err, a bad
// admin token) against r's network and in llmflow_denied_total.
func (g *Gateway) OperatorFailed(r *http.Request, err error) {
	g.secretAuth.limiter.fail(clientNetwork(g.clientAddr(r)), g.now())
	g.operatorDenied(err)
}

// WriteError writes err as an OpenAI-shaped error answer: the one mapping
// of errors to HTTP responses, data plane and control plane alike.
func WriteError(w http.ResponseWriter, log *slog.Logger, err error) { writeError(w, log, err) }

// WriteJSON writes v as a JSON answer with status.
func WriteJSON(w http.ResponseWriter, status int, v any) error { return writeJSON(w, status, v) }

// MethodNotAllowed is the error of a route called with a method it does
// not serve (405, in the OpenAI error shape).
func MethodNotAllowed(method, path string) error {
	return llmflow.Errorf(emethod, "method %s not allowed on %s", method, path)
}

// NotFound is the error of a path no route serves.
func NotFound(r *http.Request) error {
	return llmflow.Errorf(llmflow.ENOTFOUND, "no route %s %s", r.Method, r.URL.Path)
}

// ClientNetwork is the network a client address counts in (failure
// limits, the audit trail's remote).
func ClientNetwork(remoteAddr string) string { return clientNetwork(remoteAddr).String() }

// CloseAfterAmbiguousFraming closes the connection after a request whose
// framing a proxy in front could read otherwise (every handler on the
// gateway's listeners calls it first).
func CloseAfterAmbiguousFraming(w http.ResponseWriter, r *http.Request) {
	closeAfterAmbiguousFraming(w, r)
}
