package admin

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/budgets"
)

// budgetScope is where a budget's scope sits in the tree served now, for
// authorization: an organisation's budget on the organisation, a team's or
// a project's on its team, a key's on its key's team, a tag's proxy-wide
// (tags cross organisations). ok is false when the scope names nothing in
// the tree (a deleted team, an unknown key): only proxy-wide callers see
// or change those.
func (h *Handler) budgetScope(ctx context.Context, sc budgets.Scope) (s authz.Scope, ok bool) {
	return h.budgetScopeWith(sc, func(id string) (string, bool) {
		k, err := h.keys.KeyByID(ctx, id)
		return k.Team, err == nil
	})
}

// budgetScopeWith is budgetScope with keyTeam telling a key's team.
func (h *Handler) budgetScopeWith(sc budgets.Scope, keyTeam func(id string) (string, bool)) (s authz.Scope, ok bool) {
	v := h.gw.Accounts()
	switch sc.Kind {
	case budgets.KindOrg:
		a, _ := v.Account(sc.Name)
		return authz.OrgScope(sc.Name), a != nil && a.Kind == llmflow.KindOrg
	case budgets.KindTeam:
		return h.teamScope(sc.Name)
	case budgets.KindProject, budgets.KindUser:
		// The project's team: its nearest team ancestor (projects nest);
		// a user association's, its account's.
		name := sc.Name
		if sc.Kind == budgets.KindUser {
			name, _, _ = budgets.SplitUserScope(sc.Name)
		}
		a, _ := v.Account(name)
		for i := 0; a != nil && a.Kind == llmflow.KindProject && i < 64; i++ {
			a, _ = v.Account(a.Parent)
		}
		if a == nil || a.Kind != llmflow.KindTeam {
			return authz.Proxy, false
		}
		return h.teamScope(a.Name)
	case budgets.KindKey:
		team, ok := keyTeam(sc.Name)
		if !ok {
			return authz.Proxy, false
		}
		return h.teamScope(team)
	}
	return authz.Proxy, true // tag
}

// mayBudget refuses with 403 a change of the budget on sc that p may not
// make: who may set a budget of each kind is authz's policy
// (authz.BudgetAction).
func (h *Handler) mayBudget(ctx context.Context, p Principal, sc budgets.Scope) (authz.Scope, error) {
	a, ok := authz.BudgetAction(string(sc.Kind))
	if !ok {
		return authz.Proxy, nil // Validate names the bad kind
	}
	s, known := h.budgetScope(ctx, sc)
	if p.everywhere(a) {
		return s, nil
	}
	if !known || !p.may(a, s) {
		return s, forbidden("%s may not change the budget on %s", p.Name, sc)
	}
	return s, nil
}

// BudgetRequest is the wire type adminapi.BudgetRequest (package adminapi: the contract of
// the CLI, the console and the API).
type BudgetRequest = adminapi.BudgetRequest

// IncreaseRequest is the wire type adminapi.Increase (package adminapi: the contract of
// the CLI, the console and the API).
type IncreaseRequest = adminapi.Increase

// budgetView is the wire type adminapi.Budget (package adminapi: the contract of
// the CLI, the console and the API).
type budgetView = adminapi.Budget

func viewOfBudget(s budgets.Status) budgetView {
	return budgetView{
		Kind: string(s.Kind), Name: s.Name, Model: s.Model, Period: string(s.Period), MaxCost: s.MaxCost, SoftLimit: s.SoftLimit,
		Source: string(s.Source), PeriodStart: s.PeriodStart, PeriodEnd: s.Period.End(s.PeriodStart),
		Increase: s.Increase, EffectiveLimit: s.EffectiveLimit, Spent: s.Spent, Held: s.Held,
		Remaining: max(0, s.EffectiveLimit-s.Spent-s.Held),
	}
}

var errNoBudgets = &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "budgets need a store; this gateway has none"}

