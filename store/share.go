package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// shareChunk is how many usage rows one INSERT of SaveShareUsage writes
// (3 parameters each, well under SQLite's and PostgreSQL's limits).
const shareChunk = 500

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
		// one path once (the last given), then multi-row INSERTs: a round
		// trip per shareChunk rows, not per row
		last := make(map[string]int, len(usage))
		for i, u := range usage {
			last[strings.Join(u.Path, "\x00")] = i
		}
		var sql strings.Builder
		args := make([]any, 0, 3*min(len(usage), shareChunk))
		flush := func() error {
			if len(args) == 0 {
				return nil
			}
			_, err := q.exec(ctx, sql.String(), args...)
			sql.Reset()
			args = args[:0]
			return err
		}
		for i, u := range usage {
			if last[strings.Join(u.Path, "\x00")] != i {
				continue
			}
			if len(args) == 0 {
				sql.WriteString(`INSERT INTO share_usage (pool, path, gpu_hours) VALUES (?, ?, ?)`)
			} else {
				sql.WriteString(`, (?, ?, ?)`)
			}
			args = append(args, pool, a.list(u.Path), u.GPUHours)
			if len(args) == 3*shareChunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
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
