package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// Organisations, teams and projects created or disabled through the admin
// API are kept in the store as changes on top of the tree from the
// configuration or Slurm (llmflow.AdminAccount): a Slurm sync replaces the
// base tree, the changes stay. A disable mark disables whichever source
// declares the account, and its subtree with it.
//
// An account created here has the share its creator gave it (0 by
// default: it only borrows); the share of an account the configuration or
// Slurm declares is theirs.

// changeAccount stores an admin change and serves the tree with it. The
// caller tells the other replicas (TreeChanged, with its audit entry).
func (h *Handler) changeAccount(ctx context.Context, c llmflow.AdminAccount) error {
	h.treeMu.Lock()
	defer h.treeMu.Unlock()
	if err := h.store.PutAdminAccount(ctx, c); err != nil {
		return err
	}
	h.gw.PutAccountChange(c)
	return nil
}

func badAccountName(param string) error {
	return &llmflow.Error{Code: llmflow.EINVALID, Param: param,
		Message: param + " must be 1 to 64 letters, digits, '.', '_' or '-' (not first)"}
}

// accountListView is the wire type adminapi.Account (package adminapi: the contract of
// the CLI, the console and the API).
type accountListView = adminapi.Account

// listOrgs is GET /admin/orgs: the organisations the caller holds a role
// in (every one for proxy readers), with their configured share.
func (h *Handler) listOrgs(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	v := h.gw.Accounts()
	az := p.authz()
	out := []accountListView{}
	for _, a := range v.All() {
		if a.Kind != llmflow.KindOrg {
			continue
		}
		if !p.may(authz.Read, authz.OrgScope(a.Name)) && !slices.ContainsFunc(az.Grants, func(gr authz.Grant) bool { return gr.Org == a.Name }) {
			continue
		}
		out = append(out, accountListView{Name: a.Name, Share: a.Shares, Disabled: a.Disabled, Source: a.Source})
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}

// OrgRequest is the wire type adminapi.OrgRequest (package adminapi: the contract of
// the CLI, the console and the API).
type OrgRequest = adminapi.OrgRequest

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

func (h *Handler) createOrg(w http.ResponseWriter, r *http.Request, p Principal) error {
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
	c := llmflow.AdminAccount{Name: req.Name, Kind: llmflow.KindOrg, Created: true, Shares: share, At: h.now().UTC()}
	return h.createAccount(w, r, p, c, authz.OrgScope(req.Name), "org.create")
}

// fractionShare checks the share of name, a team or project of parent
// created through the admin API, against its siblings. Where the
// configuration declares sibling teams, shares are fractions of the parent
// summing to at most 1 (the configuration's rule): a share given here is
// one too, taken from what the others' shares leave (configured teams
// without a share split what is left after it), and a share that would
// bring the sum above 1 is refused rather than shrink the configured
// shares by normalisation. Among Slurm's or the API's own accounts shares
// are Slurm's, normalised among siblings: any share goes.
func fractionShare(tree llmflow.Accounts, parent, name string, share float64) error {
	if parent == "" {
		// organisations: their shares are normalised with the configured
		// ones (README, Delegated administration)
		return nil
	}
	configured, given := false, 0.0
	for _, a := range tree {
		if a.Parent != parent || a.Name == name || a.Kind == llmflow.KindRoot {
			continue
		}
		configured = configured || a.Source == "config"
		if !a.ShareRest && !a.UseParent {
			given += a.Shares
		}
	}
	if !configured || given+share <= 1+1e-9 {
		return nil
	}
	return &llmflow.Error{Code: llmflow.EINVALID, Param: "share", Message: fmt.Sprintf(
		"share %g: the configuration gives the teams of %s fractions summing to at most 1, and the others take %g: at most %g is left (0: it only borrows)",
		share, quote(parent), given, max(0, 1-given))}
}

// createAccount creates c unless an account of that name exists (names
// are unique across the whole tree, as Slurm's are).
func (h *Handler) createAccount(w http.ResponseWriter, r *http.Request, p Principal, c llmflow.AdminAccount, s authz.Scope, action string) error {
	if a, ok := h.gw.Accounts().Account(c.Name); ok {
		what := "an account"
		if a.Disabled {
			what = "a disabled account"
		}
		return &llmflow.Error{Code: llmflow.ECONFLICT, Param: "name", Message: fmt.Sprintf("%s named %s exists (%s names are unique across the tree)", what, quote(c.Name), a.Kind)}
	}
	if err := fractionShare(h.gw.Accounts().All(), c.Parent, c.Name, c.Shares); err != nil {
		return err
	}
	if err := h.changeAccount(r.Context(), c); err != nil {
		return err
	}
	a, ok := h.gw.Accounts().Account(c.Name)
	if !ok { // its parent left the tree meanwhile (a Slurm sync)
		return llmflow.Errorf(llmflow.ECONFLICT, "%s %q was created but its parent %q is no longer in the tree", c.Kind, c.Name, c.Parent)
	}
	av := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source}
	h.audit(r, p, action, a.Kind.String()+" "+a.Name, s, nil, av)
	h.log.Info("account created", "kind", a.Kind, "name", a.Name, "parent", a.Parent, "by", p.Name)
	return writeJSON(w, http.StatusCreated, av)
}

