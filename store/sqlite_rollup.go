package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Rollups returns the hourly rollups of the hours starting in [from, to),
// selected and grouped by f, ordered by hour then the kept dimensions
// (org, team, project, key, owner, model, pool). It reads rollups only,
// never raw records, so it answers the same after PurgeRecords. Bounds are
// meant to be whole hours: a from of 10:30 starts at the 11:00 hour.
func (s *SQLite) Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, false, from, to, f)
}

// RollupsByTag is Rollups per tag: a request with several tags counts once
// under each distinct tag, a request without tags under the tag "". Rows
// are ordered by hour, then tag, then the other kept dimensions.
func (s *SQLite) RollupsByTag(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, true, from, to, f)
}

// Spend returns the rollups f selects: from RollupsByTag when f needs the
// tags (llmflow.RollupFilter.NeedsTags), from Rollups otherwise.
func (s *SQLite) Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, f.NeedsTags(), from, to, f)
}

func (s *SQLite) rollups(ctx context.Context, byTag bool, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	q, args, err := sqliteDialect.rollupQuery(byTag, f, from, to)
	if err != nil {
		return nil, err
	}
	if !from.Before(to) {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.Rollup, error) {
		var (
			r    llmflow.Rollup
			hour sql.NullInt64
		)
		if err := rows.Scan(append([]any{&hour}, rollupDest(&r)...)...); err != nil {
			return r, err
		}
		if hour.Valid {
			r.Hour = fromMicros(hour.Int64)
		}
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	return out, nil
}
