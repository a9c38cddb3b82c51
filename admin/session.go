package admin

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/budgets"
)

// Sessions authenticates admin requests that carry no Authorization
// header by a web console session (package console): Options.Sessions.
type Sessions interface {
	// AdminSession returns the credential of r's console session: user,
	// for someone signed in through the identity provider (the llmflow
	// user of that name, with the roles the store holds), or token, for
	// someone signed in with an admin token or the master key; both ""
	// when r carries no session (it then needs a bearer token). An
	// error refuses r: a session that expired or is unknown, a write
	// without the session's CSRF token.
	AdminSession(r *http.Request) (user, token string, err error)
}

// SelfService is what researchers signed in to the console may do for
// themselves (config self_service): Keys lets a member signed in through
// the identity provider create and revoke their own keys; MaxKeys (0: no
// cap) bounds the active keys a member owns, however they were created.
type SelfService struct {
	Keys    bool
	MaxKeys int
}

// sessionPrincipal authenticates r by its console session, when it has
// one and no Authorization header: ok false when it has neither.
func (h *Handler) sessionPrincipal(r *http.Request) (Principal, *http.Request, bool, error) {
	if h.sessions == nil || r.Header.Get("Authorization") != "" {
		return Principal{}, r, false, nil
	}
	user, tok, err := h.sessions.AdminSession(r)
	switch {
	case err != nil:
		return Principal{}, r, true, err
	case user != "":
		if err := h.gw.OperatorLimited(r); err != nil {
			return Principal{}, r, true, err
		}
		e, err := h.resolveUser(r.Context(), user, h.now())
		if err != nil {
			return Principal{}, r, true, err
		}
		p := h.principalOf(e)
		p.SSO = true
		return p, r, true, nil
	case tok != "":
		// the session's token, as if the browser had sent it (it never
		// sees it): the usual checks follow
		r2 := r.Clone(r.Context())
		r2.Header.Set("Authorization", "Bearer "+tok)
		return Principal{}, r2, false, nil
	}
	return Principal{}, r, false, nil
}

var errNoSessionUser = &llmflow.Error{Code: llmflow.EUNAUTHORIZED,
	Message: "your single sign-on user has no llmflow user, or it is disabled: ask an administrator (users come from Slurm associations)"}

// resolveUser is resolveToken for a user signed in through the identity
// provider: the user and their roles, current at the store's admin
// generation, cached under a key no token hashes to.
func (h *Handler) resolveUser(ctx context.Context, name string, now time.Time) (*cachedPrincipal, error) {
	if h.store == nil {
		return nil, errNoAdminStore
	}
	key := sha256.Sum256([]byte("llmflow console user\x00" + name))
	cached, _, fresh := h.principals.Get(key, now)
	gen, err := h.store.AdminGeneration(ctx)
	if err != nil {
		if cached != nil && fresh {
			h.log.Warn("admin store unavailable: serving a cached console user", "user", name, "err", err)
			return cached, nil
		}
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	if cached != nil && cached.gen == gen {
		h.principals.Put(key, cached, now)
		return cached, nil
	}
	u, err := h.store.User(ctx, name)
	switch {
	case errors.Is(err, llmflow.ErrNotFound) || llmflow.ErrorCode(err) == llmflow.ENOTFOUND:
		return nil, errNoSessionUser
	case err != nil:
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	case !u.Active():
		return nil, errNoSessionUser
	}
	roles, err := h.store.Roles(ctx, u.Name)
	if err != nil {
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "admin store unavailable", Err: err}
	}
	e := &cachedPrincipal{user: u, roles: roles, gen: gen}
	h.principals.Put(key, e, now)
	return e, nil
}

// UserExists reports whether name is an enabled llmflow user: the console
// asks it when someone signs in through the identity provider, so that a
// person without a user is told at once.
func (h *Handler) UserExists(ctx context.Context, name string) error {
	_, err := h.resolveUser(ctx, name, h.now())
	return err
}

