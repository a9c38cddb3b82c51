package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// KeyStore is what the admin API needs of a store for client keys (the
// stores implement it).
type KeyStore interface {
	CreateKey(ctx context.Context, k llmflow.Key) error
	KeyByID(ctx context.Context, id string) (llmflow.Key, error)
	ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error)
	RevokeKey(ctx context.Context, id string, at time.Time) error
}

// KeyRotateStore gives a key a new secret, the previous one valid until
// prevUntil (POST /admin/keys/{id}/rotate). Stores implement it beside
// KeyStore.
type KeyRotateStore interface {
	RotateKey(ctx context.Context, id string, hash [32]byte, hint string, prevUntil time.Time) error
}

// KeyLimitStore changes a key's limits and activation (PUT
// /admin/keys/{id}/limits, PUT /admin/keys/{id}/active). Stores
// implement it beside KeyStore.
type KeyLimitStore interface {
	SetKeyLimits(ctx context.Context, id string, rpm, tpm, maxInFlight int) error
	SetKeyDisabled(ctx context.Context, id string, disabled bool) error
}

// KeyRequest is the wire type adminapi.KeyRequest (package adminapi: the contract of
// the CLI, the console and the API).
type KeyRequest = adminapi.KeyRequest

// keyView is the wire type adminapi.Key (package adminapi: the contract of
// the CLI, the console and the API).
type keyView = adminapi.Key

func viewOf(k llmflow.Key) keyView { return adminapi.KeyOf(k) }

// CreateKey creates a key for req on behalf of p and returns it with its
// secret, which is not kept anywhere.
func (h *Handler) CreateKey(ctx context.Context, req KeyRequest, p Principal) (llmflow.Key, string, error) {
	k, secret, err := CreateKey(ctx, h.gw, h.keys, req, p)
	if err == nil {
		h.log.Info("key created", "id", k.ID, "team", k.Team, "project", k.Project, "by", p.Name)
	}
	return k, secret, err
}

// CreateKey creates a key in keys for req on behalf of p, in the tree gw
// serves, and returns it with its secret, which is not kept anywhere (the
// admin API's POST /admin/keys; quickstart and the demo call it before
// any admin API serves).
func CreateKey(ctx context.Context, gw *gateway.Gateway, keys KeyStore, req KeyRequest, p Principal) (llmflow.Key, string, error) {
	view := gw.Accounts()
	team, ok := view.Team(req.Team)
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
		switch under, off := view.ProjectChain(req.Project, team.Name); {
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
	for _, m := range req.Models {
		if !gw.IsModel(m) {
			return llmflow.Key{}, "", &llmflow.Error{Code: llmflow.EINVALID, Param: "models",
				Message: fmt.Sprintf("unknown model %s (a key lists configured models: %s)", quote(m), strings.Join(gw.Models(), ", "))}
		}
	}
	if err := checkOwner(view, team, req.Project, req.Owner); err != nil {
		return llmflow.Key{}, "", err
	}
	secret, hash, hint := llmflow.NewKeySecret()
	k := llmflow.Key{
		ID: llmflow.NewID("key_"), Hash: hash, Hint: hint, Name: req.Name,
		Org: team.Parent, Team: team.Name, Project: req.Project, Owner: req.Owner,
		RPM: req.RPM, TPM: req.TPM, MaxInFlight: req.MaxInFlight, Tags: req.Tags,
		CreatedAt: gw.Now().UTC(), Models: req.Models,
	}
	if req.ExpiresAt != nil {
		if !req.ExpiresAt.After(gw.Now()) {
			return llmflow.Key{}, "", &llmflow.Error{Code: llmflow.EINVALID, Param: "expires_at", Message: "expires_at must be in the future"}
		}
		k.ExpiresAt = req.ExpiresAt.UTC()
	}
	if err := k.Validate(); err != nil {
		return llmflow.Key{}, "", err
	}
	if err := keys.CreateKey(ctx, k); err != nil {
		return llmflow.Key{}, "", err
	}
	gw.ForgetKey(hash) // a miss cached for it (a client trying it early)
	return k, secret, nil
}

// checkOwner refuses an owner who is not a Slurm user of the account the
// key counts at (its project, else its team) when that account comes from
// Slurm: usage is charged, and written back, to the owner's association
// in that account, and a name Slurm does not have there would count
// nowhere in Slurm (or have the write-back plan a new Slurm user). Slurm
// keeps user names lower-case, so the match ignores case, as the
// fair-share leaves do. Accounts of the configuration or the admin API
// have no Slurm users: any owner is taken.
func checkOwner(view gateway.AccountView, team *llmflow.Account, project, owner string) error {
	if owner == "" {
		return nil
	}
	acct := team
	if project != "" {
		if a, ok := view.Account(project); ok {
			acct = a
		}
	}
	if acct.Source != "slurm" {
		return nil
	}
	if slices.ContainsFunc(acct.Members, func(m string) bool { return strings.EqualFold(m, owner) }) {
		return nil
	}
	where := "team " + quote(team.Name)
	if acct != team {
		where = "project " + quote(acct.Name)
	}
	return &llmflow.Error{Code: llmflow.EINVALID, Param: "owner",
		Message: fmt.Sprintf("owner %s is not a Slurm user of %s (no association there): give one of its users, or no owner",
			quote(owner), where)}
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req KeyRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if team, ok := h.gw.Accounts().Team(req.Team); ok {
		if err := h.selfServiceKeys(r.Context(), p, team.Parent, team.Name, true); err != nil {
			return err
		}
	}
	k, secret, err := h.CreateKey(r.Context(), req, p)
	if err != nil {
		return err
	}
	v := viewOf(k)
	h.audit(r, p, "key.create", "key "+k.ID, authz.TeamScope(k.Org, k.Team), nil, v)
	v.Key = secret
	return writeJSON(w, http.StatusCreated, v)
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "org", "team", "include_revoked"); err != nil {
		return err // a misspelt filter must not list every key
	}
	q := r.URL.Query()
	f := llmflow.KeyFilter{Org: q.Get("org"), Team: q.Get("team")}
	switch v := q.Get("include_revoked"); v {
	case "true":
		f.IncludeRevoked = true
	case "", "false":
	default: // "1" or "yes" must not list the active keys only, silently
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "include_revoked",
			Message: fmt.Sprintf("include_revoked must be true or false, got %s", quote(v))}
	}
	keys, err := h.keys.ListKeys(r.Context(), f)
	if err != nil {
		return err
	}
	view := h.gw.Accounts()
	out := make([]keyView, 0, len(keys))
	for i := range keys {
		k := &keys[i]
		if p.mayReadKey(authz.TeamScope(view.OrgOf(k), k.Team), k) {
			out = append(out, viewOf(*k))
		}
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, p Principal) error {
	id := r.PathValue("id")
	k, err := h.keys.KeyByID(r.Context(), id)
	if err != nil {
		if llmflow.ErrorCode(err) == llmflow.ENOTFOUND {
			return llmflow.Errorf(llmflow.ENOTFOUND, "no key %q", id)
		}
		return err
	}
	scope := authz.TeamScope(h.gw.Accounts().OrgOf(&k), k.Team)
	if !p.mayOwnKey(scope, &k) {
		return forbidden("you may not revoke key %q", id)
	}
	if err := h.selfServiceKeys(r.Context(), p, scope.Org, scope.Team, false); err != nil {
		return err
	}
	if err := h.keys.RevokeKey(r.Context(), id, h.now().UTC()); err != nil {
		return err
	}
	h.forgetKey(r.Context(), &k)
	h.log.Info("key revoked", "id", id, "by", p.Name)
	before := viewOf(k)
	k, err = h.keys.KeyByID(r.Context(), id)
	if err != nil {
		return err
	}
	h.audit(r, p, "key.revoke", "key "+id, scope, before, viewOf(k))
	return writeJSON(w, http.StatusOK, viewOf(k))
}

