package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Client calls a gateway's admin API with a token: an admin token
// (llma-…) or the master key. Its methods are the routes, one each; a
// refusal is an *Error. The token is sent in the Authorization header to
// the base URL only, and is never part of an error or of the client's
// printed form.
type Client struct {
	base string
	// auth is the Authorization header, behind a pointer so that even a
	// Client printed as a value shows an address, not the token.
	auth *string
	hc   *http.Client
}

// DefaultTimeout bounds one call of a Client made with a nil *http.Client.
const DefaultTimeout = 30 * time.Second

// maxAnswer bounds an answer read (a listing of every key of a large
// site fits).
const maxAnswer = 64 << 20

// New returns a client of the gateway at base (http or https, a host, no
// credentials in the URL; a trailing '/' is dropped) that sends token.
// With hc nil it uses a client that never goes through an environment
// proxy and never follows a redirect, so the token goes to the gateway
// named and nowhere else, with DefaultTimeout per call.
func New(base, token string, hc *http.Client) (*Client, error) {
	base = strings.TrimRight(base, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%q: want http(s)://host:port without credentials", redactBase(base))
	}
	if hc == nil {
		hc = &http.Client{
			Transport: &http.Transport{Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
			Timeout: DefaultTimeout,
		}
	}
	auth := "Bearer " + token
	return &Client{base: base, auth: &auth, hc: hc}, nil
}

// redactBase drops the credentials of a URL that carries some, for an
// error message.
func redactBase(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User("…")
		return u.String()
	}
	return s
}

// String names the gateway, never the token.
func (c Client) String() string { return "adminapi.Client(" + c.base + ")" }

// GoString is String: %#v prints no token either.
func (c Client) GoString() string { return c.String() }

// BaseURL is the gateway's base URL.
func (c *Client) BaseURL() string { return c.base }

// Error is a refusal of the admin API: the HTTP status and the error body
// (ErrorBody) the gateway sent, or the start of the body when it was not
// one. It unwraps to an *llmflow.Error of the matching code, so
// llmflow.ErrorCode(err) is llmflow.ENOTFOUND for a 404, and so on.
type Error struct {
	Status  int    // HTTP status
	Type    string // OpenAI error type, such as invalid_request_error
	Code    string // error code, such as not_found
	Param   string // the offending request field, when the gateway named one
	Message string
}

// Error is "404 Not Found: no key "x"".
func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// codes are the gateway's error codes (OpenAI's code field) and the
// llmflow error codes they come from.
var codes = map[string]string{
	"invalid_request":     llmflow.EINVALID,
	"invalid_api_key":     llmflow.EUNAUTHORIZED,
	"forbidden":           llmflow.EFORBIDDEN,
	"not_found":           llmflow.ENOTFOUND,
	"conflict":            llmflow.ECONFLICT,
	"request_too_large":   llmflow.ETOOLARGE,
	"rate_limit_exceeded": llmflow.ERATELIMIT,
	"service_unavailable": llmflow.EUNAVAILABLE,
	"upstream_error":      llmflow.EUPSTREAM,
	"upstream_timeout":    llmflow.ETIMEOUT,
	"internal_error":      llmflow.EINTERNAL,
}

// Unwrap is the refusal as an *llmflow.Error (code, message, param); a
// code the gateway does not use is EINTERNAL.
func (e *Error) Unwrap() error {
	code, ok := codes[e.Code]
	if !ok {
		code = llmflow.EINTERNAL
	}
	return &llmflow.Error{Code: code, Message: e.Message, Param: e.Param}
}

// errorOf decodes a refusal.
func errorOf(status int, body []byte) *Error {
	e := &Error{Status: status}
	var eb ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Message != "" {
		e.Type, e.Code, e.Message = eb.Error.Type, eb.Error.Code, eb.Error.Message
		if eb.Error.Param != nil {
			e.Param = *eb.Error.Param
		}
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	e.Message = msg
	return e
}

// do sends method path?query (with in as the JSON body when it is not
// nil) and decodes a JSON answer into out (when not nil). An answer of
// status 300 or more is an *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("gateway url: %w", err)
	}
	req.Header.Set("Authorization", *c.auth)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode >= 300 {
		return errorOf(resp.StatusCode, b)
	}
	switch out := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*out = b
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("admin API answer: %w", err)
	}
	return nil
}

