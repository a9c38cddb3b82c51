package admin

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// grantView is the wire type adminapi.Grant (package adminapi: the contract of
// the CLI, the console and the API).
type grantView = adminapi.Grant

func grantViews(gs []authz.Grant) []grantView {
	out := make([]grantView, 0, len(gs))
	for _, gr := range gs {
		out = append(out, grantView{Role: string(gr.Role), Org: gr.Org, Team: gr.Team})
	}
	return out
}

// whoami is GET /admin/whoami: the caller and their roles.
func (h *Handler) whoami(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	kind := "user"
	if !p.User {
		kind = "master_key"
	}
	return writeJSON(w, http.StatusOK, adminapi.Whoami{Kind: kind, Name: p.Name, Roles: grantViews(p.authz().Grants)})
}

// userView is the wire type adminapi.User (package adminapi: the contract of
// the CLI, the console and the API).
type userView = adminapi.User

// grantScope is the scope a stored grant sits in, in the tree served now
// (the team's organisation for a team grant).
func grantScope(v gateway.AccountView, r llmflow.RoleGrant) authz.Scope {
	if r.Team != "" {
		return authz.TeamScope(v.OrgOfTeam(r.Team), r.Team)
	}
	return authz.Scope{Org: r.Org}
}

// grantVisible reports whether p may see that a user holds r: proxy
// roles to proxy readers, the others to readers of their scope; the user
// always sees their own.
func grantVisible(p Principal, v gateway.AccountView, r llmflow.RoleGrant) bool {
	return (p.User && r.User == p.Name) || p.may(authz.Read, grantScope(v, r))
}

// userVisible reports whether p may see user u: proxy readers see every
// user; others see themselves, the users created under an organisation
// they read, and the users holding a role they may see.
func userVisible(p Principal, v gateway.AccountView, u llmflow.User, roles []llmflow.RoleGrant) bool {
	if p.everywhere(authz.Read) || (p.User && u.Name == p.Name) || (u.Org != "" && p.may(authz.Read, authz.OrgScope(u.Org))) {
		return true
	}
	for _, r := range roles {
		if r.User == u.Name && grantVisible(p, v, r) {
			return true
		}
	}
	return false
}

func (h *Handler) userView(p Principal, v gateway.AccountView, u llmflow.User, roles []llmflow.RoleGrant) userView {
	uv := userView{Name: u.Name, Org: u.Org, CreatedAt: u.CreatedAt, Roles: []grantView{}}
	if !u.Active() {
		t := u.DisabledAt
		uv.DisabledAt = &t
	}
	for _, r := range roles {
		if r.User == u.Name && grantVisible(p, v, r) {
			s := grantScope(v, r)
			gv := grantView{Role: r.Role, Org: s.Org, Team: r.Team}
			if r.Source == llmflow.SourceSlurm {
				gv.Source = r.Source
			}
			uv.Roles = append(uv.Roles, gv)
		}
	}
	return uv
}

// listUsers is GET /admin/users: the users the caller may see.
func (h *Handler) listUsers(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	users, err := h.store.Users(r.Context())
	if err != nil {
		return err
	}
	roles, err := h.store.Roles(r.Context(), "")
	if err != nil {
		return err
	}
	v := h.gw.Accounts()
	out := []userView{}
	for _, u := range users {
		if userVisible(p, v, u, roles) {
			out = append(out, h.userView(p, v, u, roles))
		}
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}

// UserRequest is the wire type adminapi.UserRequest (package adminapi: the contract of
// the CLI, the console and the API).
type UserRequest = adminapi.UserRequest

// createUser is POST /admin/users: proxy admins create users anywhere,
// org admins under their organisation.
func (h *Handler) createUser(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req UserRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if !llmflow.ValidUserName(req.Name) {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "name",
			Message: "name must be 1 to 64 letters, digits, '.', '_' or '-' (not first), and not \"master\""}
	}
	if req.Org == "" && !p.may(authz.CreateUsers, authz.Proxy) {
		if orgs := p.authz().Orgs(); len(orgs) == 1 && p.may(authz.CreateUsers, authz.OrgScope(orgs[0])) {
			req.Org = orgs[0]
		}
	}
	if !p.may(authz.CreateUsers, authz.OrgScope(req.Org)) {
		if req.Org == "" {
			return forbidden("you may not create users outside an organisation: give org")
		}
		return forbidden("you may not create users in organisation %q", req.Org)
	}
	if req.Org != "" {
		if a, ok := h.gw.Accounts().Account(req.Org); !ok || a.Kind != llmflow.KindOrg {
			return &llmflow.Error{Code: llmflow.ENOTFOUND, Param: "org", Message: "unknown organisation " + quote(req.Org)}
		}
	}
	u := llmflow.User{Name: req.Name, Org: req.Org, CreatedAt: h.now().UTC()}
	if err := h.store.CreateUser(r.Context(), u); err != nil {
		return err
	}
	uv := h.userView(p, h.gw.Accounts(), u, nil)
	h.audit(r, p, "user.create", "user "+u.Name, authz.OrgScope(u.Org), nil, uv)
	return writeJSON(w, http.StatusCreated, uv)
}

