package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
)

// Organisations, teams and projects created or disabled through the admin
// API are kept in the store as changes on top of the tree from the
// configuration or Slurm (llmflow.AdminAccount): a Slurm sync replaces the
// base tree, the changes stay. An account created here has no share (it
// only borrows: a share comes from the configuration or from Slurm); a
// disable mark disables whichever source declares the account, and its
// subtree with it.
//
// An account created here has the share its creator gave it (0 by
// default: it only borrows); the share of an account the configuration or
// Slurm declares is theirs.

// adminTree holds the base tree and the admin changes; mu serialises every
// replacement of the served view (Slurm syncs and admin changes).
type adminTree struct {
	mu      sync.Mutex
	base    llmflow.Accounts
	changes []llmflow.AdminAccount
}

// withAdminAccounts returns base with the admin changes applied, and
// remembers base for the next change.
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
	return out
}

// changeAccount stores an admin change and serves the tree with it.
func (g *Gateway) changeAccount(ctx context.Context, c llmflow.AdminAccount) error {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	if err := g.admins.PutAdminAccount(ctx, c); err != nil {
		return err
	}
	i := slices.IndexFunc(g.tree.changes, func(x llmflow.AdminAccount) bool { return x.Name == c.Name })
	if i >= 0 {
		g.tree.changes[i] = c
	} else {
		g.tree.changes = append(g.tree.changes, c)
	}
	g.setAccountsLocked(g.tree.base)
	return nil
}

func badAccountName(param string) error {
	return &llmflow.Error{Code: llmflow.EINVALID, Param: param,
		Message: param + " must be 1 to 64 letters, digits, '.', '_' or '-' (not first)"}
}

// accountView is how an account appears in listings.
type accountListView struct {
	Name     string  `json:"name"`
	Org      string  `json:"org,omitempty"`
	Team     string  `json:"team,omitempty"`
	Parent   string  `json:"parent,omitempty"`
	Share    float64 `json:"share"`
	Disabled bool    `json:"disabled"`
	Source   string  `json:"source"`
}

// listOrgs is GET /admin/orgs: the organisations the caller holds a role
// in (every one for proxy readers), with their configured share.
func (g *Gateway) listOrgs(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	v := g.accts.Load()
	az := p.authz()
	out := []accountListView{}
	for _, a := range v.accts {
		if a.Kind != llmflow.KindOrg {
			continue
		}
		if !p.may(authz.Read, authz.OrgScope(a.Name)) && !slices.ContainsFunc(az.Grants, func(gr authz.Grant) bool { return gr.Org == a.Name }) {
			continue
		}
		out = append(out, accountListView{Name: a.Name, Share: a.Shares, Disabled: a.Disabled, Source: a.Source})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

// OrgRequest creates an organisation. Share is its share of the pools
// among the organisations (absent or 0: none, it only borrows).
type OrgRequest struct {
	Name  string   `json:"name"`
	Share *float64 `json:"share"`
}

// maxAccountShare bounds a share set through the admin API (Slurm's
// Fairshare is a 32-bit integer).
const maxAccountShare = 1 << 31

// shareOf checks an optional share of a request.
func shareOf(v *float64) (float64, error) {
	if v == nil {
		return 0, nil
	}
	if !(*v >= 0 && *v <= maxAccountShare) { // NaN included
		return 0, &llmflow.Error{Code: llmflow.EINVALID, Param: "share", Message: fmt.Sprintf("share must be a number from 0 (none: it only borrows) to %d", maxAccountShare)}
	}
	return *v, nil
}

func (g *Gateway) createOrg(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req OrgRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if !p.may(authz.ManageOrgs, authz.Proxy) {
		return forbidden("only a proxy admin creates organisations")
	}
	if !llmflow.ValidAccountName(req.Name) {
		return badAccountName("name")
	}
	share, err := shareOf(req.Share)
	if err != nil {
		return err
	}
	c := llmflow.AdminAccount{Name: req.Name, Kind: llmflow.KindOrg, Created: true, Shares: share, At: g.now().UTC()}
	return g.createAccount(w, r, p, c, authz.OrgScope(req.Name), "org.create")
}

// createAccount creates c unless an account of that name exists (names
// are unique across the whole tree, as Slurm's are).
func (g *Gateway) createAccount(w http.ResponseWriter, r *http.Request, p Principal, c llmflow.AdminAccount, s authz.Scope, action string) error {
	if a, ok := g.accts.Load().byName[c.Name]; ok {
		what := "an account"
		if a.Disabled {
			what = "a disabled account"
		}
		return &llmflow.Error{Code: llmflow.ECONFLICT, Param: "name", Message: fmt.Sprintf("%s named %s exists (%s names are unique across the tree)", what, quote(c.Name), a.Kind)}
	}
	if err := g.changeAccount(r.Context(), c); err != nil {
		return err
	}
	a, ok := g.accts.Load().byName[c.Name]
	if !ok { // its parent left the tree meanwhile (a Slurm sync)
		return llmflow.Errorf(llmflow.ECONFLICT, "%s %q was created but its parent %q is no longer in the tree", c.Kind, c.Name, c.Parent)
	}
	av := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source}
	g.audit(r, p, action, a.Kind.String()+" "+a.Name, s, nil, av)
	g.log.Info("account created", "kind", a.Kind, "name", a.Name, "parent", a.Parent, "by", p.Name)
	return writeJSON(w, http.StatusCreated, av)
}

// disableAccount marks the account disabled (its subtree with it: keys
// under it stop working at once) and revokes the keys under it.
func (g *Gateway) disableAccount(w http.ResponseWriter, r *http.Request, p Principal, a *llmflow.Account, s authz.Scope, action string) error {
	before := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source}
	c := llmflow.AdminAccount{Name: a.Name, Kind: a.Kind, Parent: a.Parent, Created: a.Source == "admin", Disabled: true, At: g.now().UTC()}
	v := g.accts.Load()
	// keys under the account, found in the tree before it is disabled
	keys, err := g.keys.ListKeys(r.Context(), llmflow.KeyFilter{})
	if err != nil {
		return err
	}
	if err := g.changeAccount(r.Context(), c); err != nil {
		return err
	}
	revoked := 0
	for i := range keys {
		k := &keys[i]
		if !v.keyUnder(k, a) {
			continue
		}
		if err := g.keys.RevokeKey(r.Context(), k.ID, g.now().UTC()); err != nil {
			return err
		}
		g.auth.forget(k.Hash)
		revoked++
	}
	after := before
	after.Disabled = true
	g.audit(r, p, action, a.Kind.String()+" "+a.Name, s, before, map[string]any{"account": after, "keys_revoked": revoked})
	g.log.Info("account disabled", "kind", a.Kind, "name", a.Name, "keys_revoked", revoked, "by", p.Name)
	return writeJSON(w, http.StatusOK, map[string]any{"account": after, "keys_revoked": revoked})
}