// list GETs a listing.
func list[T any](ctx context.Context, c *Client, path string, query url.Values) ([]T, error) {
	var out List[T]
	err := c.do(ctx, http.MethodGet, path, query, nil, &out)
	return out.Data, err
}

// call sends in and decodes the answer as a T.
func call[T any](ctx context.Context, c *Client, method, path string, query url.Values, in any) (T, error) {
	var out T
	err := c.do(ctx, method, path, query, in, &out)
	return out, err
}

func seg(s string) string { return url.PathEscape(s) }

// segs escapes each '/'-separated part of a name for a {name...} path (an
// alias may hold slashes, as model names do).
func segs(s string) string {
	parts := strings.Split(s, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func query(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	return q
}

// Whoami is GET /admin/whoami.
func (c *Client) Whoami(ctx context.Context) (Whoami, error) {
	return call[Whoami](ctx, c, http.MethodGet, "/admin/whoami", nil, nil)
}

// Users is GET /admin/users: the users the caller may see.
func (c *Client) Users(ctx context.Context) ([]User, error) {
	return list[User](ctx, c, "/admin/users", nil)
}

// CreateUser is POST /admin/users.
func (c *Client) CreateUser(ctx context.Context, r UserRequest) (User, error) {
	return call[User](ctx, c, http.MethodPost, "/admin/users", nil, r)
}

// DisableUser is DELETE /admin/users/{name}: the user is disabled and
// their tokens revoked.
func (c *Client) DisableUser(ctx context.Context, name string) (User, error) {
	return call[User](ctx, c, http.MethodDelete, "/admin/users/"+seg(name), nil, nil)
}

// Tokens is GET /admin/users/{name}/tokens.
func (c *Client) Tokens(ctx context.Context, user string) ([]Token, error) {
	return list[Token](ctx, c, "/admin/users/"+seg(user)+"/tokens", nil)
}

// CreateToken is POST /admin/users/{name}/tokens: the answer holds the
// secret, once.
func (c *Client) CreateToken(ctx context.Context, user string, r TokenRequest) (Token, error) {
	return call[Token](ctx, c, http.MethodPost, "/admin/users/"+seg(user)+"/tokens", nil, r)
}

// RevokeToken is DELETE /admin/users/{name}/tokens/{id}.
func (c *Client) RevokeToken(ctx context.Context, user, id string) (Token, error) {
	return call[Token](ctx, c, http.MethodDelete, "/admin/users/"+seg(user)+"/tokens/"+seg(id), nil, nil)
}

// Roles is GET /admin/users/{name}/roles: the user's roles the caller may
// see.
func (c *Client) Roles(ctx context.Context, user string) ([]Grant, error) {
	return list[Grant](ctx, c, "/admin/users/"+seg(user)+"/roles", nil)
}

// GrantRole is PUT /admin/users/{name}/roles; the answer is the user's
// roles after it.
func (c *Client) GrantRole(ctx context.Context, user string, r RoleRequest) ([]Grant, error) {
	out, err := call[List[Grant]](ctx, c, http.MethodPut, "/admin/users/"+seg(user)+"/roles", nil, r)
	return out.Data, err
}

// RevokeRole is DELETE /admin/users/{name}/roles?role=&org=&team=; the
// answer is the user's roles after it.
func (c *Client) RevokeRole(ctx context.Context, user string, r RoleRequest) ([]Grant, error) {
	out, err := call[List[Grant]](ctx, c, http.MethodDelete, "/admin/users/"+seg(user)+"/roles",
		query("role", r.Role, "org", r.Org, "team", r.Team), nil)
	return out.Data, err
}

// Orgs is GET /admin/orgs: the organisations the caller holds a role in.
func (c *Client) Orgs(ctx context.Context) ([]Account, error) {
	return list[Account](ctx, c, "/admin/orgs", nil)
}

// CreateOrg is POST /admin/orgs.
func (c *Client) CreateOrg(ctx context.Context, r OrgRequest) (Account, error) {
	return call[Account](ctx, c, http.MethodPost, "/admin/orgs", nil, r)
}

// Teams is GET /admin/teams?org=: the teams the caller may see, of one
// organisation when org is not "".
func (c *Client) Teams(ctx context.Context, org string) ([]Account, error) {
	return list[Account](ctx, c, "/admin/teams", query("org", org))
}

// CreateTeam is POST /admin/teams.
func (c *Client) CreateTeam(ctx context.Context, r TeamRequest) (Account, error) {
	return call[Account](ctx, c, http.MethodPost, "/admin/teams", nil, r)
}

// Projects is GET /admin/teams/{team}/projects: every project under the
// team, at any depth.
func (c *Client) Projects(ctx context.Context, team string) ([]Account, error) {
	return list[Account](ctx, c, "/admin/teams/"+seg(team)+"/projects", nil)
}

// CreateProject is POST /admin/teams/{team}/projects.
func (c *Client) CreateProject(ctx context.Context, team string, r ProjectRequest) (Account, error) {
	return call[Account](ctx, c, http.MethodPost, "/admin/teams/"+seg(team)+"/projects", nil, r)
}

// AccountRef names an organisation (Org), a team (Team) or a project
// (Project under Team) for the routes that disable, enable or set the
// share of one.
type AccountRef struct {
	Kind llmflow.Kind
	Team string // a project's team
	Name string
}

// path is the account's route: /admin/orgs/{name}, /admin/teams/{name}
// or /admin/teams/{team}/projects/{name}.
func (a AccountRef) path() string {
	switch a.Kind {
	case llmflow.KindOrg:
		return "/admin/orgs/" + seg(a.Name)
	case llmflow.KindTeam:
		return "/admin/teams/" + seg(a.Name)
	}
	return "/admin/teams/" + seg(a.Team) + "/projects/" + seg(a.Name)
}

// Org names an organisation.
func Org(name string) AccountRef { return AccountRef{Kind: llmflow.KindOrg, Name: name} }

// Team names a team.
func Team(name string) AccountRef { return AccountRef{Kind: llmflow.KindTeam, Name: name} }

// Project names a project of a team.
func Project(team, name string) AccountRef {
	return AccountRef{Kind: llmflow.KindProject, Team: team, Name: name}
}

// DisableAccount is DELETE /admin/orgs/{name} (and the teams' and
// projects'): the account, its subtree and its keys are disabled, the keys
// revoked.
func (c *Client) DisableAccount(ctx context.Context, a AccountRef) (AccountDisabled, error) {
	return call[AccountDisabled](ctx, c, http.MethodDelete, a.path(), nil, nil)
}

// EnableAccount is POST /admin/orgs/{name}/enable (and the teams' and
// projects').
func (c *Client) EnableAccount(ctx context.Context, a AccountRef) (AccountEnabled, error) {
	return call[AccountEnabled](ctx, c, http.MethodPost, a.path()+"/enable", nil, nil)
}

// SetShare is PUT /admin/orgs/{name}/share (and the teams' and
// projects'): the share of an account created through the API.
func (c *Client) SetShare(ctx context.Context, a AccountRef, share float64) (Account, error) {
	return call[Account](ctx, c, http.MethodPut, a.path()+"/share", nil, ShareRequest{Share: &share})
}

// TeamModels is GET /admin/teams/{team}/models.
func (c *Client) TeamModels(ctx context.Context, team string) (TeamModels, error) {
	return call[TeamModels](ctx, c, http.MethodGet, "/admin/teams/"+seg(team)+"/models", nil, nil)
}

// SetTeamModels is PUT /admin/teams/{team}/models: no model is every
// model.
func (c *Client) SetTeamModels(ctx context.Context, team string, models []string) (TeamModels, error) {
	if models == nil {
		models = []string{}
	}
	return call[TeamModels](ctx, c, http.MethodPut, "/admin/teams/"+seg(team)+"/models", nil, TeamModels{Models: models})
}

// Keys is GET /admin/keys: the keys the caller may see.
func (c *Client) Keys(ctx context.Context, q KeyQuery) ([]Key, error) {
	v := query("org", q.Org, "team", q.Team)
	if q.IncludeRevoked {
		v.Set("include_revoked", "true")
	}
	return list[Key](ctx, c, "/admin/keys", v)
}

// CreateKey is POST /admin/keys: the answer holds the secret, once.
func (c *Client) CreateKey(ctx context.Context, r KeyRequest) (Key, error) {
	return call[Key](ctx, c, http.MethodPost, "/admin/keys", nil, r)
}

// Key is GET /admin/keys/{id}: one key, never its secret.
func (c *Client) Key(ctx context.Context, id string) (Key, error) {
	return call[Key](ctx, c, http.MethodGet, "/admin/keys/"+seg(id), nil, nil)
}

// RotateKey is POST /admin/keys/{id}/rotate: the key's new secret (in
// Key.Key, shown once); the previous one works for r.Grace more.
func (c *Client) RotateKey(ctx context.Context, id string, r RotateRequest) (Key, error) {
	return call[Key](ctx, c, http.MethodPost, "/admin/keys/"+seg(id)+"/rotate", nil, r)
}

// Self is GET /admin/self: the caller and the budgets they draw on.
func (c *Client) Self(ctx context.Context) (Self, error) {
	return call[Self](ctx, c, http.MethodGet, "/admin/self", nil, nil)
}

// RevokeKey is DELETE /admin/keys/{id}.
func (c *Client) RevokeKey(ctx context.Context, id string) (Key, error) {
	return call[Key](ctx, c, http.MethodDelete, "/admin/keys/"+seg(id), nil, nil)
}

// SetKeyLimits is PUT /admin/keys/{id}/limits.
func (c *Client) SetKeyLimits(ctx context.Context, id string, l Limits) (Key, error) {
	return call[Key](ctx, c, http.MethodPut, "/admin/keys/"+seg(id)+"/limits", nil, l)
}

// SetKeyActive is PUT /admin/keys/{id}/active: false deactivates the key
// (at once, on every replica), true reactivates it.
func (c *Client) SetKeyActive(ctx context.Context, id string, active bool) (Key, error) {
	return call[Key](ctx, c, http.MethodPut, "/admin/keys/"+seg(id)+"/active", nil, ActiveRequest{Active: &active})
}

// Budgets is GET /admin/budgets: the budgets in force the caller may
// read, with their live figures.
func (c *Client) Budgets(ctx context.Context, q BudgetScope) ([]Budget, error) {
	return list[Budget](ctx, c, "/admin/budgets", query("kind", q.Kind, "name", q.Name, "model", q.Model))
}

// BudgetsJSON is Budgets as the gateway's JSON value, unchanged (without
// the newline that ends the body).
func (c *Client) BudgetsJSON(ctx context.Context, q BudgetScope) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, "/admin/budgets", query("kind", q.Kind, "name", q.Name, "model", q.Model), nil, &raw)
	return raw, err
}

