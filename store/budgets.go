package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
)

// budgetColumns are the columns of budgets in the order ListBudgets reads
// them.
const budgetColumns = `kind, name, model, period, max_cost, soft_limit, updated_at`

// increaseColumns likewise for budget_increases.
const increaseColumns = `id, kind, name, model, amount, expires_at, created_at`

// spendColumn is the rollup column a budget of kind k selects on.
var spendColumn = map[budgets.Kind]string{
	budgets.KindOrg:     "org",
	budgets.KindTeam:    "team",
	budgets.KindProject: "project",
	budgets.KindKey:     "key_id",
	budgets.KindTag:     "tag",
}

// PutBudget creates or replaces the budget on b's scope. Increases on the
// scope are kept. EINVALID (naming the field) when b is invalid.
func (a *sqlDB) PutBudget(ctx context.Context, b budgets.Budget) error {
	if err := b.Validate(); err != nil {
		return validationError(err)
	}
	_, err := a.write.exec(ctx, `INSERT INTO budgets (`+budgetColumns+`) VALUES (`+params(7)+`)
ON CONFLICT (kind, name, model) DO UPDATE SET period = excluded.period, max_cost = excluded.max_cost,
	soft_limit = excluded.soft_limit, updated_at = excluded.updated_at`,
		string(b.Kind), b.Name, b.Model, string(b.Period), b.MaxCost, b.SoftLimit, a.time(b.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put budget: %w", err)
	}
	return nil
}

// DeleteBudget deletes the budget on sc, or returns llmflow.ErrNotFound.
func (a *sqlDB) DeleteBudget(ctx context.Context, sc budgets.Scope) error {
	return execOne(ctx, a.write, "delete budget", `DELETE FROM budgets WHERE kind = ? AND name = ? AND model = ?`, string(sc.Kind), sc.Name, sc.Model)
}

// ListBudgets returns every budget ordered by kind, name, model.
func (a *sqlDB) ListBudgets(ctx context.Context) ([]budgets.Budget, error) {
	return all(ctx, a.read, "list budgets", `SELECT `+budgetColumns+` FROM budgets ORDER BY kind, name, model`, nil,
		func(rows dbRows) (budgets.Budget, error) {
			var (
				b            budgets.Budget
				kind, period string
			)
			err := rows.Scan(&kind, &b.Name, &b.Model, &period, &b.MaxCost, &b.SoftLimit, dbTime{&b.UpdatedAt})
			b.Kind, b.Period, b.Source = budgets.Kind(kind), budgets.Period(period), budgets.SourceAdmin
			return b, err
		})
}

// AddIncrease stores a temporary increase and returns it with its ID. It
// is checked against in.CreatedAt (EINVALID naming the field).
func (a *sqlDB) AddIncrease(ctx context.Context, in budgets.Increase) (budgets.Increase, error) {
	if err := in.Validate(in.CreatedAt); err != nil {
		return budgets.Increase{}, validationError(err)
	}
	err := queryOne(ctx, a.write, "add increase", `INSERT INTO budget_increases (kind, name, model, amount, expires_at, created_at)
VALUES (`+params(6)+`) RETURNING id`,
		[]any{string(in.Scope.Kind), in.Scope.Name, in.Scope.Model, in.Amount, a.time(in.ExpiresAt), a.time(in.CreatedAt)}, &in.ID)
	if err != nil {
		return budgets.Increase{}, err
	}
	in.ExpiresAt, in.CreatedAt = pgTime(in.ExpiresAt), pgTime(in.CreatedAt)
	return in, nil
}

// Increases returns the increases that have not expired at now, ordered
// by ID.
func (a *sqlDB) Increases(ctx context.Context, now time.Time) ([]budgets.Increase, error) {
	return all(ctx, a.read, "list increases", `SELECT `+increaseColumns+` FROM budget_increases WHERE expires_at > ? ORDER BY id`, []any{a.time(now)},
		func(rows dbRows) (budgets.Increase, error) {
			var (
				in   budgets.Increase
				kind string
			)
			err := rows.Scan(&in.ID, &kind, &in.Scope.Name, &in.Scope.Model, &in.Amount, dbTime{&in.ExpiresAt}, dbTime{&in.CreatedAt})
			in.Scope.Kind = budgets.Kind(kind)
			return in, err
		})
}

// BudgetSpend returns the stored GPU-hours of sc from from on: per hour
// from recent on, as one sum before (budgets.StoredSpend).
func (a *sqlDB) BudgetSpend(ctx context.Context, sc budgets.Scope, from, recent time.Time) (budgets.StoredSpend, error) {
	st := budgets.StoredSpend{Hours: map[time.Time]float64{}}
	if err := sc.Validate(); err != nil {
		return st, validationError(err)
	}
	table := "rollups"
	if sc.Kind == budgets.KindTag {
		table = "rollups_by_tag"
	}
	q := `SELECT hour, sum(gpu_hours) FROM ` + table + ` WHERE hour >= ? AND ` + spendColumn[sc.Kind] + ` = ?`
	args := []any{a.bound(from), sc.Name}
	if sc.Kind == budgets.KindUser {
		// the keys the user owns in the account: its project, else its
		// team (a key in a project of the team is the project's)
		account, user, _ := budgets.SplitUserScope(sc.Name)
		q = `SELECT hour, sum(gpu_hours) FROM rollups WHERE hour >= ? AND lower(owner) = ? AND (project = ? OR (project = '' AND team = ?))`
		args = []any{a.bound(from), user, account, account}
	}
	if sc.Model != "" {
		q += ` AND model = ?`
		args = append(args, sc.Model)
	}
	type spend struct {
		hour time.Time
		gh   float64
	}
	hours, err := all(ctx, a.read, "budget spend", q+` GROUP BY hour`, args, func(rows dbRows) (s spend, err error) {
		return s, rows.Scan(dbTime{&s.hour}, &s.gh)
	})
	if err != nil {
		return st, err
	}
	for _, h := range hours {
		if h.hour.Before(recent) {
			st.Older += h.gh
		} else {
			st.Hours[h.hour] += h.gh
		}
	}
	return st, nil
}

// validationError turns a budgets.FieldError into an EINVALID naming the
// field.
func validationError(err error) error {
	var fe *budgets.FieldError
	if errors.As(err, &fe) {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: fe.Message, Param: fe.Field}
	}
	return &llmflow.Error{Code: llmflow.EINVALID, Message: err.Error()}
}
