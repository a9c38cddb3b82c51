package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow"
)

// SaveShareUsage replaces the saved fair-share usage of pool with usage,
// taken at at, in one transaction.
func (s *Postgres) SaveShareUsage(ctx context.Context, pool string, at time.Time, usage []llmflow.ShareUsage) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "save share usage: zero time"}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM share_usage WHERE pool = $1`, pool)
		for _, u := range usage {
			b.Queue(`INSERT INTO share_usage (pool, path, gpu_hours) VALUES ($1, $2, $3)
ON CONFLICT (pool, path) DO UPDATE SET gpu_hours = EXCLUDED.gpu_hours`, pool, nonNil(u.Path), u.GPUHours)
		}
		b.Queue(`INSERT INTO share_usage_saved (pool, saved_at) VALUES ($1, $2)
ON CONFLICT (pool) DO UPDATE SET saved_at = EXCLUDED.saved_at`, pool, pgTime(at))
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("save share usage of pool %q: %w", pool, err)
	}
	return nil
}

// ShareUsage returns the saved fair-share usage of pool, ordered by path,
// and when it was saved; a pool never saved gives no usage and a zero time.
func (s *Postgres) ShareUsage(ctx context.Context, pool string) ([]llmflow.ShareUsage, time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT saved_at FROM share_usage_saved WHERE pool = $1`, pool).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT path, gpu_hours FROM share_usage WHERE pool = $1`, pool)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
	}
	defer rows.Close()
	var out []llmflow.ShareUsage
	for rows.Next() {
		var u llmflow.ShareUsage
		if err := rows.Scan(&u.Path, &u.GPUHours); err != nil {
			return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
		}
		if u.Path == nil {
			u.Path = []string{}
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
	}
	slices.SortFunc(out, func(a, b llmflow.ShareUsage) int { return slices.Compare(a.Path, b.Path) })
	return out, at.UTC(), nil
}
