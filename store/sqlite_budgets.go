package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
)

// PutBudget creates or replaces the budget on b's scope. Increases on the
// scope are kept. EINVALID (naming the field) when b is invalid.
func (s *SQLite) PutBudget(ctx context.Context, b budgets.Budget) error {
	if err := b.Validate(); err != nil {
		return validationError(err)
	}
	_, err := s.write.ExecContext(ctx, `INSERT INTO budgets (`+budgetColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (kind, name, model) DO UPDATE SET period = excluded.period, max_cost = excluded.max_cost,
	soft_limit = excluded.soft_limit, updated_at = excluded.updated_at`,
		string(b.Kind), b.Name, b.Model, string(b.Period), b.MaxCost, b.SoftLimit, toMicros(b.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put budget: %w", err)
	}
	return nil
}

// DeleteBudget deletes the budget on sc, or returns llmflow.ErrNotFound.
func (s *SQLite) DeleteBudget(ctx context.Context, sc budgets.Scope) error {
	res, err := s.write.ExecContext(ctx, `DELETE FROM budgets WHERE kind = ? AND name = ? AND model = ?`, string(sc.Kind), sc.Name, sc.Model)
	if err != nil {
		return fmt.Errorf("delete budget: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete budget: %w", err)
	} else if n == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

// ListBudgets returns every budget ordered by kind, name, model.
func (s *SQLite) ListBudgets(ctx context.Context) ([]budgets.Budget, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+budgetColumns+` FROM budgets ORDER BY kind, name, model`)
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (budgets.Budget, error) {
		var (
			b            budgets.Budget
			kind, period string
			updated      int64
		)
		err := rows.Scan(&kind, &b.Name, &b.Model, &period, &b.MaxCost, &b.SoftLimit, &updated)
		b.Kind, b.Period, b.UpdatedAt, b.Source = budgets.Kind(kind), budgets.Period(period), fromMicros(updated), budgets.SourceAdmin
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	return out, nil
}

// AddIncrease stores a temporary increase and returns it with its ID. It
// is checked against in.CreatedAt (EINVALID naming the field).
func (s *SQLite) AddIncrease(ctx context.Context, in budgets.Increase) (budgets.Increase, error) {
	if err := in.Validate(in.CreatedAt); err != nil {
		return budgets.Increase{}, validationError(err)
	}
	err := s.write.QueryRowContext(ctx, `INSERT INTO budget_increases (kind, name, model, amount, expires_at, created_at)
VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		string(in.Scope.Kind), in.Scope.Name, in.Scope.Model, in.Amount, toMicros(in.ExpiresAt), toMicros(in.CreatedAt)).Scan(&in.ID)
	if err != nil {
		return budgets.Increase{}, fmt.Errorf("add increase: %w", err)
	}
	in.ExpiresAt, in.CreatedAt = pgTime(in.ExpiresAt), pgTime(in.CreatedAt)
	return in, nil
}

// Increases returns the increases that have not expired at now, ordered
// by ID.
func (s *SQLite) Increases(ctx context.Context, now time.Time) ([]budgets.Increase, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+increaseColumns+` FROM budget_increases WHERE expires_at > ? ORDER BY id`, toMicros(now))
	if err != nil {
		return nil, fmt.Errorf("list increases: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (budgets.Increase, error) {
		var (
			in               budgets.Increase
			kind             string
			expires, created int64
		)
		err := rows.Scan(&in.ID, &kind, &in.Scope.Name, &in.Scope.Model, &in.Amount, &expires, &created)
		in.Scope.Kind, in.ExpiresAt, in.CreatedAt = budgets.Kind(kind), fromMicros(expires), fromMicros(created)
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("list increases: %w", err)
	}
	return out, nil
}

// BudgetSpend returns the stored GPU-hours of sc from from on: per hour
// from recent on, as one sum before (budgets.StoredSpend).
func (s *SQLite) BudgetSpend(ctx context.Context, sc budgets.Scope, from, recent time.Time) (budgets.StoredSpend, error) {
	st := budgets.StoredSpend{Hours: map[time.Time]float64{}}
	if err := badScope(sc); err != nil {
		return st, err
	}
	q, args := sqliteDialect.budgetSpendQuery(sc, from)
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return st, fmt.Errorf("budget spend: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			hour int64
			gh   float64
		)
		if err := rows.Scan(&hour, &gh); err != nil {
			return st, fmt.Errorf("budget spend: %w", err)
		}
		addSpend(&st, fromMicros(hour), gh, recent)
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("budget spend: %w", err)
	}
	return st, nil
}

// SetKeyLimits sets a key's rpm, tpm and max_inflight (0 = unlimited).
// llmflow.ErrNotFound for an unknown ID; EINVALID for a negative limit.
func (s *SQLite) SetKeyLimits(ctx context.Context, id string, rpm, tpm, maxInFlight int) error {
	if err := (llmflow.Key{RPM: rpm, TPM: tpm, MaxInFlight: maxInFlight}).Validate(); err != nil {
		return err
	}
	res, err := s.write.ExecContext(ctx, `UPDATE keys SET rpm = ?, tpm = ?, max_inflight = ? WHERE id = ?`, rpm, tpm, maxInFlight, id)
	return affectedOne(res, err, "set key limits")
}

// SetKeyDisabled deactivates (true) or reactivates (false) a key.
// llmflow.ErrNotFound for an unknown ID. A revoked key stays revoked.
func (s *SQLite) SetKeyDisabled(ctx context.Context, id string, disabled bool) error {
	res, err := s.write.ExecContext(ctx, `UPDATE keys SET disabled = ? WHERE id = ?`, disabled, id)
	return affectedOne(res, err, "set key disabled")
}

func affectedOne(res sql.Result, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return llmflow.ErrNotFound
	}
	return nil
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
