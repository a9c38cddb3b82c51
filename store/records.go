package store

import (
	"fmt"
	"sync/atomic"

	"github.com/go-llmflow/llmflow"
)

// recordCols are the columns of records that WriteRecords writes and
// Records reads, in this order, in both backends.
const recordCols = `request_id, time, key_id, project, team, org, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours,
	status, outcome, estimated, stream, priority, latency_us, ttfb_us, tags, estimate_reason`

// purgeChunk is how many records one purge transaction deletes: a large
// purge goes in steps, so that accounting writes interleave with it
// instead of waiting for the whole of it.
const purgeChunk = 10000

// purgeInChunks runs del, which deletes at most purgeChunk records and
// returns how many it deleted, until a step deletes fewer. It returns the
// total, also with the error of a failed step.
func purgeInChunks(del func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := del()
		if err != nil {
			return total, fmt.Errorf("purge records: %w", err)
		}
		total += n
		if n < purgeChunk {
			return total, nil
		}
	}
}

// nonNil returns s, or an empty slice for nil: a list (tags, members, a
// share path) is stored as an empty array, never as NULL.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// clampedRecord returns r with its usage clamped (llmflow.Record.ClampUsage)
// and counts it in n when anything changed: one bad record is stored as an
// estimate instead of failing its batch or overflowing a rollup.
func clampedRecord(r *llmflow.Record, n *atomic.Int64) *llmflow.Record {
	c := *r
	if c.ClampUsage() {
		n.Add(1)
		return &c
	}
	return r
}