// disableAccount marks the account disabled (its subtree with it: keys
// under it stop working at once) and revokes the keys under it.
func (h *Handler) disableAccount(w http.ResponseWriter, r *http.Request, p Principal, a *llmflow.Account, s authz.Scope, action string) error {
	before := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source}
	c := llmflow.AdminAccount{Name: a.Name, Kind: a.Kind, Parent: a.Parent, Created: a.Source == "admin", Disabled: true, At: h.now().UTC()}
	v := h.gw.Accounts()
	// keys under the account, found in the tree before it is disabled
	keys, err := h.keys.ListKeys(r.Context(), llmflow.KeyFilter{})
	if err != nil {
		return err
	}
	if err := h.changeAccount(r.Context(), c); err != nil {
		return err
	}
	revoked := 0
	for i := range keys {
		k := &keys[i]
		if !keyUnder(v, k, a) {
			continue
		}
		if err := h.keys.RevokeKey(r.Context(), k.ID, h.now().UTC()); err != nil {
			return err
		}
		h.forgetKey(r.Context(), k)
		revoked++
	}
	after := before
	after.Disabled = true
	answer := adminapi.AccountDisabled{Account: after, KeysRevoked: revoked}
	h.audit(r, p, action, a.Kind.String()+" "+a.Name, s, before, answer)
	h.log.Info("account disabled", "kind", a.Kind, "name", a.Name, "keys_revoked", revoked, "by", p.Name)
	return writeJSON(w, http.StatusOK, answer)
}

// enableAccount clears the disable mark an admin set on the account. The
// keys revoked when it was disabled stay revoked (a revocation is final):
// its members need new keys. An account disabled because Slurm deleted it
// is re-enabled in Slurm, not here; one under a disabled ancestor is
// enabled, and usable once the ancestor is.
func (h *Handler) enableAccount(w http.ResponseWriter, r *http.Request, p Principal, a *llmflow.Account, s authz.Scope, action string) error {
	if !a.Disabled {
		return llmflow.Errorf(llmflow.ECONFLICT, "%s %q is not disabled", a.Kind, a.Name)
	}
	marked := slices.ContainsFunc(h.gw.AccountChanges(), func(c llmflow.AdminAccount) bool { return c.Name == a.Name && c.Disabled })
	inBase := slices.ContainsFunc(h.gw.BaseAccounts(), func(b llmflow.Account) bool { return b.Name == a.Name && b.Disabled })
	if !marked || inBase {
		return llmflow.Errorf(llmflow.ECONFLICT, "%s %q is disabled by its source (%s: deleted in Slurm, or disabled in the configuration), not by an admin; enable it there", a.Kind, a.Name, a.Source)
	}
	before := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: true, Source: a.Source}
	c := llmflow.AdminAccount{Name: a.Name, Kind: a.Kind, Parent: a.Parent, Created: a.Source == "admin", At: h.now().UTC()}
	if err := h.changeAccount(r.Context(), c); err != nil {
		return err
	}
	after := before
	after.Disabled = false
	h.audit(r, p, action, a.Kind.String()+" "+a.Name, s, before, after)
	h.log.Info("account enabled", "kind", a.Kind, "name", a.Name, "by", p.Name)
	return writeJSON(w, http.StatusOK, adminapi.AccountEnabled{Account: after, KeysRevokedStayRevoked: true})
}