func (h *Handler) listBudgets(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.budgets == nil {
		return errNoBudgets
	}
	if err := knownParams(r, "kind", "name", "model"); err != nil {
		return err
	}
	q := r.URL.Query()
	out := []budgetView{}
	all := p.everywhere(authz.Read) // else: the budgets of the scopes p may read, none for a member
	// the teams of the keys with a budget, read once for the listing (not
	// one query per key budget)
	var teams map[string]string
	keyTeam := func(id string) (string, bool) {
		if teams == nil {
			teams = map[string]string{}
			ks, err := h.keys.ListKeys(r.Context(), llmflow.KeyFilter{IncludeRevoked: true})
			if err != nil {
				h.log.Warn("budget listing: keys not read; key budgets left out", "err", err)
			}
			for _, k := range ks {
				teams[k.ID] = k.Team
			}
		}
		t, ok := teams[id]
		return t, ok
	}
	for _, s := range h.gw.BudgetTable().Status() {
		if (q.Has("kind") && string(s.Kind) != q.Get("kind")) || (q.Has("name") && s.Name != q.Get("name")) ||
			(q.Has("model") && s.Model != q.Get("model")) {
			continue
		}
		if !all {
			if sc, known := h.budgetScopeWith(s.Scope, keyTeam); !known || sc == authz.Proxy || !p.may(authz.Read, sc) {
				continue
			}
		}
		out = append(out, viewOfBudget(s))
	}
	slices.SortFunc(out, func(a, b budgetView) int {
		return strings.Compare(string(a.Kind)+"\x00"+a.Name+"\x00"+a.Model, string(b.Kind)+"\x00"+b.Name+"\x00"+b.Model)
	})
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}

// checkScope refuses a budget scope that names nothing: an organisation,
// team or project not in the tree served now, a key that does not exist,
// a model that is not configured. A typo must not set a budget that
// never applies.
func (h *Handler) checkScope(ctx context.Context, sc budgets.Scope) error {
	if err := sc.Validate(); err != nil {
		return fieldError(err)
	}
	notFound := func(param, format string, args ...any) error {
		e := llmflow.Errorf(llmflow.ENOTFOUND, format, args...)
		e.Param = param
		return e
	}
	if sc.Model != "" && !h.gw.IsModel(sc.Model) {
		return notFound("model", "no model %s is configured", quote(sc.Model))
	}
	v := h.gw.Accounts()
	want := map[budgets.Kind]llmflow.Kind{budgets.KindOrg: llmflow.KindOrg, budgets.KindTeam: llmflow.KindTeam, budgets.KindProject: llmflow.KindProject}
	switch sc.Kind {
	case budgets.KindOrg, budgets.KindTeam, budgets.KindProject:
		if a, _ := v.Account(sc.Name); a == nil || a.Kind != want[sc.Kind] {
			return notFound("name", "no %s %s in the account tree", sc.Kind, quote(sc.Name))
		}
	case budgets.KindUser:
		e := llmflow.Errorf(llmflow.EINVALID, "a user association's budget is Slurm's GrpTRESMins on it: set it with sacctmgr (it applies after the next import)")
		e.Param = "kind"
		return e
	case budgets.KindKey:
		if _, err := h.keys.KeyByID(ctx, sc.Name); err != nil {
			if llmflow.ErrorCode(err) == llmflow.ENOTFOUND {
				return notFound("name", "no key %s", quote(sc.Name))
			}
			return err
		}
	}
	return nil
}

func fieldError(err error) error {
	var fe *budgets.FieldError
	if errors.As(err, &fe) {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: fe.Message, Param: fe.Field}
	}
	return llmflow.Errorf(llmflow.EINVALID, "%s", err.Error())
}

func (h *Handler) putBudget(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.budgets == nil {
		return errNoBudgets
	}
	var req BudgetRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if req.MaxCost == nil {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "max_cost is required (GPU-hours per period; 0 refuses every request)", Param: "max_cost"}
	}
	b := budgets.Budget{Scope: budgets.Scope{Kind: budgets.Kind(req.Kind), Name: req.Name, Model: req.Model}, Period: budgets.Period(req.Period),
		MaxCost: *req.MaxCost, SoftLimit: req.SoftLimit, Source: budgets.SourceAdmin, UpdatedAt: h.now().UTC()}
	if err := b.Validate(); err != nil {
		return fieldError(err)
	}
	// may first: a caller without the right everywhere gets 403 for a name
	// it may not know, whether or not it exists (another institution's)
	as, err := h.mayBudget(r.Context(), p, b.Scope)
	if err != nil {
		return err
	}
	if err := h.checkScope(r.Context(), b.Scope); err != nil {
		return err
	}
	before := h.budgetOn(b.Scope)
	if err := h.budgets.PutBudget(r.Context(), b); err != nil {
		return err
	}
	h.audit(r, p, "budget.set", "budget "+budgets.ID(b.Scope), as, before, budgetSettingOf(b))
	h.log.Info("budget set", "budget", b.ID(), "period", b.Period, "max_cost", b.MaxCost, "soft_limit", b.SoftLimit, "by", p.Name)
	return h.answerBudget(w, r, b.Scope, http.StatusOK)
}