// SetBudget is PUT /admin/budgets: the budget in force after it.
func (c *Client) SetBudget(ctx context.Context, r BudgetRequest) (Budget, error) {
	return call[Budget](ctx, c, http.MethodPut, "/admin/budgets", nil, r)
}

// DeleteBudget is DELETE /admin/budgets?kind=&name=&model=.
func (c *Client) DeleteBudget(ctx context.Context, s BudgetScope) (BudgetDeleted, error) {
	return call[BudgetDeleted](ctx, c, http.MethodDelete, "/admin/budgets", query("kind", s.Kind, "name", s.Name, "model", s.Model), nil)
}

// IncreaseBudget is POST /admin/budgets/increase: the budget in force
// after it.
func (c *Client) IncreaseBudget(ctx context.Context, r Increase) (Budget, error) {
	return call[Budget](ctx, c, http.MethodPost, "/admin/budgets/increase", nil, r)
}

// Upstreams is GET /admin/upstreams: every model's upstreams, configured
// and runtime, with their live state.
func (c *Client) Upstreams(ctx context.Context) ([]Upstream, error) {
	return list[Upstream](ctx, c, "/admin/upstreams", nil)
}

// ModelUpstreams is GET /admin/models/{model}/upstreams (404 for a model
// that is not configured).
func (c *Client) ModelUpstreams(ctx context.Context, model string) ([]Upstream, error) {
	return list[Upstream](ctx, c, "/admin/models/"+seg(model)+"/upstreams", nil)
}