// disableUser is DELETE /admin/users/{name}: proxy admins only; the
// user's tokens are revoked with it and stop working at once.
func (h *Handler) disableUser(w http.ResponseWriter, r *http.Request, p Principal) error {
	name := r.PathValue("name")
	if !p.may(authz.DisableUsers, authz.Proxy) {
		return forbidden("only a proxy admin disables users")
	}
	u, err := h.store.User(r.Context(), name)
	if err != nil {
		return notFound(err, "no user %q", name)
	}
	if err := h.store.DisableUser(r.Context(), name, h.now().UTC()); err != nil {
		return err
	}
	h.forgetUser(name)
	after, err := h.store.User(r.Context(), name)
	if err != nil {
		return err
	}
	v := h.gw.Accounts()
	h.audit(r, p, "user.disable", "user "+name, authz.OrgScope(u.Org), h.userView(p, v, u, nil), h.userView(p, v, after, nil))
	h.log.Info("user disabled", "user", name, "by", p.Name)
	return writeJSON(w, http.StatusOK, h.userView(p, v, after, nil))
}

// notFound turns a store's not-found into a message naming the object;
// other errors pass.
func notFound(err error, format string, args ...any) error {
	if llmflow.ErrorCode(err) == llmflow.ENOTFOUND {
		return llmflow.Errorf(llmflow.ENOTFOUND, format, args...)
	}
	return err
}

// mayTokens reports whether p may see and manage name's admin tokens: the
// user themselves, or a proxy admin.
func mayTokens(p Principal, name string) bool {
	return (p.User && p.Name == name) || p.may(authz.ManageTokens, authz.Proxy)
}

// tokenView is the wire type adminapi.Token (package adminapi: the contract of
// the CLI, the console and the API).
type tokenView = adminapi.Token

func tokenViewOf(t llmflow.AdminToken) tokenView { return adminapi.TokenOf(t) }

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, p Principal) error {
	name := r.PathValue("name")
	if err := knownParams(r); err != nil {
		return err
	}
	if !mayTokens(p, name) {
		return forbidden("only the user themselves or a proxy admin sees a user's tokens")
	}
	if _, err := h.store.User(r.Context(), name); err != nil {
		return notFound(err, "no user %q", name)
	}
	ts, err := h.store.AdminTokens(r.Context(), name)
	if err != nil {
		return err
	}
	out := make([]tokenView, 0, len(ts))
	for _, t := range ts {
		out = append(out, tokenViewOf(t))
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}

// TokenRequest is the wire type adminapi.TokenRequest (package adminapi: the contract of
// the CLI, the console and the API).
type TokenRequest = adminapi.TokenRequest

// createToken is POST /admin/users/{name}/tokens: a new llma- token,
// whose secret is in this answer only.
func (h *Handler) createToken(w http.ResponseWriter, r *http.Request, p Principal) error {
	name := r.PathValue("name")
	var req TokenRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if !mayTokens(p, name) {
		return forbidden("only the user themselves or a proxy admin creates a user's tokens")
	}
	if len(req.Name) > llmflow.MaxKeyFieldBytes || hasControlChar(req.Name) {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "name", Message: fmt.Sprintf("name is limited to %d bytes without control characters", llmflow.MaxKeyFieldBytes)}
	}
	u, err := h.store.User(r.Context(), name)
	if err != nil {
		return notFound(err, "no user %q", name)
	}
	if !u.Active() {
		return forbidden("user %q is disabled", name)
	}
	secret, hash, hint := llmflow.NewAdminTokenSecret()
	t := llmflow.AdminToken{ID: llmflow.NewID("tok_"), User: name, Hash: hash, Hint: hint, Name: req.Name, CreatedAt: h.now().UTC()}
	if err := h.store.CreateAdminToken(r.Context(), t); err != nil {
		return err
	}
	v := tokenViewOf(t)
	h.audit(r, p, "token.create", "token "+t.ID+" of user "+name, authz.OrgScope(u.Org), nil, v)
	h.log.Info("admin token created", "user", name, "id", t.ID, "by", p.Name)
	v.Token = secret
	return writeJSON(w, http.StatusCreated, v)
}

