package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-llmflow/llmflow"
)

// SaveShareUsage replaces the saved fair-share usage of pool with usage,
// taken at at, in one transaction.
func (s *SQLite) SaveShareUsage(ctx context.Context, pool string, at time.Time, usage []llmflow.ShareUsage) (err error) {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "save share usage: zero time"}
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("save share usage of pool %q: %w", pool, err)
		}
	}()
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM share_usage WHERE pool = ?`, pool); err != nil {
		return err
	}
	st, err := tx.PrepareContext(ctx, `INSERT INTO share_usage (pool, path, gpu_hours) VALUES (?, ?, ?)
ON CONFLICT (pool, path) DO UPDATE SET gpu_hours = excluded.gpu_hours`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, u := range usage {
		path, err := json.Marshal(nonNil(u.Path))
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, pool, string(path), u.GPUHours); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO share_usage_saved (pool, saved_at) VALUES (?, ?)
ON CONFLICT (pool) DO UPDATE SET saved_at = excluded.saved_at`, pool, toMicros(at)); err != nil {
		return err
	}
	return tx.Commit()
}

// ShareUsage returns the saved fair-share usage of pool, ordered by path,
// and when it was saved; a pool never saved gives no usage and a zero time.
func (s *SQLite) ShareUsage(ctx context.Context, pool string) ([]llmflow.ShareUsage, time.Time, error) {
	var at int64
	err := s.read.QueryRowContext(ctx, `SELECT saved_at FROM share_usage_saved WHERE pool = ?`, pool).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
	}
	rows, err := s.read.QueryContext(ctx, `SELECT path, gpu_hours FROM share_usage WHERE pool = ?`, pool)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
	}
	defer rows.Close()
	var out []llmflow.ShareUsage
	for rows.Next() {
		var path string
		var u llmflow.ShareUsage
		if err := rows.Scan(&path, &u.GPUHours); err != nil {
			return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
		}
		if err := json.Unmarshal([]byte(path), &u.Path); err != nil {
			return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: path %q: %w", pool, path, err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("read share usage of pool %q: %w", pool, err)
	}
	slices.SortFunc(out, func(a, b llmflow.ShareUsage) int { return slices.Compare(a.Path, b.Path) })
	return out, fromMicros(at), nil
}
