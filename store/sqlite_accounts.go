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
func (s *SQLite) Accounts(ctx context.Context) (llmflow.Accounts, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT name, kind, parent, shares, use_parent, disabled, members, users, source,
grp_gpu_minutes, grp_gpus FROM accounts ORDER BY position`)
	if err != nil {
		return nil, fmt.Errorf("read accounts: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.Account, error) {
		var a llmflow.Account
		var kind int
		var members, users string
		var mins, gpus sql.NullInt64
		if err := rows.Scan(&a.Name, &kind, &a.Parent, &a.Shares, &a.UseParent, &a.Disabled, &members, &users, &a.Source, &mins, &gpus); err != nil {
			return a, err
		}
		a.Limits = llmflow.GPULimits{Minutes: mins.Int64, HasMinutes: mins.Valid, GPUs: gpus.Int64, HasGPUs: gpus.Valid}
		a.Kind = llmflow.Kind(kind)
		if err := json.Unmarshal([]byte(members), &a.Members); err != nil {
			return a, fmt.Errorf("%s members: %w", a.Name, err)
		}
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
// neither. It returns the run's ID.
func (s *SQLite) SaveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun) (id int64, err error) {
	return s.saveSync(ctx, next, run, nil)
}

// SaveSyncRoles is SaveSync that also applies the import's changes of
// users and roles (applyRoleChanges), in the same transaction.
func (s *SQLite) SaveSyncRoles(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, changes []llmflow.RoleChange) (int64, error) {
	return s.saveSync(ctx, next, run, func(tx *sql.Tx) error {
		return s.adminDB.applyRoleChanges(ctx, sqlQuerier{tx}, changes, run.Finished)
	})
}

// saveSync is SaveSync running also (when not nil) in its transaction.
func (s *SQLite) saveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, also func(tx *sql.Tx) error) (id int64, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("save sync: %w", err)
		}
	}()
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if next != nil {
		if _, err := tx.ExecContext(ctx, `DELETE FROM accounts`); err != nil {
			return 0, err
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO accounts
(name, kind, parent, shares, use_parent, disabled, members, users, source, position, grp_gpu_minutes, grp_gpus)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return 0, err
		}
		defer st.Close()
		for i, a := range next {
			members := a.Members
			if members == nil {
				members = []string{}
			}
			m, _ := json.Marshal(members)
			mins, gpus := limitColumns(a.Limits)
			if _, err := st.ExecContext(ctx, a.Name, int(a.Kind), a.Parent, a.Shares, a.UseParent, a.Disabled, string(m), usersJSON(a.Users), a.Source, i,
				mins, gpus); err != nil {
				return 0, fmt.Errorf("account %s: %w", a.Name, err)
			}
		}
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO sync_runs
(started, finished, source, dry_run, created, shares_changed, reparented, disabled, reenabled, members, unchanged, outcome, error,
limits_changed)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		toMicros(run.Started), toMicros(run.Finished), run.Source, run.DryRun, run.Created, run.SharesChanged,
		run.Reparented, run.Disabled, run.Reenabled, run.Members, run.Unchanged, run.Outcome, run.Error, run.LimitsChanged)
	if err != nil {
		return 0, err
	}
	if id, err = res.LastInsertId(); err != nil {
		return 0, err
	}
	if also != nil {
		if err := also(tx); err != nil {
			return 0, err
		}
	}
	return id, tx.Commit()
}

// SyncRuns returns the last limit import runs, newest first.
func (s *SQLite) SyncRuns(ctx context.Context, limit int) ([]llmflow.SyncRun, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT id, started, finished, source, dry_run, created, shares_changed,
reparented, disabled, reenabled, members, unchanged, outcome, error, limits_changed FROM sync_runs ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("read sync runs: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.SyncRun, error) {
		var r llmflow.SyncRun
		var started, finished int64
		if err := rows.Scan(&r.ID, &started, &finished, &r.Source, &r.DryRun, &r.Created, &r.SharesChanged,
			&r.Reparented, &r.Disabled, &r.Reenabled, &r.Members, &r.Unchanged, &r.Outcome, &r.Error, &r.LimitsChanged); err != nil {
			return r, err
		}
		r.Started, r.Finished = fromMicros(started), fromMicros(finished)
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read sync runs: %w", err)
	}
	return out, nil
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
