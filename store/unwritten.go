package store

import (
	"context"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
)

// SaveUnwritten replaces the usage the write-back to cluster could not
// write for the hours [from, to) with rows, in one transaction (a
// write-back re-writing hours replaces what it said of them).
func (a *sqlDB) SaveUnwritten(ctx context.Context, cluster string, from, to time.Time, rows []llmflow.Unwritten) error {
	err := a.tx(ctx, func(q querier) error {
		if _, err := q.exec(ctx, `DELETE FROM writeback_unwritten WHERE cluster = ? AND hour >= ? AND hour < ?`,
			cluster, a.time(from), a.time(to)); err != nil {
			return err
		}
		for _, r := range rows {
			if r.Hour.Before(from) || !r.Hour.Before(to) {
				continue
			}
			if _, err := q.exec(ctx, `INSERT INTO writeback_unwritten (cluster, hour, account, user_name, gpu_seconds, reason) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (cluster, hour, account, user_name) DO UPDATE SET gpu_seconds = excluded.gpu_seconds, reason = excluded.reason`,
				cluster, a.time(r.Hour), r.Account, r.User, r.AllocSecs, r.Reason); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save unwritten usage: %w", err)
	}
	return nil
}

// Unwritten returns the usage the write-back to cluster could not write,
// for the hours [from, to), by hour, account and user.
func (a *sqlDB) Unwritten(ctx context.Context, cluster string, from, to time.Time) ([]llmflow.Unwritten, error) {
	return all(ctx, a.read, "read unwritten usage", `SELECT hour, account, user_name, gpu_seconds, reason FROM writeback_unwritten
WHERE cluster = ? AND hour >= ? AND hour < ? ORDER BY hour, account, user_name`, []any{cluster, a.time(from), a.time(to)},
		func(rows dbRows) (u llmflow.Unwritten, err error) {
			err = rows.Scan(dbTime{&u.Hour}, &u.Account, &u.User, &u.AllocSecs, &u.Reason)
			return u, err
		})
}

// SaveAssocOrder replaces the association order (lft) of cluster.
func (a *sqlDB) SaveAssocOrder(ctx context.Context, cluster string, order []llmflow.AssocLFT) error {
	err := a.tx(ctx, func(q querier) error {
		if _, err := q.exec(ctx, `DELETE FROM writeback_assoc_order WHERE cluster = ?`, cluster); err != nil {
			return err
		}
		for _, o := range order {
			if _, err := q.exec(ctx, `INSERT INTO writeback_assoc_order (cluster, account, user_name, lft) VALUES (?, ?, ?, ?)
ON CONFLICT (cluster, account, user_name) DO UPDATE SET lft = excluded.lft`, cluster, o.Account, o.User, o.LFT); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save association order: %w", err)
	}
	return nil
}

// AssocOrder returns the association order of cluster, by lft (none for
// a cluster never written back).
func (a *sqlDB) AssocOrder(ctx context.Context, cluster string) ([]llmflow.AssocLFT, error) {
	return all(ctx, a.read, "read association order", `SELECT account, user_name, lft FROM writeback_assoc_order WHERE cluster = ? ORDER BY lft`,
		[]any{cluster}, func(rows dbRows) (o llmflow.AssocLFT, err error) {
			err = rows.Scan(&o.Account, &o.User, &o.LFT)
			return o, err
		})
}