// AddUpstream is POST /admin/models/{model}/upstreams: a new runtime
// upstream (409 when the name exists).
func (c *Client) AddUpstream(ctx context.Context, model string, r UpstreamRequest) (Upstream, error) {
	return call[Upstream](ctx, c, http.MethodPost, "/admin/models/"+seg(model)+"/upstreams", nil, r)
}

// PutUpstream is PUT /admin/models/{model}/upstreams/{name}: add or
// replace a runtime upstream (r.Name may be left out).
func (c *Client) PutUpstream(ctx context.Context, model, name string, r UpstreamRequest) (Upstream, error) {
	return call[Upstream](ctx, c, http.MethodPut, "/admin/models/"+seg(model)+"/upstreams/"+seg(name), nil, r)
}

// RemoveUpstream is DELETE /admin/models/{model}/upstreams/{name}.
func (c *Client) RemoveUpstream(ctx context.Context, model, name string) (Upstream, error) {
	return call[Upstream](ctx, c, http.MethodDelete, "/admin/models/"+seg(model)+"/upstreams/"+seg(name), nil, nil)
}

// Aliases is GET /admin/aliases.
func (c *Client) Aliases(ctx context.Context) ([]Alias, error) {
	return list[Alias](ctx, c, "/admin/aliases", nil)
}

