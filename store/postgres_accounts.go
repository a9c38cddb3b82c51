package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow"
)

// Accounts returns the stored organisation tree in tree order (nil when
// no import ever ran).
func (s *Postgres) Accounts(ctx context.Context) (llmflow.Accounts, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, kind, parent, shares, use_parent, disabled, members, users, source,
grp_gpu_minutes, grp_gpus FROM accounts ORDER BY position`)
	if err != nil {
		return nil, fmt.Errorf("read accounts: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.Account, error) {
		var a llmflow.Account
		var kind int16
		var mins, gpus *int64
		var users string
		if err := rows.Scan(&a.Name, &kind, &a.Parent, &a.Shares, &a.UseParent, &a.Disabled, &a.Members, &users, &a.Source, &mins, &gpus); err != nil {
			return a, err
		}
		if mins != nil {
			a.Limits.Minutes, a.Limits.HasMinutes = *mins, true
		}
		if gpus != nil {
			a.Limits.GPUs, a.Limits.HasGPUs = *gpus, true
		}
		a.Kind = llmflow.Kind(kind)
		a.Members = nilIfEmpty(a.Members)
		if err := json.Unmarshal([]byte(users), &a.Users); err != nil {
			return a, fmt.Errorf("%s users: %w", a.Name, err)
		}
		if len(a.Users) == 0 {
			a.Users = nil
		}
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read accounts: %w", err)
	}
	return out, nil
}

// SaveSync records an import run and, when next is not nil, replaces the
// stored tree with next, in one transaction: either both happen or
// neither. It returns the run's ID. Two gateways importing at once are
// serialised by a lock on the accounts table.
func (s *Postgres) SaveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun) (id int64, err error) {
	return s.saveSync(ctx, next, run, nil)
}

// SaveSyncRoles is SaveSync that also applies the import's changes of
// users and roles (applyRoleChanges), in the same transaction.
func (s *Postgres) SaveSyncRoles(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, changes []llmflow.RoleChange) (int64, error) {
	return s.saveSync(ctx, next, run, func(tx pgx.Tx) error {
		return s.adminDB.applyRoleChanges(ctx, pgQuerier{tx}, changes, run.Finished)
	})
}

// saveSync is SaveSync running also (when not nil) in its transaction.
func (s *Postgres) saveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, also func(tx pgx.Tx) error) (id int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if next != nil {
			if _, err := tx.Exec(ctx, `LOCK TABLE accounts IN EXCLUSIVE MODE`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM accounts`); err != nil {
				return err
			}
			rows := make([][]any, len(next))
			for i, a := range next {
				mins, gpus := limitColumns(a.Limits)
				rows[i] = []any{a.Name, int16(a.Kind), a.Parent, a.Shares, a.UseParent, a.Disabled, nonNil(a.Members), usersJSON(a.Users), a.Source, int32(i), mins, gpus}
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"accounts"},
				[]string{"name", "kind", "parent", "shares", "use_parent", "disabled", "members", "users", "source", "position", "grp_gpu_minutes", "grp_gpus"},
				pgx.CopyFromRows(rows)); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, `INSERT INTO sync_runs
(started, finished, source, dry_run, created, shares_changed, reparented, disabled, reenabled, members, unchanged, outcome, error,
limits_changed)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id`,
			pgTime(run.Started), pgTime(run.Finished), run.Source, run.DryRun, run.Created, run.SharesChanged,
			run.Reparented, run.Disabled, run.Reenabled, run.Members, run.Unchanged, run.Outcome, run.Error, run.LimitsChanged).Scan(&id); err != nil {
			return err
		}
		if also != nil {
			return also(tx)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("save sync: %w", err)
	}
	return id, nil
}

// SyncRuns returns the last limit import runs, newest first.
func (s *Postgres) SyncRuns(ctx context.Context, limit int) ([]llmflow.SyncRun, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, started, finished, source, dry_run, created, shares_changed,
reparented, disabled, reenabled, members, unchanged, outcome, error, limits_changed FROM sync_runs ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read sync runs: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.SyncRun, error) {
		var r llmflow.SyncRun
		if err := rows.Scan(&r.ID, &r.Started, &r.Finished, &r.Source, &r.DryRun, &r.Created, &r.SharesChanged,
			&r.Reparented, &r.Disabled, &r.Reenabled, &r.Members, &r.Unchanged, &r.Outcome, &r.Error, &r.LimitsChanged); err != nil {
			return r, err
		}
		r.Started, r.Finished = r.Started.UTC(), r.Finished.UTC()
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read sync runs: %w", err)
	}
	return out, nil
}

// usersJSON is an account's user associations as stored (a JSON array,
// "[]" for none), in both stores.
func usersJSON(us []llmflow.UserAssoc) string {
	if len(us) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(us) // plain strings, floats and bools: cannot fail
	return string(b)
}