// answerBudget puts the budgets in force again and answers with the one
// on sc.
func (h *Handler) answerBudget(w http.ResponseWriter, r *http.Request, sc budgets.Scope, status int) error {
	if err := h.gw.RefreshBudgets(r.Context()); err != nil {
		return &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "saved, but the budgets could not be read back; they apply at the next refresh", Err: err}
	}
	for _, s := range h.gw.BudgetTable().Status() {
		if s.Scope == sc {
			return writeJSON(w, status, viewOfBudget(s))
		}
	}
	return llmflow.Errorf(llmflow.EINTERNAL, "budget %s not in force after setting it", sc)
}

func (h *Handler) deleteBudget(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.budgets == nil {
		return errNoBudgets
	}
	if err := knownParams(r, "kind", "name", "model"); err != nil {
		return err
	}
	q := r.URL.Query()
	sc := budgets.Scope{Kind: budgets.Kind(q.Get("kind")), Name: q.Get("name"), Model: q.Get("model")}
	if err := sc.Validate(); err != nil {
		return fieldError(err)
	}
	as, err := h.mayBudget(r.Context(), p, sc)
	if err != nil {
		return err
	}
	before := h.budgetOn(sc)
	if err := h.budgets.DeleteBudget(r.Context(), sc); err != nil {
		if llmflow.ErrorCode(err) == llmflow.ENOTFOUND {
			return llmflow.Errorf(llmflow.ENOTFOUND, "no budget set on %s (a budget from Slurm is changed in Slurm)", sc)
		}
		return err
	}
	h.log.Info("budget deleted", "budget", budgets.ID(sc), "by", p.Name)
	h.audit(r, p, "budget.delete", "budget "+budgets.ID(sc), as, before, nil)
	if err := h.gw.RefreshBudgets(r.Context()); err != nil {
		return &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "deleted, but the budgets could not be read back; the change applies at the next refresh", Err: err}
	}
	return writeJSON(w, http.StatusOK, adminapi.BudgetDeleted{Deleted: true, Kind: string(sc.Kind), Name: sc.Name, Model: sc.Model})
}

func (h *Handler) increaseBudget(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.budgets == nil {
		return errNoBudgets
	}
	var req IncreaseRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	sc := budgets.Scope{Kind: budgets.Kind(req.Kind), Name: req.Name, Model: req.Model}
	in := budgets.Increase{Scope: sc, Amount: req.Amount, ExpiresAt: req.ExpiresAt.UTC(), CreatedAt: h.now().UTC()}
	if req.ExpiresAt.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "expires_at is required (RFC 3339, within a year)", Param: "expires_at"}
	}
	if err := in.Validate(in.CreatedAt); err != nil {
		return fieldError(err)
	}
	as, err := h.mayBudget(r.Context(), p, sc)
	if err != nil {
		return err
	}
	if h.budgetOn(sc) == nil {
		e := llmflow.Errorf(llmflow.ENOTFOUND, "no budget on %s to increase; set one first", sc)
		e.Param = "name"
		return e
	}
	in, err = h.budgets.AddIncrease(r.Context(), in)
	if err != nil {
		return err
	}
	h.audit(r, p, "budget.increase", "budget "+budgets.ID(sc), as, nil, budgetIncreaseOf(in))
	h.log.Info("budget increased", "budget", budgets.ID(sc), "amount", in.Amount, "expires_at", in.ExpiresAt, "by", p.Name)
	return h.answerBudget(w, r, sc, http.StatusCreated)
}

// budgetOn is the budget set on sc now, for the audit trail (nil when
// none).
func (h *Handler) budgetOn(sc budgets.Scope) any {
	for _, b := range h.gw.BudgetTable().Budgets() {
		if b.Scope == sc {
			return budgetSettingOf(b)
		}
	}
	return nil
}

// budgetSettingOf is b as the audit trail records it.
func budgetSettingOf(b budgets.Budget) adminapi.BudgetSetting {
	return adminapi.BudgetSetting{Kind: string(b.Kind), Name: b.Name, Model: b.Model, Period: string(b.Period),
		MaxCost: b.MaxCost, SoftLimit: b.SoftLimit, Source: string(b.Source), UpdatedAt: b.UpdatedAt}
}

// budgetIncreaseOf is in as the audit trail records it.
func budgetIncreaseOf(in budgets.Increase) adminapi.BudgetIncrease {
	return adminapi.BudgetIncrease{ID: in.ID, Scope: adminapi.BudgetScope{Kind: string(in.Scope.Kind), Name: in.Scope.Name, Model: in.Scope.Model},
		Amount: in.Amount, ExpiresAt: in.ExpiresAt, CreatedAt: in.CreatedAt}
}
