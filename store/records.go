package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
)

// recordCols are the columns of records that WriteRecords writes and
// Records reads, in this order, in both backends.
const recordCols = `request_id, time, key_id, project, team, org, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours,
	status, outcome, estimated, stream, priority, latency_us, ttfb_us, tags, estimate_reason,
	preemptions, recomputed_tokens`

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

// Records returns the records with from ≤ Time < to, ordered by Time then
// RequestID. Bounds finer than a microsecond are compared exactly against
// the stored microseconds. It returns nil when nothing matches.
func (a *sqlDB) Records(ctx context.Context, from, to time.Time) ([]llmflow.Record, error) {
	if !from.Before(to) {
		return nil, nil
	}
	return all(ctx, a.read, "read records", `SELECT `+recordCols+`
FROM records WHERE time >= ? AND time < ? ORDER BY time, request_id`, []any{a.bound(from), a.bound(to)},
		func(rows dbRows) (llmflow.Record, error) {
			var (
				r               llmflow.Record
				lat, ttfb       int64
				outcome, reason string
			)
			if err := rows.Scan(&r.RequestID, dbTime{&r.Time}, &r.KeyID, &r.Project, &r.Team, &r.Org, &r.Model, &r.Pool, &r.Upstream,
				&r.PromptTokens, &r.CompletionTokens, &r.CachedTokens, &r.GPUHours,
				&r.Status, &outcome, &r.Estimated, &r.Stream, &r.Priority, &lat, &ttfb, a.listDest(&r.Tags), &reason,
				&r.Preemptions, &r.RecomputedTokens); err != nil {
				return r, err
			}
			r.Outcome = llmflow.Outcome(outcome)
			r.EstimateReason = llmflow.EstimateReason(reason)
			r.Latency = time.Duration(lat) * time.Microsecond
			r.TTFB = time.Duration(ttfb) * time.Microsecond
			r.Tags = nilIfEmpty(r.Tags)
			return r, nil
		})
}

// PurgeRecords deletes the raw records with Time < before and returns how
// many it deleted. The rollups stay: reports over the purged range are
// unchanged. It deletes in steps of their own transactions, so accounting
// writes interleave with a large purge; a purge stopped by ctx keeps what
// it deleted so far (and returns that count with the error).
func (a *sqlDB) PurgeRecords(ctx context.Context, before time.Time) (int64, error) {
	bound := a.bound(before)
	return purgeInChunks(func() (int64, error) {
		return a.write.exec(ctx, `DELETE FROM records WHERE `+a.rowID+` IN (
	SELECT `+a.rowID+` FROM records WHERE time < ? ORDER BY time LIMIT ?)`, bound, purgeChunk)
	})
}