// revokeToken is DELETE /admin/users/{name}/tokens/{id}: the token stops
// working at the next request, on every gateway of the store.
func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request, p Principal) error {
	name, id := r.PathValue("name"), r.PathValue("id")
	if !mayTokens(p, name) {
		return forbidden("only the user themselves or a proxy admin revokes a user's tokens")
	}
	u, err := h.store.User(r.Context(), name)
	if err != nil {
		return notFound(err, "no user %q", name)
	}
	ts, err := h.store.AdminTokens(r.Context(), name)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ts, func(t llmflow.AdminToken) bool { return t.ID == id })
	if i < 0 {
		return llmflow.Errorf(llmflow.ENOTFOUND, "user %q has no token %q", name, id)
	}
	if err := h.store.RevokeAdminToken(r.Context(), name, id, h.now().UTC()); err != nil {
		return notFound(err, "user %q has no token %q", name, id)
	}
	h.forgetUser(name)
	before := tokenViewOf(ts[i])
	after := ts[i]
	if after.Active() {
		after.RevokedAt = h.now().UTC()
	}
	h.audit(r, p, "token.revoke", "token "+id+" of user "+name, authz.OrgScope(u.Org), before, tokenViewOf(after))
	return writeJSON(w, http.StatusOK, tokenViewOf(after))
}

// RoleRequest is the wire type adminapi.RoleRequest (package adminapi: the contract of
// the CLI, the console and the API).
type RoleRequest = adminapi.RoleRequest

// grantOf checks a requested grant against the tree served now: the
// organisation or team exists, a team role's org (filled in when left
// out) is the team's.
func (h *Handler) grantOf(req RoleRequest) (authz.Grant, error) {
	gr := authz.Grant{Role: authz.Role(req.Role), Org: req.Org, Team: req.Team}
	if err := gr.Validate(); err != nil {
		return gr, &llmflow.Error{Code: llmflow.EINVALID, Param: "role", Message: err.Error()}
	}
	v := h.gw.Accounts()
	switch gr.Level() {
	case authz.LevelOrg:
		if a, ok := v.Account(gr.Org); !ok || a.Kind != llmflow.KindOrg {
			return gr, &llmflow.Error{Code: llmflow.ENOTFOUND, Param: "org", Message: "unknown organisation " + quote(gr.Org)}
		}
	case authz.LevelTeam:
		org := v.OrgOfTeam(gr.Team)
		if org == "" {
			return gr, &llmflow.Error{Code: llmflow.ENOTFOUND, Param: "team", Message: "unknown team " + quote(gr.Team)}
		}
		if gr.Org != "" && gr.Org != org {
			return gr, &llmflow.Error{Code: llmflow.EINVALID, Param: "org", Message: fmt.Sprintf("team %s is in organisation %s, not %s", quote(gr.Team), quote(org), quote(gr.Org))}
		}
		gr.Org = org
	}
	return gr, nil
}

