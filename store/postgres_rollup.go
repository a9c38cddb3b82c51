package store

import (
	"context"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Rollups returns the hourly rollups of the hours starting in [from, to),
// selected and grouped by f, ordered by hour then the kept dimensions. It
// reads rollups only, never raw records.
func (s *Postgres) Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, false, from, to, f)
}

// RollupsByTag is Rollups per tag: a request with several tags counts once
// under each distinct tag, a request without tags under the tag "".
func (s *Postgres) RollupsByTag(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, true, from, to, f)
}

// Spend returns the rollups f selects: from RollupsByTag when f needs the
// tags (llmflow.RollupFilter.NeedsTags), from Rollups otherwise.
func (s *Postgres) Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, f.NeedsTags(), from, to, f)
}

func (s *Postgres) rollups(ctx context.Context, byTag bool, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	q, args, err := postgresDialect.rollupQuery(byTag, f, from, to)
	if err != nil {
		return nil, err
	}
	if !from.Before(to) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.Rollup, error) {
		var (
			r    llmflow.Rollup
			hour *time.Time
		)
		if err := rows.Scan(append([]any{&hour}, rollupDest(&r)...)...); err != nil {
			return r, err
		}
		if hour != nil {
			r.Hour = hour.UTC()
		}
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	return out, nil
}
