package adminapi

import (
	"encoding/json"
	"time"
)

// List is the answer of every listing route: {"data":[…],"object":"list"}
// (Data first: the server's field order). Object is always "list".
type List[T any] struct {
	Data   []T    `json:"data"`
	Object string `json:"object"`
}

// NewList returns the listing of data; nil data is encoded as [].
func NewList[T any](data []T) List[T] {
	if data == nil {
		data = []T{}
	}
	return List[T]{Data: data, Object: "list"}
}

// Whoami is GET /admin/whoami: the caller and their roles. Kind is "user"
// for an admin token, "master_key" for the master key.
type Whoami struct {
	Kind  string  `json:"kind"`
	Name  string  `json:"name"`
	Roles []Grant `json:"roles"`
}

// Grant is a role held by a user (a listing's row, GET
// /admin/users/{name}/roles). Org is the team's organisation in the tree
// served now for a team role.
type Grant struct {
	Role string `json:"role"`
	Org  string `json:"org,omitempty"`
	Team string `json:"team,omitempty"`
	// Source is "slurm" for a role the Slurm import granted (it goes
	// when Slurm drops it), omitted for a role granted by hand.
	Source string `json:"source,omitempty"`
}

// String is the grant as the CLI prints it: role, role@org or role@team.
func (g Grant) String() string {
	switch {
	case g.Team != "":
		return g.Role + "@" + g.Team
	case g.Org != "":
		return g.Role + "@" + g.Org
	}
	return g.Role
}

// RoleRequest grants a role (PUT /admin/users/{name}/roles) or names the
// one to remove (DELETE, as query parameters role, org, team): Org for an
// organisation role, Team for a team role (Org, when given with it, must
// be the team's organisation).
type RoleRequest struct {
	Role string `json:"role"`
	Org  string `json:"org,omitempty"`
	Team string `json:"team,omitempty"`
}

// RoleChange is a grant or a removal of one role as the audit trail
// records it (role.grant's after, role.revoke's before).
type RoleChange struct {
	Role Grant  `json:"role"`
	User string `json:"user"`
}