// keyUnder reports whether k sits under account a in this tree: its
// organisation, its team, or a project on its project's chain.
func keyUnder(v gateway.AccountView, k *llmflow.Key, a *llmflow.Account) bool {
	switch a.Kind {
	case llmflow.KindOrg:
		return v.OrgOf(k) == a.Name
	case llmflow.KindTeam:
		return k.Team == a.Name
	}
	if k.Project == "" {
		return false
	}
	if k.Project == a.Name {
		return true
	}
	under, _ := v.ProjectChain(k.Project, a.Name)
	return under
}

// listTeams is GET /admin/teams?org=: the teams the caller may read (or
// is a member of).
func (h *Handler) listTeams(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "org"); err != nil {
		return err
	}
	org := r.URL.Query().Get("org")
	v := h.gw.Accounts()
	out := []accountListView{}
	for _, a := range v.All() {
		if a.Kind != llmflow.KindTeam || (org != "" && a.Parent != org) {
			continue
		}
		s := authz.TeamScope(a.Parent, a.Name)
		if !p.may(authz.Read, s) && !p.may(authz.OwnKeys, s) {
			continue
		}
		out = append(out, accountListView{Name: a.Name, Org: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source})
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}

// TeamRequest is the wire type adminapi.TeamRequest (package adminapi: the contract of
// the CLI, the console and the API).
type TeamRequest = adminapi.TeamRequest

func (h *Handler) createTeam(w http.ResponseWriter, r *http.Request, p Principal) error {
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
	o, ok := h.gw.Accounts().Account(req.Org)
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
	c := llmflow.AdminAccount{Name: req.Name, Kind: llmflow.KindTeam, Parent: req.Org, Created: true, Shares: share, At: h.now().UTC()}
	return h.createAccount(w, r, p, c, authz.TeamScope(req.Org, req.Name), "team.create")
}

