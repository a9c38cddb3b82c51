package admin

import (
	"context"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
)

// The store capabilities the admin API uses, each declared here by its
// consumer and passed as an explicit Options field (store.SQLite and
// store.Postgres implement them all; KeyStore and KeyLimitStore are in
// keys.go).

// AdminStore is what the admin API needs of a store for delegated
// administration (store.SQLite and store.Postgres implement it).
type AdminStore interface {
	AdminGeneration(ctx context.Context) (int64, error)
	CreateUser(ctx context.Context, u llmflow.User) error
	User(ctx context.Context, name string) (llmflow.User, error)
	Users(ctx context.Context) ([]llmflow.User, error)
	DisableUser(ctx context.Context, name string, at time.Time) error
	CreateAdminToken(ctx context.Context, t llmflow.AdminToken) error
	AdminTokenByHash(ctx context.Context, hash [32]byte) (llmflow.AdminToken, error)
	AdminTokens(ctx context.Context, user string) ([]llmflow.AdminToken, error)
	RevokeAdminToken(ctx context.Context, user, id string, at time.Time) error
	GrantRole(ctx context.Context, g llmflow.RoleGrant) error
	RevokeRole(ctx context.Context, g llmflow.RoleGrant) error
	Roles(ctx context.Context, user string) ([]llmflow.RoleGrant, error)
	SetTeamModels(ctx context.Context, team string, models []string) error
	TeamModels(ctx context.Context) (map[string][]string, error)
	PutAdminAccount(ctx context.Context, a llmflow.AdminAccount) error
	AdminAccounts(ctx context.Context) ([]llmflow.AdminAccount, error)
	AppendAudit(ctx context.Context, e llmflow.AuditEntry) error
	Audit(ctx context.Context, f llmflow.AuditFilter) ([]llmflow.AuditEntry, error)
}

// RoutingStore keeps the upstreams and aliases registered through the
// admin API (Options.Routing).
type RoutingStore interface {
	PutUpstream(ctx context.Context, u llmflow.RuntimeUpstream) error
	DeleteUpstream(ctx context.Context, model, name string) error
	Upstreams(ctx context.Context) ([]llmflow.RuntimeUpstream, error)
	PutAlias(ctx context.Context, a llmflow.ModelAlias) error
	DeleteAlias(ctx context.Context, name string) error
	Aliases(ctx context.Context) ([]llmflow.ModelAlias, error)
}

// BudgetWriter sets and removes budgets and adds increases
// (Options.Budgets); the gateway reads them back (gateway.BudgetStore) and
// puts them in force (RefreshBudgets).
type BudgetWriter interface {
	PutBudget(ctx context.Context, b budgets.Budget) error
	DeleteBudget(ctx context.Context, sc budgets.Scope) error
	AddIncrease(ctx context.Context, in budgets.Increase) (budgets.Increase, error)
}

// SpendReader reads the accounting rollups (Options.Spend).
type SpendReader interface {
	// Spend returns the accounting rollups of the hours starting in
	// [from, to) that f selects, grouped by f.GroupBy: per tag, a request
	// counting once under each of its tags, when f.NeedsTags. It fails with
	// EINVALID for a dimension it does not know.
	Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
}

// SyncHistory lists the Slurm import runs (Options.SyncHistory).
type SyncHistory interface {
	SyncRuns(ctx context.Context, limit int) ([]llmflow.SyncRun, error)
}