// LimitsRequest is the wire type adminapi.Limits (package adminapi: the contract of
// the CLI, the console and the API).
type LimitsRequest = adminapi.Limits

// keyAdmin returns the key store's admin side, and the key {id} when the
// caller may manage it.
func (h *Handler) keyAdmin(r *http.Request, p Principal) (KeyLimitStore, llmflow.Key, authz.Scope, error) {
	ka := h.keyLimits
	if ka == nil {
		return nil, llmflow.Key{}, authz.Proxy, llmflow.Errorf(llmflow.EUNAVAILABLE, "this key store cannot change keys")
	}
	id := r.PathValue("id")
	k, err := h.keys.KeyByID(r.Context(), id)
	if err != nil {
		if llmflow.ErrorCode(err) == llmflow.ENOTFOUND {
			return nil, k, authz.Proxy, llmflow.Errorf(llmflow.ENOTFOUND, "no key %q", id)
		}
		return nil, k, authz.Proxy, err
	}
	// as for revoking (revokeKey): a key's limits and activation are the
	// team's key managers' (team admin and above), not its owner's, so a
	// member cannot lift a limit set on their key
	scope := authz.TeamScope(h.gw.Accounts().OrgOf(&k), k.Team)
	if !p.may(authz.ManageKeys, scope) {
		return nil, k, scope, forbidden("you may not change key %q", id)
	}
	return ka, k, scope, nil
}

func (h *Handler) setKeyLimits(w http.ResponseWriter, r *http.Request, p Principal) error {
	ka, k, ks, err := h.keyAdmin(r, p)
	if err != nil {
		return err
	}
	var req LimitsRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if err := (llmflow.Key{RPM: req.RPM, TPM: req.TPM, MaxInFlight: req.MaxInFlight}).Validate(); err != nil {
		return err
	}
	if err := ka.SetKeyLimits(r.Context(), k.ID, req.RPM, req.TPM, req.MaxInFlight); err != nil {
		return err
	}
	h.forgetKey(r.Context(), &k) // the next request reads the new limits
	h.audit(r, p, "key.limits", "key "+k.ID, ks, LimitsRequest{RPM: k.RPM, TPM: k.TPM, MaxInFlight: k.MaxInFlight}, req)
	h.log.Info("key limits set", "id", k.ID, "rpm", req.RPM, "tpm", req.TPM, "max_inflight", req.MaxInFlight, "by", p.Name)
	return h.answerKey(w, r, k.ID)
}