// selfServiceKeys refuses a key created or revoked by p as its owner (p
// does not manage the team's keys) when self-service does not allow it:
// keys from a console signed in through the identity provider need
// self_service { keys = true }; creating one more needs p to own fewer
// than max_keys active keys.
func (h *Handler) selfServiceKeys(ctx context.Context, p Principal, org, team string, creating bool) error {
	if p.mayManageTeam(org, team) {
		return nil
	}
	if p.SSO && !h.selfService.Keys {
		return forbidden("self-service keys are off on this gateway (self_service { keys = true } turns them on): ask a team admin")
	}
	if !creating || h.selfService.MaxKeys <= 0 {
		return nil
	}
	ks, err := h.keys.ListKeys(ctx, llmflow.KeyFilter{})
	if err != nil {
		return err
	}
	n := 0
	for i := range ks {
		if ks[i].Owner == p.Name && ks[i].Active() {
			n++
		}
	}
	if n >= h.selfService.MaxKeys {
		return forbidden("you own %d active keys, the most self_service { max_keys } allows: revoke one first", n)
	}
	return nil
}

// self is GET /admin/self: the caller and the budgets they draw on with
// what is left, as a researcher's console page shows them. A user's
// budgets are those of the organisations and teams they hold a role on,
// of the projects under those teams, and of the keys they own; the master
// key and proxy readers get every budget (GET /admin/budgets for
// filtering).
func (h *Handler) self(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	kind := "user"
	if !p.User {
		kind = "master_key"
	}
	out := adminapi.Self{Kind: kind, Name: p.Name, SSO: p.SSO, Roles: grantViews(p.authz().Grants), Budgets: []adminapi.Budget{},
		SelfServiceKeys: h.selfService.Keys, MaxKeys: h.selfService.MaxKeys}
	all := p.everywhere(authz.Read)
	var owned map[string]bool
	if !all && p.User {
		ks, err := h.keys.ListKeys(r.Context(), llmflow.KeyFilter{})
		if err != nil {
			return err
		}
		owned = map[string]bool{}
		for _, k := range ks {
			if k.Owner == p.Name {
				owned[k.ID] = true
			}
		}
	}
	orgs, teams := map[string]bool{}, map[string]bool{}
	for _, g := range p.authz().Grants {
		switch g.Level() {
		case authz.LevelOrg:
			orgs[g.Org] = true
		case authz.LevelTeam:
			teams[g.Team] = true
			orgs[g.Org] = true // the organisation a team's requests also draw on
		}
	}
	for _, s := range h.gw.BudgetTable().Status() {
		if all || h.drawsOn(s.Scope, orgs, teams, owned) {
			out.Budgets = append(out.Budgets, viewOfBudget(s))
		}
	}
	slices.SortFunc(out.Budgets, func(a, b adminapi.Budget) int {
		return strings.Compare(a.Kind+"\x00"+a.Name+"\x00"+a.Model, b.Kind+"\x00"+b.Name+"\x00"+b.Model)
	})
	return writeJSON(w, http.StatusOK, out)
}

// drawsOn reports whether a budget on sc is one a user with roles on orgs
// and teams, owning the keys owned, draws on.
func (h *Handler) drawsOn(sc budgets.Scope, orgs, teams, owned map[string]bool) bool {
	switch sc.Kind {
	case budgets.KindOrg:
		return orgs[sc.Name]
	case budgets.KindKey:
		return owned[sc.Name]
	case budgets.KindTeam, budgets.KindProject, budgets.KindUser:
		s, ok := h.budgetScope(context.Background(), sc)
		return ok && teams[s.Team]
	}
	return false
}

// CheckToken authenticates token (an admin token or the master key) as the
// admin API would a request like r bearing it, under the same failure
// limiter: the console's sign-in with a token. It returns the
// principal's name.
func (h *Handler) CheckToken(r *http.Request, token string) (string, error) {
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+token)
	p, err := h.principal(r2)
	if err != nil {
		return "", err
	}
	return p.Name, nil
}