// enableAccount clears the disable mark an admin set on the account. The
// keys revoked when it was disabled stay revoked (a revocation is final):
// its members need new keys. An account disabled because Slurm deleted it
// is re-enabled in Slurm, not here; one under a disabled ancestor is
// enabled, and usable once the ancestor is.
func (g *Gateway) enableAccount(w http.ResponseWriter, r *http.Request, p Principal, a *llmflow.Account, s authz.Scope, action string) error {
	if !a.Disabled {
		return llmflow.Errorf(llmflow.ECONFLICT, "%s %q is not disabled", a.Kind, a.Name)
	}
	g.tree.mu.Lock()
	marked := slices.ContainsFunc(g.tree.changes, func(c llmflow.AdminAccount) bool { return c.Name == a.Name && c.Disabled })
	inBase := slices.ContainsFunc(g.tree.base, func(b llmflow.Account) bool { return b.Name == a.Name && b.Disabled })
	g.tree.mu.Unlock()
	if !marked || inBase {
		return llmflow.Errorf(llmflow.ECONFLICT, "%s %q is disabled by its source (%s: deleted in Slurm, or disabled in the configuration), not by an admin; enable it there", a.Kind, a.Name, a.Source)
	}
	before := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: true, Source: a.Source}
	c := llmflow.AdminAccount{Name: a.Name, Kind: a.Kind, Parent: a.Parent, Created: a.Source == "admin", At: g.now().UTC()}
	if err := g.changeAccount(r.Context(), c); err != nil {
		return err
	}
	after := before
	after.Disabled = false
	g.audit(r, p, action, a.Kind.String()+" "+a.Name, s, before, after)
	g.log.Info("account enabled", "kind", a.Kind, "name", a.Name, "by", p.Name)
	return writeJSON(w, http.StatusOK, map[string]any{"account": after, "keys_revoked_stay_revoked": true})
}

// keyUnder reports whether k sits under account a in this tree: its
// organisation, its team, or a project on its project's chain.
func (v *accountView) keyUnder(k *llmflow.Key, a *llmflow.Account) bool {
	switch a.Kind {
	case llmflow.KindOrg:
		return v.orgOf(k) == a.Name
	case llmflow.KindTeam:
		return k.Team == a.Name
	}
	if k.Project == "" {
		return false
	}
	if k.Project == a.Name {
		return true
	}
	under, _ := v.projectChain(k.Project, a.Name)
	return under
}

