package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
)

// PutBudget creates or replaces the budget on b's scope. Increases on the
// scope are kept. EINVALID (naming the field) when b is invalid.
func (s *Postgres) PutBudget(ctx context.Context, b budgets.Budget) error {
	if err := b.Validate(); err != nil {
		return validationError(err)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO budgets (`+budgetColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (kind, name, model) DO UPDATE SET period = EXCLUDED.period, max_cost = EXCLUDED.max_cost,
	soft_limit = EXCLUDED.soft_limit, updated_at = EXCLUDED.updated_at`,
		string(b.Kind), b.Name, b.Model, string(b.Period), b.MaxCost, b.SoftLimit, pgTime(b.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put budget: %w", err)
	}
	return nil
}

// DeleteBudget deletes the budget on sc, or returns llmflow.ErrNotFound.
func (s *Postgres) DeleteBudget(ctx context.Context, sc budgets.Scope) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM budgets WHERE kind = $1 AND name = $2 AND model = $3`, string(sc.Kind), sc.Name, sc.Model)
	if err != nil {
		return fmt.Errorf("delete budget: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

// ListBudgets returns every budget ordered by kind, name, model.
func (s *Postgres) ListBudgets(ctx context.Context) ([]budgets.Budget, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+budgetColumns+` FROM budgets ORDER BY kind, name, model`)
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (budgets.Budget, error) {
		var (
			b            budgets.Budget
			kind, period string
			updated      time.Time
		)
		err := row.Scan(&kind, &b.Name, &b.Model, &period, &b.MaxCost, &b.SoftLimit, &updated)
		b.Kind, b.Period, b.UpdatedAt, b.Source = budgets.Kind(kind), budgets.Period(period), updated.UTC(), budgets.SourceAdmin
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// AddIncrease stores a temporary increase and returns it with its ID. It
// is checked against in.CreatedAt (EINVALID naming the field).
func (s *Postgres) AddIncrease(ctx context.Context, in budgets.Increase) (budgets.Increase, error) {
	if err := in.Validate(in.CreatedAt); err != nil {
		return budgets.Increase{}, validationError(err)
	}
	err := s.pool.QueryRow(ctx, `INSERT INTO budget_increases (kind, name, model, amount, expires_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		string(in.Scope.Kind), in.Scope.Name, in.Scope.Model, in.Amount, pgTime(in.ExpiresAt), pgTime(in.CreatedAt)).Scan(&in.ID)
	if err != nil {
		return budgets.Increase{}, fmt.Errorf("add increase: %w", err)
	}
	in.ExpiresAt, in.CreatedAt = pgTime(in.ExpiresAt), pgTime(in.CreatedAt)
	return in, nil
}

// Increases returns the increases that have not expired at now, ordered
// by ID.
func (s *Postgres) Increases(ctx context.Context, now time.Time) ([]budgets.Increase, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+increaseColumns+` FROM budget_increases WHERE expires_at > $1 ORDER BY id`, pgTime(now))
	if err != nil {
		return nil, fmt.Errorf("list increases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (budgets.Increase, error) {
		var (
			in               budgets.Increase
			kind             string
			expires, created time.Time
		)
		err := row.Scan(&in.ID, &kind, &in.Scope.Name, &in.Scope.Model, &in.Amount, &expires, &created)
		in.Scope.Kind, in.ExpiresAt, in.CreatedAt = budgets.Kind(kind), expires.UTC(), created.UTC()
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("list increases: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// BudgetSpend returns the stored GPU-hours of sc from from on: per hour
// from recent on, as one sum before (budgets.StoredSpend).
func (s *Postgres) BudgetSpend(ctx context.Context, sc budgets.Scope, from, recent time.Time) (budgets.StoredSpend, error) {
	st := budgets.StoredSpend{Hours: map[time.Time]float64{}}
	if err := badScope(sc); err != nil {
		return st, err
	}
	q, args := postgresDialect.budgetSpendQuery(sc, from)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return st, fmt.Errorf("budget spend: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			hour time.Time
			gh   float64
		)
		if err := rows.Scan(&hour, &gh); err != nil {
			return st, fmt.Errorf("budget spend: %w", err)
		}
		addSpend(&st, hour, gh, recent)
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("budget spend: %w", err)
	}
	return st, nil
}

// SetKeyLimits sets a key's rpm, tpm and max_inflight (0 = unlimited).
// llmflow.ErrNotFound for an unknown ID; EINVALID for a negative limit.
func (s *Postgres) SetKeyLimits(ctx context.Context, id string, rpm, tpm, maxInFlight int) error {
	if err := (llmflow.Key{RPM: rpm, TPM: tpm, MaxInFlight: maxInFlight}).Validate(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE keys SET rpm = $1, tpm = $2, max_inflight = $3 WHERE id = $4`, rpm, tpm, maxInFlight, id)
	if err != nil {
		return fmt.Errorf("set key limits: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

// SetKeyDisabled deactivates (true) or reactivates (false) a key.
// llmflow.ErrNotFound for an unknown ID. A revoked key stays revoked.
func (s *Postgres) SetKeyDisabled(ctx context.Context, id string, disabled bool) error {
	tag, err := s.pool.Exec(ctx, `UPDATE keys SET disabled = $1 WHERE id = $2`, disabled, id)
	if err != nil {
		return fmt.Errorf("set key disabled: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}
