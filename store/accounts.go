package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/go-llmflow/llmflow"
)

// Accounts returns the stored organisation tree in tree order (nil when
// no import ever ran).
func (a *sqlDB) Accounts(ctx context.Context) (llmflow.Accounts, error) {
	return all(ctx, a.read, "read accounts", `SELECT name, kind, parent, shares, use_parent, disabled, members, users, source,
grp_gpu_minutes, grp_gpus FROM accounts ORDER BY position`, nil, func(rows dbRows) (llmflow.Account, error) {
		var (
			acc        llmflow.Account
			kind       int
			users      string
			mins, gpus sql.NullInt64
		)
		if err := rows.Scan(&acc.Name, &kind, &acc.Parent, &acc.Shares, &acc.UseParent, &acc.Disabled, a.listDest(&acc.Members),
			&users, &acc.Source, &mins, &gpus); err != nil {
			return acc, err
		}
		acc.Limits = llmflow.GPULimits{Minutes: mins.Int64, HasMinutes: mins.Valid, GPUs: gpus.Int64, HasGPUs: gpus.Valid}
		acc.Kind = llmflow.Kind(kind)
		acc.Members = nilIfEmpty(acc.Members)
		if err := json.Unmarshal([]byte(users), &acc.Users); err != nil {
			return acc, fmt.Errorf("%s users: %w", acc.Name, err)
		}
		if len(acc.Users) == 0 {
			acc.Users = nil
		}
		return acc, nil
	})
}

// SaveSync records an import run and, when next is not nil, replaces the
// stored tree with next, in one transaction: either both happen or
// neither. It returns the run's ID. Two gateways importing at once into
// one PostgreSQL database are serialised by a lock on the accounts table.
func (a *sqlDB) SaveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun) (id int64, err error) {
	return a.saveSync(ctx, next, run, nil)
}

// SaveSyncRoles is SaveSync that also applies the import's changes of
// users and roles (applyRoleChanges), in the same transaction.
func (a *sqlDB) SaveSyncRoles(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, changes []llmflow.RoleChange) (int64, error) {
	return a.saveSync(ctx, next, run, func(q querier) error {
		return a.applyRoleChanges(ctx, q, changes, run.Finished)
	})
}

// accountColumns are the columns of accounts saveSync writes.
var accountColumns = []string{"name", "kind", "parent", "shares", "use_parent", "disabled", "members", "users", "source", "position", "grp_gpu_minutes", "grp_gpus"}

// saveSync is SaveSync running also (when not nil) in its transaction.
func (a *sqlDB) saveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, also func(q querier) error) (id int64, err error) {
	err = a.tx(ctx, func(q querier) error {
		if next != nil {
			if a.lockAccounts != "" {
				if _, err := q.exec(ctx, a.lockAccounts); err != nil {
					return err
				}
			}
			if _, err := q.exec(ctx, `DELETE FROM accounts`); err != nil {
				return err
			}
			rows := make([][]any, len(next))
			for i, acc := range next {
				mins, gpus := limitColumns(acc.Limits)
				rows[i] = []any{acc.Name, int16(acc.Kind), acc.Parent, acc.Shares, acc.UseParent, acc.Disabled, a.list(acc.Members),
					usersJSON(acc.Users), acc.Source, int32(i), mins, gpus}
			}
			if err := q.copyFrom(ctx, "accounts", accountColumns, rows); err != nil {
				return err
			}
		}
		if err := queryOne(ctx, q, "sync run", `INSERT INTO sync_runs
(started, finished, source, dry_run, created, shares_changed, reparented, disabled, reenabled, members, unchanged, outcome, error,
limits_changed)
VALUES (`+params(14)+`) RETURNING id`,
			[]any{a.time(run.Started), a.time(run.Finished), run.Source, run.DryRun, run.Created, run.SharesChanged,
				run.Reparented, run.Disabled, run.Reenabled, run.Members, run.Unchanged, run.Outcome, run.Error, run.LimitsChanged}, &id); err != nil {
			return err
		}
		if also != nil {
			return also(q)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("save sync: %w", err)
	}
	return id, nil
}

// SyncRuns returns the last limit import runs, newest first.
func (a *sqlDB) SyncRuns(ctx context.Context, limit int) ([]llmflow.SyncRun, error) {
	return all(ctx, a.read, "read sync runs", `SELECT id, started, finished, source, dry_run, created, shares_changed,
reparented, disabled, reenabled, members, unchanged, outcome, error, limits_changed FROM sync_runs ORDER BY id DESC LIMIT ?`, []any{limit},
		func(rows dbRows) (r llmflow.SyncRun, err error) {
			err = rows.Scan(&r.ID, dbTime{&r.Started}, dbTime{&r.Finished}, &r.Source, &r.DryRun, &r.Created, &r.SharesChanged,
				&r.Reparented, &r.Disabled, &r.Reenabled, &r.Members, &r.Unchanged, &r.Outcome, &r.Error, &r.LimitsChanged)
			return r, err
		})
}

// limitColumns are an account's limits as the nullable columns
// grp_gpu_minutes and grp_gpus (NULL: no limit).
func limitColumns(l llmflow.GPULimits) (mins, gpus any) {
	if l.HasMinutes {
		mins = l.Minutes
	}
	if l.HasGPUs {
		gpus = l.GPUs
	}
	return mins, gpus
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