// storedGrant is how a grant is stored: a team grant names the team only,
// so that it follows the team if Slurm moves it.
func storedGrant(user string, gr authz.Grant, at time.Time) llmflow.RoleGrant {
	rg := llmflow.RoleGrant{User: user, Role: string(gr.Role), Org: gr.Org, Team: gr.Team, CreatedAt: at}
	if rg.Team != "" {
		rg.Org = ""
	}
	return rg
}

func (h *Handler) listRoles(w http.ResponseWriter, r *http.Request, p Principal) error {
	name := r.PathValue("name")
	if err := knownParams(r); err != nil {
		return err
	}
	u, err := h.store.User(r.Context(), name)
	if llmflow.ErrorCode(err) == llmflow.ENOTFOUND && !p.everywhere(authz.Read) {
		// who exists is for proxy readers to know
		return forbidden("you may not see the roles of user %q", name)
	}
	if err != nil {
		return notFound(err, "no user %q", name)
	}
	roles, err := h.store.Roles(r.Context(), name)
	if err != nil {
		return err
	}
	v := h.gw.Accounts()
	if !userVisible(p, v, u, roles) {
		return forbidden("you may not see the roles of user %q", name)
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(h.userView(p, v, u, roles).Roles))
}

// grantRole is PUT /admin/users/{name}/roles: nobody grants above their
// own scope (authz.Principal.MayGrant).
func (h *Handler) grantRole(w http.ResponseWriter, r *http.Request, p Principal) error {
	name := r.PathValue("name")
	var req RoleRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	return h.changeRole(w, r, p, name, req, true)
}

// revokeRole is DELETE /admin/users/{name}/roles?role=&org=&team=: who may
// grant a role may remove it.
func (h *Handler) revokeRole(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "role", "org", "team"); err != nil {
		return err
	}
	q := r.URL.Query()
	return h.changeRole(w, r, p, r.PathValue("name"), RoleRequest{Role: q.Get("role"), Org: q.Get("org"), Team: q.Get("team")}, false)
}

func (h *Handler) changeRole(w http.ResponseWriter, r *http.Request, p Principal, name string, req RoleRequest, grant bool) error {
	gr, err := h.grantOf(req)
	if err != nil {
		if llmflow.ErrorCode(err) == llmflow.ENOTFOUND && !p.everywhere(authz.Read) {
			// an unknown scope is out of the caller's scope: do not say
			// which names exist elsewhere
			return forbidden("you may not grant or remove %s", authz.Grant{Role: authz.Role(req.Role), Org: req.Org, Team: req.Team})
		}
		return err
	}
	if !p.authz().MayGrant(gr) {
		return forbidden("you may not grant or remove %s: nobody grants above their own scope", gr)
	}
	u, err := h.store.User(r.Context(), name)
	if err != nil {
		return notFound(err, "no user %q", name)
	}
	rg := storedGrant(name, gr, h.now().UTC())
	action := "role.grant"
	if grant {
		if !u.Active() {
			return forbidden("user %q is disabled", name)
		}
		err = h.store.GrantRole(r.Context(), rg)
	} else {
		action = "role.revoke"
		err = h.store.RevokeRole(r.Context(), rg)
	}
	if err != nil {
		return notFound(err, "user %q does not hold %s", name, gr)
	}
	h.forgetUser(name)
	after, err := h.store.Roles(r.Context(), name)
	if err != nil {
		return err
	}
	// The entry shows the one grant, never the user's roles elsewhere:
	// readers of this scope see the trail.
	view := adminapi.RoleChange{Role: grantViews([]authz.Grant{gr})[0], User: name}
	var before, afterView any = nil, view
	if !grant {
		before, afterView = view, nil
	}
	h.audit(r, p, action, gr.String()+" for user "+name, authz.Scope{Org: gr.Org, Team: gr.Team}, before, afterView)
	uv := h.userView(p, h.gw.Accounts(), u, after)
	return writeJSON(w, http.StatusOK, adminapi.NewList(uv.Roles))
}

func hasControlChar(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return true
		}
	}
	return false
}