// User is a user as GET /admin/users lists it, with the roles the caller
// may see.
type User struct {
	Name       string     `json:"name"`
	Org        string     `json:"org,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	Roles      []Grant    `json:"roles"`
}

// UserRequest creates a user (POST /admin/users): Org is the organisation
// the user is created under (an org admin's own one when they have only
// one).
type UserRequest struct {
	Name string `json:"name"`
	Org  string `json:"org,omitempty"`
}

// Token is an admin token (llma-…) as listings show it: never the secret
// or its hash. Token holds the secret in the answer to its creation only.
type Token struct {
	ID        string     `json:"id"`
	Token     string     `json:"token,omitempty"`
	User      string     `json:"user"`
	Hint      string     `json:"hint"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// TokenRequest creates an admin token (POST /admin/users/{name}/tokens);
// Name says what it is for.
type TokenRequest struct {
	Name string `json:"name,omitempty"`
}

// Account is an organisation, team or project as listings show it. Org is
// set in team and project listings, Team and Parent in project listings;
// the answers to a creation or a share change carry Parent. Source is
// "config", "slurm" or "admin".
type Account struct {
	Name     string  `json:"name"`
	Org      string  `json:"org,omitempty"`
	Team     string  `json:"team,omitempty"`
	Parent   string  `json:"parent,omitempty"`
	Share    float64 `json:"share"`
	Disabled bool    `json:"disabled"`
	Source   string  `json:"source"`
}

// OrgRequest creates an organisation (POST /admin/orgs). Share is its
// share of the pools among the organisations (absent or 0: none, it only
// borrows).
type OrgRequest struct {
	Name  string   `json:"name"`
	Share *float64 `json:"share"`
}

// TeamRequest creates a team of an organisation (POST /admin/teams), with
// its share among the organisation's teams.
type TeamRequest struct {
	Name  string   `json:"name"`
	Org   string   `json:"org"`
	Share *float64 `json:"share"`
}

// ProjectRequest creates a project directly under a team (POST
// /admin/teams/{team}/projects), with its share among the team's
// projects.
type ProjectRequest struct {
	Name  string   `json:"name"`
	Share *float64 `json:"share"`
}

// ShareRequest sets the share of an account created through the admin
// API: PUT /admin/orgs/{name}/share and the teams' and projects' alike.
type ShareRequest struct {
	Share *float64 `json:"share"`
}

// AccountDisabled answers the disabling of an account (DELETE
// /admin/orgs/{name} and the teams' and projects' alike): the account and
// how many keys under it were revoked.
type AccountDisabled struct {
	Account     Account `json:"account"`
	KeysRevoked int     `json:"keys_revoked"`
}

// AccountEnabled answers POST /admin/orgs/{name}/enable (and the teams'
// and projects'): the keys revoked when it was disabled stay revoked.
type AccountEnabled struct {
	Account                Account `json:"account"`
	KeysRevokedStayRevoked bool    `json:"keys_revoked_stay_revoked"`
}

// TeamModels is GET and PUT /admin/teams/{team}/models: the models a team
// may use; an empty list is every configured model. Team is set in
// answers, and may be left out of a request.
type TeamModels struct {
	Team   string   `json:"team,omitempty"`
	Models []string `json:"models"`
}

// Key is a client key (llmf-…) as listings show it: never the secret,
// never its hash. Key holds the secret in the answer to its creation only.
type Key struct {
	ID          string     `json:"id"`
	Key         string     `json:"key,omitempty"`
	Hint        string     `json:"hint"`
	Name        string     `json:"name"`
	Org         string     `json:"org"`
	Team        string     `json:"team"`
	Project     string     `json:"project,omitempty"`
	Owner       string     `json:"owner,omitempty"`
	Tags        []string   `json:"tags"`
	RPM         int        `json:"rpm"`
	TPM         int        `json:"tpm"`
	MaxInFlight int        `json:"max_inflight"`
	Active      bool       `json:"active"` // false: deactivated or revoked
	Disabled    bool       `json:"disabled,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	// ExpiresAt is when the key stops working (absent: never).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Models are the only models the key may use (absent: every model
	// its team may use).
	Models []string `json:"models,omitempty"`
	// PreviousValidUntil is when the secret before the key's last
	// rotation stops (stopped) working; absent for a key never rotated.
	PreviousValidUntil *time.Time `json:"previous_valid_until,omitempty"`
}

// RotateRequest rotates a key's secret: POST /admin/keys/{id}/rotate.
// Grace is how long the previous secret keeps working (a Go duration,
// "0s" to 720h; absent: 1h).
type RotateRequest struct {
	Grace string `json:"grace,omitempty"`
}

// KeyRequest creates a key (POST /admin/keys). Project, when set, must be
// an account under Team in the tree served now. RPM, TPM and MaxInFlight
// are the key's limits (0 = unlimited): requests per minute and tokens per
// minute on a sliding 60 s window, and requests in flight.
type KeyRequest struct {
	Team        string   `json:"team"`
	Project     string   `json:"project,omitempty"`
	Name        string   `json:"name"`
	Owner       string   `json:"owner,omitempty"`
	RPM         int      `json:"rpm,omitempty"`
	TPM         int      `json:"tpm,omitempty"`
	MaxInFlight int      `json:"max_inflight,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	// ExpiresAt, when set, is when the key stops working (in the
	// future).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Models, when set, are the only models the key may use.
	Models []string `json:"models,omitempty"`
}

// KeyQuery filters GET /admin/keys: an organisation, a team, and revoked
// keys too.
type KeyQuery struct {
	Org            string
	Team           string
	IncludeRevoked bool
}

// Limits sets a key's limits: PUT /admin/keys/{id}/limits. Every field is
// set (0 is unlimited). The audit trail records it before and after.
type Limits struct {
	RPM         int `json:"rpm"`
	TPM         int `json:"tpm"`
	MaxInFlight int `json:"max_inflight"`
}

// ActiveRequest deactivates or reactivates a key: PUT
// /admin/keys/{id}/active (Active is required).
type ActiveRequest struct {
	Active *bool `json:"active"`
}

// Budget is a budget as GET /admin/budgets lists it: its setting and its
// live figures, in GPU-hours. Kind is org, team, project, key or tag;
// Period day, week or month; Source admin, config or slurm.
type Budget struct {
	Kind           string    `json:"kind"`
	Name           string    `json:"name"`
	Model          string    `json:"model"`
	Period         string    `json:"period"`
	MaxCost        float64   `json:"max_cost"`
	SoftLimit      float64   `json:"soft_limit"`
	Source         string    `json:"source"`
	PeriodStart    time.Time `json:"period_start"`
	PeriodEnd      time.Time `json:"period_end"`
	Increase       float64   `json:"increase"`
	EffectiveLimit float64   `json:"effective_limit"`
	Spent          float64   `json:"spent"`
	Held           float64   `json:"held"`
	Remaining      float64   `json:"remaining"`
}

// BudgetScope names a budget: the kind and name of its scope, and a model
// ("" for every model). It filters GET /admin/budgets (empty fields do not
// filter) and names the budget of DELETE /admin/budgets. In the audit
// trail it is a BudgetIncrease's Scope.
type BudgetScope struct {
	Kind  string `json:"Kind"`
	Name  string `json:"Name"`
	Model string `json:"Model"`
}

// BudgetRequest sets a budget: PUT /admin/budgets. MaxCost is required.
type BudgetRequest struct {
	Kind      string   `json:"kind"`
	Name      string   `json:"name"`
	Model     string   `json:"model"`
	Period    string   `json:"period"`
	MaxCost   *float64 `json:"max_cost"`
	SoftLimit float64  `json:"soft_limit"`
}

// Increase raises a budget until ExpiresAt: POST /admin/budgets/increase.
type Increase struct {
	Kind      string    `json:"kind"`
	Name      string    `json:"name"`
	Model     string    `json:"model"`
	Amount    float64   `json:"amount"`
	ExpiresAt time.Time `json:"expires_at"`
}

// BudgetDeleted answers DELETE /admin/budgets.
type BudgetDeleted struct {
	Deleted bool   `json:"deleted"`
	Kind    string `json:"kind"`
	Model   string `json:"model"`
	Name    string `json:"name"`
}

// BudgetSetting is a budget's setting as the audit trail records it:
// budget.set's before and after, budget.delete's before. Unlike the
// routes' bodies its keys are the field names (Kind, MaxCost, …), as the
// trail has always recorded them.
type BudgetSetting struct {
	Kind      string    `json:"Kind"`
	Name      string    `json:"Name"`
	Model     string    `json:"Model"`
	Period    string    `json:"Period"`
	MaxCost   float64   `json:"MaxCost"`
	SoftLimit float64   `json:"SoftLimit"`
	Source    string    `json:"Source"`
	UpdatedAt time.Time `json:"UpdatedAt"`
}

// BudgetIncrease is an increase as the audit trail records it:
// budget.increase's after, keys named like BudgetSetting's.
type BudgetIncrease struct {
	ID        int64       `json:"ID"`
	Scope     BudgetScope `json:"Scope"`
	Amount    float64     `json:"Amount"`
	ExpiresAt time.Time   `json:"ExpiresAt"`
	CreatedAt time.Time   `json:"CreatedAt"`
}

// Upstream is an upstream of a model as GET /admin/upstreams lists it
// and the audit trail records it (without the live state).
type Upstream struct {
	Model   string `json:"model"`
	Name    string `json:"name"`
	BaseURL string `json:"base_url"`
	// InheritKey: a runtime upstream that gets the model's key_file.
	InheritKey bool `json:"inherit_key,omitempty"`
	// KeyName: a runtime upstream's own key, a file of upstream_key_dir
	// (its name; the key itself is never shown).
	KeyName string `json:"key_name,omitempty"`
	// Source is "config" (gateway.hcl, read-only here) or "admin".
	Source    string     `json:"source"`
	Served    bool       `json:"served"`           // in rotation's list (healthy or not)
	Reason    string     `json:"reason,omitempty"` // why a stored row is not served
	Healthy   *bool      `json:"healthy,omitempty"`
	InFlight  *int64     `json:"in_flight,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	By        string     `json:"by,omitempty"`
}

// UpstreamRequest adds (POST /admin/models/{model}/upstreams, Name
// required) or replaces (PUT …/upstreams/{name}, Name empty or the
// path's) a runtime upstream. It takes the model's key_file: no secret
// passes through the API.
type UpstreamRequest struct {
	Name    string `json:"name,omitempty"`
	BaseURL string `json:"base_url"`
	// InheritKey sends the model's key_file to this upstream: an explicit
	// choice (absent: no key is sent), recorded in the audit trail.
	InheritKey bool `json:"inherit_key,omitempty"`
	// KeyName gives the upstream its own engine key: the name of a file in
	// the configuration's upstream_key_dir (a name, never a path).
	KeyName string `json:"key_name,omitempty"`
}

// Alias is a model alias as GET /admin/aliases lists it.
type Alias struct {
	Name      string    `json:"name"`
	Model     string    `json:"model"`
	Served    bool      `json:"served"`
	Reason    string    `json:"reason,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	By        string    `json:"by,omitempty"`
}

// AliasRequest creates an alias or switches it to another model: PUT
// /admin/aliases/{name...}.
type AliasRequest struct {
	Model string `json:"model"`
}

// AuditEntry is an admin write as GET /admin/audit shows it: who, what,
// where in the tree, the object before and after (the views the API
// shows, never a secret), when and from which client network.
type AuditEntry struct {
	ID     int64           `json:"id"`
	Time   time.Time       `json:"time"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Org    string          `json:"org,omitempty"`
	Team   string          `json:"team,omitempty"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
	Remote string          `json:"remote"`
}

// AuditQuery filters GET /admin/audit: entries in [From, To), by Actor
// ("master" for the master key), at most Limit (1 to 10000; 0: the
// server's 100). Zero fields do not filter.
type AuditQuery struct {
	From, To time.Time
	Actor    string
	Limit    int
}

// SyncRun is a Slurm import run as GET /admin/sync lists it.
type SyncRun struct {
	ID            int64     `json:"id"`
	Started       time.Time `json:"started"`
	Finished      time.Time `json:"finished"`
	Source        string    `json:"source"`
	DryRun        bool      `json:"dry_run"`
	Outcome       string    `json:"outcome"`
	Error         string    `json:"error,omitempty"`
	Created       int       `json:"created"`
	SharesChanged int       `json:"shares_changed"`
	Reparented    int       `json:"reparented"`
	Disabled      int       `json:"disabled"`
	Reenabled     int       `json:"reenabled"`
	Members       int       `json:"members"`
	Unchanged     int       `json:"unchanged"`
}

// FairshareReport is GET /admin/fairshare: the live fair-share state of
// every pool, in the terms of sshare -l plus the reservation columns.
// Callers who read only some organisations get their subtrees, without
// the pool's root and with the pool-wide totals at 0.
type FairshareReport struct {
	Pools []PoolShare `json:"pools"`
}

// PoolShare is one pool's state.
type PoolShare struct {
	Pool      string         `json:"pool"`
	Scheduler string         `json:"scheduler"` // priority, gateway or fcfs
	Capacity  int            `json:"capacity"`  // C
	InFlight  int            `json:"in_flight"`
	Borrowing int            `json:"borrowing"` // in flight beyond their organisation's reservation
	Queued    int            `json:"queued"`    // waiting in the gateway-side queue
	Accounts  []AccountShare `json:"accounts"`  // tree order: the pool's root, then depth first
	// Auto is the capacity loop of a pool with capacity = "auto"; nil for
	// a fixed capacity.
	Auto *CapacityAuto `json:"capacity_auto,omitempty"`
}

// CapacityAuto is the state of a pool's capacity loop (capacity = "auto").
type CapacityAuto struct {
	Min      int    `json:"min"`
	Max      int    `json:"max"`
	Leader   bool   `json:"leader"`   // this replica decides C (alone, or holding the Redis lease)
	Decision string `json:"decision"` // the last step: unknown, holding, steady, grow or shrink
}

// AccountShare is one account or user association of a pool's tree
// (sshare's row).
type AccountShare struct {
	Account      string  `json:"account"`             // "root" for the pool itself; a user association's account
	User         string  `json:"user,omitempty"`      // the user of a user association ("" for an account)
	Partition    string  `json:"partition,omitempty"` // a user association's partition
	Depth        int     `json:"depth"`               // 0 root, 1 organisation, 2 team, 3+ project; a user association its account's + 1
	RawShares    float64 `json:"raw_shares"`
	UseParent    bool    `json:"use_parent,omitempty"` // Fairshare=parent: no level of its own
	NormShares   float64 `json:"norm_shares"`
	RawUsage     float64 `json:"raw_usage"` // decayed GPU-hours
	NormUsage    float64 `json:"norm_usage"`
	EffectvUsage float64 `json:"effectv_usage"`
	LevelFS      Value   `json:"level_fs"`   // +Inf ("inf") when never used; NaN (null) when it has no level
	FairShare    Value   `json:"fair_share"` // leaves only (null otherwise)
	Rank         int     `json:"rank"`       // borrower rank 0..9 used in priorities (leaves)
	Reserved     int     `json:"reserved"`
	InFlight     int     `json:"in_flight"`
	Within       int     `json:"within"`    // in flight within its own reservation
	Borrowing    int     `json:"borrowing"` // in flight beyond its organisation's reservation
}

// SpendQuery asks GET /admin/spend for the spend of the hours in
// [From, To) grouped by GroupBy (dimensions such as org, team, project,
// key, owner, model, pool, tag; empty: org,team) in Format (json, csv or
// parsable2; empty: json). From and To are what the server parses (a date
// 2006-01-02 or an RFC 3339 time).
type SpendQuery struct {
	From, To string
	GroupBy  []string
	Format   string
}

// SpendReport is GET /admin/spend in JSON: one row per group.
type SpendReport struct {
	From    time.Time  `json:"from"`
	To      time.Time  `json:"to"`
	GroupBy []string   `json:"group_by"`
	Data    []SpendRow `json:"data"`
}

// SpendRow is one group of a spend report: its dimensions (as GroupBy
// names them) and its totals. In JSON the dimensions and the totals are
// the keys of one object, in key order.
type SpendRow struct {
	Dims              map[string]string
	Requests          int64
	PromptTokens      int64
	CompletionTokens  int64
	CachedTokens      int64
	GPUHours          float64
	EstimatedRequests int64
}

// spendTotals are the keys of a SpendRow that are not dimensions.
var spendTotals = []string{"requests", "prompt_tokens", "completion_tokens", "cached_tokens", "gpu_hours", "estimated_requests"}

// MarshalJSON encodes r as the server does: one object, keys sorted.
func (r SpendRow) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(r.Dims)+len(spendTotals))
	for k, v := range r.Dims {
		m[k] = v
	}
	m["requests"], m["prompt_tokens"], m["completion_tokens"] = r.Requests, r.PromptTokens, r.CompletionTokens
	m["cached_tokens"], m["gpu_hours"], m["estimated_requests"] = r.CachedTokens, r.GPUHours, r.EstimatedRequests
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes: string members are
// dimensions.
func (r *SpendRow) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*r = SpendRow{Dims: map[string]string{}}
	totals := map[string]any{
		"requests": &r.Requests, "prompt_tokens": &r.PromptTokens, "completion_tokens": &r.CompletionTokens,
		"cached_tokens": &r.CachedTokens, "gpu_hours": &r.GPUHours, "estimated_requests": &r.EstimatedRequests,
	}
	for k, v := range m {
		dst, ok := totals[k]
		if !ok {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return err
			}
			r.Dims[k] = s
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return err
		}
	}
	return nil
}

// ErrorBody is every refusal's body, OpenAI's error shape:
// {"error":{"message","type","param","code"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error of an ErrorBody. Type is OpenAI's error type
// (invalid_request_error, authentication_error, permission_error,
// rate_limit_error, server_error), Code the error code (invalid_request,
// not_found, forbidden, conflict, …), Param the offending request field
// (null when none).
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Self is GET /admin/self: the caller, their roles, and the budgets they
// draw on with what is left (a researcher's page in the console). SSO is
// true for a user signed in through the identity provider;
// SelfServiceKeys and MaxKeys are the gateway's self_service block.
type Self struct {
	Kind            string   `json:"kind"`
	Name            string   `json:"name"`
	SSO             bool     `json:"sso"`
	Roles           []Grant  `json:"roles"`
	Budgets         []Budget `json:"budgets"`
	SelfServiceKeys bool     `json:"self_service_keys"`
	MaxKeys         int      `json:"max_keys"`
}
