package main

import (
	"context"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/progress"
)

// rollupChunk is the span of one read of hourly rollups when progress is
// shown: a month's report reads in 5 steps.
const rollupChunk = 7 * 24 * time.Hour

type rollupReader interface {
	Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
}

// readRollups reads the hourly rollups of [from, to) (f without Total). With
// a meter (a terminal) it reads them a week at a time, counting the hours
// read: the store orders rollups by hour first, so the weeks put end to
// end are the rows of one read.
func readRollups(ctx context.Context, db rollupReader, from, to time.Time, f llmflow.RollupFilter, m *progress.Meter) ([]llmflow.Rollup, error) {
	if m == nil || to.Sub(from) <= rollupChunk {
		return db.Rollups(ctx, from, to, f)
	}
	m.Total("reading rollups", int64(to.Sub(from)/time.Hour))
	var out []llmflow.Rollup
	for start := from; start.Before(to); start = start.Add(rollupChunk) {
		end := start.Add(rollupChunk)
		if end.After(to) {
			end = to
		}
		rs, err := db.Rollups(ctx, start, end, f)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
		m.Set(int64(end.Sub(from) / time.Hour))
	}
	return out, nil
}