// ActiveRequest is the wire type adminapi.ActiveRequest (package adminapi: the contract of
// the CLI, the console and the API).
type ActiveRequest = adminapi.ActiveRequest

func (h *Handler) setKeyActive(w http.ResponseWriter, r *http.Request, p Principal) error {
	ka, k, ks, err := h.keyAdmin(r, p)
	if err != nil {
		return err
	}
	var req ActiveRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	if req.Active == nil {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "active is required (true or false)", Param: "active"}
	}
	if !k.RevokedAt.IsZero() {
		return llmflow.Errorf(llmflow.ECONFLICT, "key %q is revoked; a revoked key cannot be reactivated", k.ID)
	}
	if err := ka.SetKeyDisabled(r.Context(), k.ID, !*req.Active); err != nil {
		return err
	}
	h.forgetKey(r.Context(), &k) // at once, both ways
	h.audit(r, p, "key.active", "key "+k.ID, ks, ActiveRequest{Active: new(!k.Disabled)}, req)
	h.log.Info("key activation set", "id", k.ID, "active", *req.Active, "by", p.Name)
	return h.answerKey(w, r, k.ID)
}

func (h *Handler) answerKey(w http.ResponseWriter, r *http.Request, id string) error {
	k, err := h.keys.KeyByID(r.Context(), id)
	if err != nil {
		return fmt.Errorf("read key back: %w", err)
	}
	return writeJSON(w, http.StatusOK, viewOf(k))
}

// keyOf reads the key {id} of r: 404 for an unknown key.
func (h *Handler) keyOf(r *http.Request) (llmflow.Key, authz.Scope, error) {
	id := r.PathValue("id")
	k, err := h.keys.KeyByID(r.Context(), id)
	if err != nil {
		if llmflow.ErrorCode(err) == llmflow.ENOTFOUND {
			return k, authz.Proxy, llmflow.Errorf(llmflow.ENOTFOUND, "no key %q", id)
		}
		return k, authz.Proxy, err
	}
	return k, authz.TeamScope(h.gw.Accounts().OrgOf(&k), k.Team), nil
}

// getKey is GET /admin/keys/{id}: one key as listings show it, to those
// who may list it (readers of its team, its owner).
func (h *Handler) getKey(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	k, scope, err := h.keyOf(r)
	if err != nil {
		return err
	}
	if !p.mayReadKey(scope, &k) {
		return forbidden("you may not read key %q", k.ID)
	}
	return writeJSON(w, http.StatusOK, viewOf(k))
}

// maxGrace bounds how long a rotated key's previous secret keeps working.
const maxGrace = 720 * time.Hour

// RotateRequest is the wire type adminapi.RotateRequest.
type RotateRequest = adminapi.RotateRequest

// rotateKey is POST /admin/keys/{id}/rotate: a new secret, shown once;
// the previous one keeps working for the grace asked (default 1h), so
// that clients can be moved over. Who may revoke the key may rotate it.
func (h *Handler) rotateKey(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.keyRotation == nil {
		return llmflow.Errorf(llmflow.EUNAVAILABLE, "this key store cannot rotate keys")
	}
	var req RotateRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	grace := time.Hour
	if req.Grace != "" {
		d, err := time.ParseDuration(req.Grace)
		if err != nil || d < 0 || d > maxGrace {
			return &llmflow.Error{Code: llmflow.EINVALID, Param: "grace", Message: "grace must be a duration from 0s to 720h, such as \"24h\""}
		}
		grace = d
	}
	k, scope, err := h.keyOf(r)
	if err != nil {
		return err
	}
	if !p.mayOwnKey(scope, &k) {
		return forbidden("you may not rotate key %q", k.ID)
	}
	if err := h.selfServiceKeys(r.Context(), p, scope.Org, scope.Team, false); err != nil {
		return err
	}
	if !k.Active() {
		return llmflow.Errorf(llmflow.ECONFLICT, "key %q is revoked or deactivated; it cannot be rotated", k.ID)
	}
	secret, hash, hint := llmflow.NewKeySecret()
	if err := h.keyRotation.RotateKey(r.Context(), k.ID, hash, hint, h.now().UTC().Add(grace)); err != nil {
		return err
	}
	h.forgetKey(r.Context(), &k) // its cached entry under the old secret
	h.gw.ForgetKey(hash)
	after, err := h.keys.KeyByID(r.Context(), k.ID)
	if err != nil {
		return fmt.Errorf("read key back: %w", err)
	}
	h.audit(r, p, "key.rotate", "key "+k.ID, scope, viewOf(k), viewOf(after))
	h.log.Info("key rotated", "id", k.ID, "grace", grace, "by", p.Name)
	v := viewOf(after)
	v.Key = secret
	return writeJSON(w, http.StatusOK, v)
}
