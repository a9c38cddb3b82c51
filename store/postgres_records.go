package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow"
)

// pgBatchTable is created on every new connection: WriteRecords copies a
// batch into it. Its rows go at commit (and with a rollback).
const pgBatchTable = `CREATE TEMP TABLE IF NOT EXISTS llmflow_batch (
	request_id        text             COLLATE "C" NOT NULL,
	time              timestamptz      NOT NULL,
	key_id            text             COLLATE "C" NOT NULL,
	project           text             COLLATE "C" NOT NULL,
	team              text             COLLATE "C" NOT NULL,
	org               text             COLLATE "C" NOT NULL,
	model             text             COLLATE "C" NOT NULL,
	pool              text             COLLATE "C" NOT NULL,
	upstream          text             COLLATE "C" NOT NULL,
	prompt_tokens     bigint           NOT NULL,
	completion_tokens bigint           NOT NULL,
	cached_tokens     bigint           NOT NULL,
	gpu_hours         double precision NOT NULL,
	status            bigint           NOT NULL,
	outcome           text             COLLATE "C" NOT NULL,
	estimated         boolean          NOT NULL,
	stream            boolean          NOT NULL,
	priority          bigint           NOT NULL,
	latency_us        bigint           NOT NULL,
	ttfb_us           bigint           NOT NULL,
	tags              text[]           COLLATE "C" NOT NULL,
	estimate_reason   text             COLLATE "C" NOT NULL,
	preemptions       bigint           NOT NULL,
	recomputed_tokens bigint           NOT NULL,
	ord               integer          NOT NULL
) ON COMMIT DELETE ROWS`

var pgBatchColumns = []string{
	"request_id", "time", "key_id", "project", "team", "org", "model", "pool", "upstream",
	"prompt_tokens", "completion_tokens", "cached_tokens", "gpu_hours",
	"status", "outcome", "estimated", "stream", "priority", "latency_us", "ttfb_us", "tags", "estimate_reason",
	"preemptions", "recomputed_tokens", "ord",
}

// pgMoveBatch moves the copied batch into records and rolls up what was
// actually inserted, in one statement. DISTINCT ON keeps the first record
// of a RequestID within the batch; ON CONFLICT DO NOTHING skips those
// already stored (waiting, when another transaction is inserting the same
// RequestID, for its outcome). Rows are inserted in key order, the same in
// every transaction, so concurrent writers do not deadlock.
const pgMoveBatch = `WITH ins AS (
	INSERT INTO records (` + recordCols + `)
	SELECT DISTINCT ON (request_id) ` + recordCols + `
	FROM pg_temp.llmflow_batch ORDER BY request_id, ord
	ON CONFLICT (request_id) DO NOTHING
	RETURNING date_trunc('hour', time, 'UTC') AS hour, key_id, project, team, org, model, pool,
		prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated, tags
), owned AS (
	SELECT ins.*, COALESCE(k.owner, '') AS owner FROM ins LEFT JOIN keys k ON k.id = ins.key_id
), plain AS (
	INSERT INTO rollups (hour, org, team, project, key_id, owner, model, pool,
		requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
	SELECT hour, org, team, project, key_id, owner, model, pool,
		count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(gpu_hours),
		count(*) FILTER (WHERE estimated)
	FROM owned
	GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
	ON CONFLICT (hour, org, team, project, key_id, owner, model, pool) DO UPDATE SET
		requests = rollups.requests + EXCLUDED.requests,
		prompt_tokens = rollups.prompt_tokens + EXCLUDED.prompt_tokens,
		completion_tokens = rollups.completion_tokens + EXCLUDED.completion_tokens,
		cached_tokens = rollups.cached_tokens + EXCLUDED.cached_tokens,
		gpu_hours = rollups.gpu_hours + EXCLUDED.gpu_hours,
		estimated_requests = rollups.estimated_requests + EXCLUDED.estimated_requests
)
INSERT INTO rollups_by_tag (hour, tag, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT hour, t.tag, org, team, project, key_id, owner, model, pool,
	count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(gpu_hours),
	count(*) FILTER (WHERE estimated)
FROM owned CROSS JOIN LATERAL (
	SELECT DISTINCT u FROM unnest(CASE WHEN cardinality(owned.tags) = 0 THEN ARRAY['']::text[] ELSE owned.tags END) u
) t(tag)
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9
ON CONFLICT (hour, tag, org, team, project, key_id, owner, model, pool) DO UPDATE SET
	requests = rollups_by_tag.requests + EXCLUDED.requests,
	prompt_tokens = rollups_by_tag.prompt_tokens + EXCLUDED.prompt_tokens,
	completion_tokens = rollups_by_tag.completion_tokens + EXCLUDED.completion_tokens,
	cached_tokens = rollups_by_tag.cached_tokens + EXCLUDED.cached_tokens,
	gpu_hours = rollups_by_tag.gpu_hours + EXCLUDED.gpu_hours,
	estimated_requests = rollups_by_tag.estimated_requests + EXCLUDED.estimated_requests`

// maxWriteAttempts bounds the retries of a batch that lost a deadlock or a
// serialization conflict to another writer.
const maxWriteAttempts = 5

// WriteRecords stores rs and rolls them up, in one transaction. A record
// whose RequestID is already stored (by this or another gateway, or
// earlier in rs) is skipped, in records and in the rollups: the first
// write wins, so a retried batch is never counted twice. An empty batch
// does nothing. A record without a RequestID fails the whole batch with
// EINVALID before anything is written. A record with usage out of bounds
// is stored clamped (llmflow.Record.ClampUsage) and counted
// (ClampedRecords), never refused.
func (s *Postgres) WriteRecords(ctx context.Context, rs []llmflow.Record) error {
	if len(rs) == 0 {
		return nil
	}
	for i := range rs {
		if rs[i].RequestID == "" {
			return &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("record %d: request id is required", i)}
		}
	}
	var clamped atomic.Int64 // in the last attempt
	src := func(i int) ([]any, error) {
		r := clampedRecord(&rs[i], &clamped)
		return []any{
			r.RequestID, pgTime(r.Time), r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream,
			r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours,
			int64(r.Status), string(r.Outcome), r.Estimated, r.Stream, int64(r.Priority),
			r.Latency.Microseconds(), r.TTFB.Microseconds(), nonNil(r.Tags), string(r.EstimateReason),
			int64(r.Preemptions), r.RecomputedTokens, int32(i),
		}, nil
	}
	var err error
	for attempt := 1; ; attempt++ {
		clamped.Store(0)
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", "llmflow_batch"}, pgBatchColumns, pgx.CopyFromSlice(len(rs), src)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, pgMoveBatch)
			return err
		})
		if code := pgCode(err); err == nil || attempt == maxWriteAttempts || (code != "40P01" && code != "40001") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("write records: %w", ctx.Err())
		case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("write records %s…: %w", rs[0].RequestID, err)
	}
	s.clamped.Add(clamped.Load())
	return nil
}

// ClampedRecords returns how many records WriteRecords has stored with
// their usage clamped since the store was opened.
func (s *Postgres) ClampedRecords() int64 { return s.clamped.Load() }
