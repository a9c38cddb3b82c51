package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Role is an administrative role. Only the master key exists for now;
// users with scoped roles and llma- tokens come with delegated
// administration, and plug in at principal resolution.
type Role string

const (
	RoleProxyAdmin Role = "proxy_admin"
)

// Principal is who is calling the admin API.
type Principal struct {
	Name string
	Role Role
}

// mayManageTeam reports whether p may manage keys of the team.
func (p Principal) mayManageTeam(org, team string) bool { return p.Role == RoleProxyAdmin }

var errAdminAuth = &llmflow.Error{Code: llmflow.EUNAUTHORIZED, Message: "admin routes need Authorization: Bearer <master key>"}

// adminPrincipal authenticates an admin request with the operator
// secrets (operatorAuth): the master key is compared first, in constant
// time, and only failures of operator secrets from the caller's network
// can throttle it, never bad client keys.
func (g *Gateway) adminPrincipal(r *http.Request) (Principal, error) {
	if _, err := g.secretAuth.check(r.Header.Get("Authorization"), r.RemoteAddr, g.now(), secretMaster, errAdminAuth); err != nil {
		g.operatorDenied(err)
		return Principal{}, err
	}
	return Principal{Name: "master", Role: RoleProxyAdmin}, nil
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

func (g *Gateway) adminRoutes() {
	g.handleMethods("/admin/keys", map[string]handler{
		http.MethodGet:  g.admin(g.listKeys),
		http.MethodPost: g.admin(g.createKey),
	})
	g.handle(http.MethodDelete, "/admin/keys/{id}", g.admin(g.revokeKey))
	g.handle(http.MethodGet, "/admin/fairshare", g.admin(g.fairshareReport))
	g.handle(http.MethodGet, "/admin/sync", g.admin(g.listSyncs))
	g.handle(http.MethodGet, "/admin/spend", g.admin(g.spendReport))
	g.handle(http.MethodGet, "/admin/usage.csv", g.admin(g.usageCSV))
	g.adminBudgetRoutes()
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
	case !p.mayManageTeam(team.Parent, team.Name):
		return llmflow.Key{}, "", llmflow.Errorf(llmflow.EFORBIDDEN, "you may not create keys for team %q", req.Team)
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
	g.auth.misses.remove(hash)
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
	out := make([]keyView, 0, len(keys))
	for _, k := range keys {
		if p.mayManageTeam(k.Org, k.Team) {
			out = append(out, viewOf(k))
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
	if !p.mayManageTeam(k.Org, k.Team) {
		return llmflow.Errorf(llmflow.ENOTFOUND, "no key %q", id)
	}
	if err := g.keys.RevokeKey(r.Context(), id, g.now().UTC()); err != nil {
		return err
	}
	g.auth.forget(k.Hash)
	g.log.Info("key revoked", "id", id, "by", p.Name)
	k, err = g.keys.KeyByID(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewOf(k))
}
