package writeback

import (
	"context"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
)

// RollupReader is what ServedSince reads.
type RollupReader interface {
	Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
}

// ServedSince is the first hour the gateway served: the hour of the
// store's oldest rollup before end; end itself when there is none (nothing
// was served before end: no hour before it has capacity). Reports and the
// write-back count the pools' GPUs from that hour on only, so a period
// before the gateway started, or the hours of its first day before it
// did, get no cluster rows (idle capacity nobody could use).
func ServedSince(ctx context.Context, db RollupReader, end time.Time) (time.Time, error) {
	rs, err := db.Rollups(ctx, time.Unix(0, 0).UTC(), end, llmflow.RollupFilter{GroupBy: []string{llmflow.DimPool}})
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the first hour served: %w", err)
	}
	var first time.Time
	for _, r := range rs {
		if !r.Hour.IsZero() && (first.IsZero() || r.Hour.Before(first)) {
			first = r.Hour
		}
	}
	if first.IsZero() {
		return end, nil
	}
	return first, nil
}