// listTeams is GET /admin/teams?org=: the teams the caller may read (or
// is a member of).
func (g *Gateway) listTeams(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "org"); err != nil {
		return err
	}
	org := r.URL.Query().Get("org")
	v := g.accts.Load()
	out := []accountListView{}
	for _, a := range v.accts {
		if a.Kind != llmflow.KindTeam || (org != "" && a.Parent != org) {
			continue
		}
		s := authz.TeamScope(a.Parent, a.Name)
		if !p.may(authz.Read, s) && !p.may(authz.OwnKeys, s) {
			continue
		}
		out = append(out, accountListView{Name: a.Name, Org: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

// TeamRequest creates a team of an organisation, with its share among
// the organisation's teams (absent or 0: none, it only borrows).
type TeamRequest struct {
	Name  string   `json:"name"`
	Org   string   `json:"org"`
	Share *float64 `json:"share"`
}

func (g *Gateway) createTeam(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req TeamRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if req.Org == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "org", Message: "org is required"}
	}
	if !p.may(authz.ManageTeams, authz.OrgScope(req.Org)) {
		return forbidden("you may not create teams in organisation %q", req.Org)
	}
	if !llmflow.ValidAccountName(req.Name) {
		return badAccountName("name")
	}
	o, ok := g.accts.Load().byName[req.Org]
	switch {
	case !ok || o.Kind != llmflow.KindOrg:
		return &llmflow.Error{Code: llmflow.ENOTFOUND, Param: "org", Message: "unknown organisation " + quote(req.Org)}
	case o.Disabled:
		return forbidden("organisation %q is disabled", req.Org)
	}
	share, err := shareOf(req.Share)
	if err != nil {
		return err
	}
	c := llmflow.AdminAccount{Name: req.Name, Kind: llmflow.KindTeam, Parent: req.Org, Created: true, Shares: share, At: g.now().UTC()}
	return g.createAccount(w, r, p, c, authz.TeamScope(req.Org, req.Name), "team.create")
}

// teamFor resolves the {team} of a route for action a: 403 when the
// caller may not do a there (an unknown team included, unless the caller
// may do a everywhere: then 404).
func (g *Gateway) teamFor(r *http.Request, p Principal, a authz.Action, alt ...authz.Action) (*llmflow.Account, authz.Scope, error) {
	name := r.PathValue("team")
	s, ok := g.teamScope(name)
	allowed := p.may(a, s)
	for _, b := range alt {
		allowed = allowed || p.may(b, s)
	}
	if !allowed {
		return nil, s, forbidden("you may not %s team %q", verbOf(a), name)
	}
	if !ok {
		return nil, s, llmflow.Errorf(llmflow.ENOTFOUND, "no team %q", name)
	}
	return g.accts.Load().byName[name], s, nil
}

func verbOf(a authz.Action) string {
	switch a {
	case authz.Read:
		return "read"
	case authz.ManageProjects:
		return "manage the projects of"
	case authz.SetModels:
		return "set the models of"
	}
	return a.String() + " on"
}

// listProjects is GET /admin/teams/{team}/projects: every project under
// the team, at any depth.
func (g *Gateway) listProjects(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	team, _, err := g.teamFor(r, p, authz.Read)
	if err != nil {
		return err
	}
	v := g.accts.Load()
	out := []accountListView{}
	for _, a := range v.accts {
		if a.Kind != llmflow.KindProject {
			continue
		}
		if under, _ := v.projectChain(a.Name, team.Name); under {
			out = append(out, accountListView{Name: a.Name, Org: team.Parent, Team: team.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source})
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

// ProjectRequest creates a project directly under a team, with its share
// among the team's projects (absent or 0: none, it only borrows).
type ProjectRequest struct {
	Name  string   `json:"name"`
	Share *float64 `json:"share"`
}

func (g *Gateway) createProject(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req ProjectRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	team, s, err := g.teamFor(r, p, authz.ManageProjects)
	if err != nil {
		return err
	}
	if !llmflow.ValidAccountName(req.Name) {
		return badAccountName("name")
	}
	if team.Disabled {
		return forbidden("team %q is disabled", team.Name)
	}
	share, err := shareOf(req.Share)
	if err != nil {
		return err
	}
	c := llmflow.AdminAccount{Name: req.Name, Kind: llmflow.KindProject, Parent: team.Name, Created: true, Shares: share, At: g.now().UTC()}
	return g.createAccount(w, r, p, c, s, "project.create")
}

// accountState is the handler that disables (disable) or enables the
// organisation, team or project its route names ({name}, and {team} for a
// project), by whoever may manage accounts of that kind there.
func (g *Gateway) accountState(kind llmflow.Kind, disable bool) func(http.ResponseWriter, *http.Request, Principal) error {
	verb, change := "enable", (*Gateway).enableAccount
	if disable {
		verb, change = "disable", (*Gateway).disableAccount
	}
	prefix := map[llmflow.Kind]string{llmflow.KindOrg: "org", llmflow.KindTeam: "team", llmflow.KindProject: "project"}[kind]
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		a, s, err := g.routeAccount(r, p, kind, verb)
		if err != nil {
			return err
		}
		return change(g, w, r, p, a, s, prefix+"."+verb)
	}
}

// ShareRequest sets the share of an account created through the admin
// API: PUT /admin/orgs/{name}/share and the teams' and projects' alike.
type ShareRequest struct {
	Share *float64 `json:"share"`
}

// setShare is the handler of an account's share route, by whoever may
// disable the account. Only an account created here has a share set here;
// the configuration's and Slurm's are changed there (409).
func (g *Gateway) setShare(kind llmflow.Kind) func(http.ResponseWriter, *http.Request, Principal) error {
	prefix := map[llmflow.Kind]string{llmflow.KindOrg: "org", llmflow.KindTeam: "team", llmflow.KindProject: "project"}[kind]
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		var req ShareRequest
		if err := decodeAdmin(w, r, &req); err != nil {
			return err
		}
		a, s, err := g.routeAccount(r, p, kind, "change the share of")
		if err != nil {
			return err
		}
		if req.Share == nil {
			return &llmflow.Error{Code: llmflow.EINVALID, Param: "share", Message: "share is required"}
		}
		share, err := shareOf(req.Share)
		if err != nil {
			return err
		}
		if a.Source != "admin" {
			return llmflow.Errorf(llmflow.ECONFLICT, "%s %q is declared by %s: its share is set there", a.Kind, a.Name, a.Source)
		}
		before := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source}
		c := llmflow.AdminAccount{Name: a.Name, Kind: a.Kind, Parent: a.Parent, Created: true, Disabled: a.Disabled, Shares: share, At: g.now().UTC()}
		if err := g.changeAccount(r.Context(), c); err != nil {
			return err
		}
		after := before
		after.Share = share
		g.audit(r, p, prefix+".share", a.Kind.String()+" "+a.Name, s, before, after)
		g.log.Info("account share set", "kind", a.Kind, "name", a.Name, "share", share, "by", p.Name)
		return writeJSON(w, http.StatusOK, after)
	}
}

// routeAccount resolves the account of a disable or enable route: 403
// when p may not manage it (an unknown team included, unless p may
// everywhere: then 404), 404 when it does not exist.
func (g *Gateway) routeAccount(r *http.Request, p Principal, kind llmflow.Kind, verb string) (*llmflow.Account, authz.Scope, error) {
	name := r.PathValue("name")
	v := g.accts.Load()
	switch kind {
	case llmflow.KindOrg:
		if !p.may(authz.ManageOrgs, authz.Proxy) {
			return nil, authz.Proxy, forbidden("only a proxy admin may %s organisations", verb)
		}
		a, ok := v.byName[name]
		if !ok || a.Kind != llmflow.KindOrg {
			return nil, authz.Proxy, llmflow.Errorf(llmflow.ENOTFOUND, "no organisation %q", name)
		}
		return a, authz.OrgScope(name), nil
	case llmflow.KindTeam:
		s, ok := g.teamScope(name)
		if !p.may(authz.ManageTeams, s) {
			return nil, s, forbidden("you may not %s team %q", verb, name)
		}
		if !ok {
			return nil, s, llmflow.Errorf(llmflow.ENOTFOUND, "no team %q", name)
		}
		return v.byName[name], s, nil
	}
	team, s, err := g.teamFor(r, p, authz.ManageProjects)
	if err != nil {
		return nil, s, err
	}
	if under, _ := v.projectChain(name, team.Name); !under {
		return nil, s, llmflow.Errorf(llmflow.ENOTFOUND, "no project %q under team %q", name, team.Name)
	}
	return v.byName[name], s, nil
}

// loadAdminAccounts reads the admin account changes (New).
func (g *Gateway) loadAdminAccounts(ctx context.Context) error {
	cs, err := g.admins.AdminAccounts(ctx)
	if err != nil {
		return fmt.Errorf("read admin account changes: %w", err)
	}
	g.tree.changes = cs
	return nil
}