// teamFor resolves the {team} of a route for action a: 403 when the
// caller may not do a there (an unknown team included, unless the caller
// may do a everywhere: then 404).
func (h *Handler) teamFor(r *http.Request, p Principal, a authz.Action, alt ...authz.Action) (*llmflow.Account, authz.Scope, error) {
	name := r.PathValue("team")
	s, ok := h.teamScope(name)
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
	t, _ := h.gw.Accounts().Account(name)
	return t, s, nil
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
func (h *Handler) listProjects(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	team, _, err := h.teamFor(r, p, authz.Read)
	if err != nil {
		return err
	}
	v := h.gw.Accounts()
	out := []accountListView{}
	for _, a := range v.All() {
		if a.Kind != llmflow.KindProject {
			continue
		}
		if under, _ := v.ProjectChain(a.Name, team.Name); under {
			out = append(out, accountListView{Name: a.Name, Org: team.Parent, Team: team.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source})
		}
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}

// ProjectRequest is the wire type adminapi.ProjectRequest (package adminapi: the contract of
// the CLI, the console and the API).
type ProjectRequest = adminapi.ProjectRequest

func (h *Handler) createProject(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req ProjectRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	team, s, err := h.teamFor(r, p, authz.ManageProjects)
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
	c := llmflow.AdminAccount{Name: req.Name, Kind: llmflow.KindProject, Parent: team.Name, Created: true, Shares: share, At: h.now().UTC()}
	return h.createAccount(w, r, p, c, s, "project.create")
}

// accountState is the handler that disables (disable) or enables the
// organisation, team or project its route names ({name}, and {team} for a
// project), by whoever may manage accounts of that kind there.
func accountState(kind llmflow.Kind, disable bool) handlerFunc {
	verb, change := "enable", (*Handler).enableAccount
	if disable {
		verb, change = "disable", (*Handler).disableAccount
	}
	prefix := kind.String()
	return func(h *Handler, w http.ResponseWriter, r *http.Request, p Principal) error {
		a, s, err := h.routeAccount(r, p, kind, verb)
		if err != nil {
			return err
		}
		return change(h, w, r, p, a, s, prefix+"."+verb)
	}
}

// ShareRequest is the wire type adminapi.ShareRequest (package adminapi: the contract of
// the CLI, the console and the API).
type ShareRequest = adminapi.ShareRequest

// setShare is the handler of an account's share route, by whoever may
// disable the account. Only an account created here has a share set here;
// the configuration's and Slurm's are changed there (409).
func setShare(kind llmflow.Kind) handlerFunc {
	prefix := kind.String()
	return func(h *Handler, w http.ResponseWriter, r *http.Request, p Principal) error {
		var req ShareRequest
		if err := decodeAdmin(w, r, &req); err != nil {
			return err
		}
		a, s, err := h.routeAccount(r, p, kind, "change the share of")
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
		if err := fractionShare(h.gw.Accounts().All(), a.Parent, a.Name, share); err != nil {
			return err
		}
		before := accountListView{Name: a.Name, Parent: a.Parent, Share: a.Shares, Disabled: a.Disabled, Source: a.Source}
		c := llmflow.AdminAccount{Name: a.Name, Kind: a.Kind, Parent: a.Parent, Created: true, Disabled: a.Disabled, Shares: share, At: h.now().UTC()}
		if err := h.changeAccount(r.Context(), c); err != nil {
			return err
		}
		after := before
		after.Share = share
		h.audit(r, p, prefix+".share", a.Kind.String()+" "+a.Name, s, before, after)
		h.log.Info("account share set", "kind", a.Kind, "name", a.Name, "share", share, "by", p.Name)
		return writeJSON(w, http.StatusOK, after)
	}
}

// routeAccount resolves the account of a disable or enable route: 403
// when p may not manage it (an unknown team included, unless p may
// everywhere: then 404), 404 when it does not exist.
func (h *Handler) routeAccount(r *http.Request, p Principal, kind llmflow.Kind, verb string) (*llmflow.Account, authz.Scope, error) {
	name := r.PathValue("name")
	v := h.gw.Accounts()
	switch kind {
	case llmflow.KindOrg:
		if !p.may(authz.ManageOrgs, authz.Proxy) {
			return nil, authz.Proxy, forbidden("only a proxy admin may %s organisations", verb)
		}
		a, ok := v.Account(name)
		if !ok || a.Kind != llmflow.KindOrg {
			return nil, authz.Proxy, llmflow.Errorf(llmflow.ENOTFOUND, "no organisation %q", name)
		}
		return a, authz.OrgScope(name), nil
	case llmflow.KindTeam:
		s, ok := h.teamScope(name)
		if !p.may(authz.ManageTeams, s) {
			return nil, s, forbidden("you may not %s team %q", verb, name)
		}
		if !ok {
			return nil, s, llmflow.Errorf(llmflow.ENOTFOUND, "no team %q", name)
		}
		a, _ := v.Account(name)
		return a, s, nil
	}
	team, s, err := h.teamFor(r, p, authz.ManageProjects)
	if err != nil {
		return nil, s, err
	}
	if under, _ := v.ProjectChain(name, team.Name); !under {
		return nil, s, llmflow.Errorf(llmflow.ENOTFOUND, "no project %q under team %q", name, team.Name)
	}
	a, _ := v.Account(name)
	return a, s, nil
}