// SetAlias is PUT /admin/aliases/{name...}: create an alias of a
// configured model, or switch it.
func (c *Client) SetAlias(ctx context.Context, name, model string) (Alias, error) {
	return call[Alias](ctx, c, http.MethodPut, "/admin/aliases/"+segs(name), nil, AliasRequest{Model: model})
}

// RemoveAlias is DELETE /admin/aliases/{name...}.
func (c *Client) RemoveAlias(ctx context.Context, name string) (Alias, error) {
	return call[Alias](ctx, c, http.MethodDelete, "/admin/aliases/"+segs(name), nil, nil)
}

// Audit is GET /admin/audit: the admin writes the caller may see, newest
// first.
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	v := query("actor", q.Actor)
	if !q.From.IsZero() {
		v.Set("from", q.From.Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.Format(time.RFC3339Nano))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return list[AuditEntry](ctx, c, "/admin/audit", v)
}

// Fairshare is GET /admin/fairshare: the live fair-share state of every
// pool (the caller's organisations only, for readers of some).
func (c *Client) Fairshare(ctx context.Context) (FairshareReport, error) {
	return call[FairshareReport](ctx, c, http.MethodGet, "/admin/fairshare", nil, nil)
}

// SyncRuns is GET /admin/sync?limit=: the Slurm import runs, newest first
// (limit 0: the server's 50).
func (c *Client) SyncRuns(ctx context.Context, limit int) ([]SyncRun, error) {
	var v url.Values
	if limit != 0 {
		v = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	return list[SyncRun](ctx, c, "/admin/sync", v)
}

func (q SpendQuery) values() url.Values {
	v := query("from", q.From, "to", q.To, "format", q.Format)
	if len(q.GroupBy) > 0 {
		v.Set("group_by", strings.Join(q.GroupBy, ","))
	}
	return v
}

// Spend is GET /admin/spend in JSON (q.Format is ignored).
func (c *Client) Spend(ctx context.Context, q SpendQuery) (SpendReport, error) {
	q.Format = "json"
	return call[SpendReport](ctx, c, http.MethodGet, "/admin/spend", q.values(), nil)
}

// SpendText is GET /admin/spend in q.Format (csv or parsable2; json
// too), the body as the gateway sent it.
func (c *Client) SpendText(ctx context.Context, q SpendQuery) ([]byte, error) {
	var b []byte
	err := c.do(ctx, http.MethodGet, "/admin/spend", q.values(), nil, &b)
	return b, err
}

// UsageCSV is GET /admin/usage.csv?from=&to=: the v0.1 export, per team
// and pool.
func (c *Client) UsageCSV(ctx context.Context, from, to string) ([]byte, error) {
	var b []byte
	err := c.do(ctx, http.MethodGet, "/admin/usage.csv", query("from", from, "to", to), nil, &b)
	return b, err
}
