package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-llmflow/llmflow"
)

// SaveShareUsage replaces the saved fair-share usage of pool with usage,
// taken at at, in one transaction.
func (a *sqlDB) SaveShareUsage(ctx context.Context, pool string, at time.Time, usage []llmflow.ShareUsage) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "save share usage: zero time"}
	}
	err := a.tx(ctx, func(q querier) error {
		if _, err := q.exec(ctx, `DELETE FROM share_usage WHERE pool = ?`, pool); err != nil {
			return err
		}
		for _, u := range usage {
			if _, err := q.exec(ctx, `INSERT INTO share_usage (pool, path, gpu_hours) VALUES (?, ?, ?)
ON CONFLICT (pool, path) DO UPDATE SET gpu_hours = excluded.gpu_hours`, pool, a.list(u.Path), u.GPUHours); err != nil {
				return err
			}
		}
		_, err := q.exec(ctx, `INSERT INTO share_usage_saved (pool, saved_at) VALUES (?, ?)
ON CONFLICT (pool) DO UPDATE SET saved_at = excluded.saved_at`, pool, a.time(at))
		return err
	})
	if err != nil {
		return fmt.Errorf("save share usage of pool %q: %w", pool, err)
	}
	return nil
}

// ShareUsage returns the saved fair-share usage of pool, ordered by path,
// and when it was saved; a pool never saved gives no usage and a zero time.
func (a *sqlDB) ShareUsage(ctx context.Context, pool string) ([]llmflow.ShareUsage, time.Time, error) {
	what := fmt.Sprintf("read share usage of pool %q", pool)
	var at time.Time
	err := a.one(ctx, what, `SELECT saved_at FROM share_usage_saved WHERE pool = ?`, []any{pool}, dbTime{&at})
	if errors.Is(err, llmflow.ErrNotFound) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	out, err := all(ctx, a.read, what, `SELECT path, gpu_hours FROM share_usage WHERE pool = ?`, []any{pool},
		func(rows dbRows) (u llmflow.ShareUsage, err error) {
			err = rows.Scan(a.listDest(&u.Path), &u.GPUHours)
			u.Path = nonNil(u.Path)
			return u, err
		})
	if err != nil {
		return nil, time.Time{}, err
	}
	slices.SortFunc(out, func(a, b llmflow.ShareUsage) int { return slices.Compare(a.Path, b.Path) })
	return out, at, nil
}
