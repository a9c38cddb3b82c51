package store

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
)

// pgBatchColumns are the arrays WriteRecords passes, one element per
// record, in recordCols order; tags are each record's array literal
// (pgTagsLiteral), an array of arrays not being one PostgreSQL holds.
var pgBatchColumns = [...]string{
	"request_id text", "time timestamptz", "key_id text", "project text", "team text", "org text", "model text", "pool text",
	"upstream text", "prompt_tokens bigint", "completion_tokens bigint", "cached_tokens bigint", "gpu_hours double precision",
	"status bigint", "outcome text", "estimated boolean", "stream boolean", "priority bigint", "latency_us bigint",
	"ttfb_us bigint", "tags text", "estimate_reason text", "preemptions bigint", "recomputed_tokens bigint",
}

// pgWriteRecords is the whole write of a batch, one statement (its own
// transaction, one round trip): the batch comes in as arrays, one per
// column, unnested in order (ord); it goes into records and what was
// actually inserted is rolled up. DISTINCT ON keeps the first record of a
// RequestID within the batch; ON CONFLICT DO NOTHING skips those already
// stored (waiting, when another transaction is inserting the same
// RequestID, for its outcome). Rows are inserted in key order, the same in
// every transaction, so concurrent writers do not deadlock.
var pgWriteRecords = func() string {
	var args, cols []string
	for i, c := range pgBatchColumns {
		name, typ, _ := strings.Cut(c, " ")
		args = append(args, fmt.Sprintf("$%d::%s[]", i+1, typ))
		cols = append(cols, name)
	}
	return `WITH batch AS (
	SELECT * FROM unnest(` + strings.Join(args, ", ") + `) WITH ORDINALITY AS b(` + strings.Join(cols, ", ") + `, ord)
), ins AS (
	INSERT INTO records (` + recordCols + `)
	SELECT DISTINCT ON (request_id) request_id, time, key_id, project, team, org, model, pool, upstream,
		prompt_tokens, completion_tokens, cached_tokens, gpu_hours,
		status, outcome, estimated, stream, priority, latency_us, ttfb_us, tags::text[], estimate_reason,
		preemptions, recomputed_tokens
	FROM batch ORDER BY request_id, ord
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
}()

// pgTagsLiteral is tags as a PostgreSQL array literal: every element
// quoted, so that any string (commas, braces, spaces, NULL) is itself.
func pgTagsLiteral(b []byte, tags []string) []byte {
	b = append(b, '{')
	for i, t := range tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		for j := 0; j < len(t); j++ {
			if t[j] == '"' || t[j] == '\\' {
				b = append(b, '\\')
			}
			b = append(b, t[j])
		}
		b = append(b, '"')
	}
	return append(b, '}')
}

// pgBatch is a batch as the column arrays of pgWriteRecords.
type pgBatch struct {
	requestID, keyID, project, team, org, model, pool, upstream, outcome, tags, estimateReason []string
	time                                                                                       []time.Time
	prompt, completion, cached, status, priority, latency, ttfb, preemptions, recomputed       []int64
	gpu                                                                                        []float64
	estimated, stream                                                                          []bool
}

func newPGBatch(rs []llmflow.Record, clamped *atomic.Int64) *pgBatch {
	n := len(rs)
	b := &pgBatch{}
	for _, l := range []*[]string{&b.requestID, &b.keyID, &b.project, &b.team, &b.org, &b.model, &b.pool, &b.upstream, &b.outcome, &b.tags, &b.estimateReason} {
		*l = make([]string, 0, n)
	}
	for _, l := range []*[]int64{&b.prompt, &b.completion, &b.cached, &b.status, &b.priority, &b.latency, &b.ttfb, &b.preemptions, &b.recomputed} {
		*l = make([]int64, 0, n)
	}
	b.time, b.gpu = make([]time.Time, 0, n), make([]float64, 0, n)
	b.estimated, b.stream = make([]bool, 0, n), make([]bool, 0, n)
	var lit []byte
	for i := range rs {
		r := clampedRecord(&rs[i], clamped)
		b.requestID = append(b.requestID, r.RequestID)
		b.time = append(b.time, pgTime(r.Time))
		b.keyID = append(b.keyID, r.KeyID)
		b.project = append(b.project, r.Project)
		b.team = append(b.team, r.Team)
		b.org = append(b.org, r.Org)
		b.model = append(b.model, r.Model)
		b.pool = append(b.pool, r.Pool)
		b.upstream = append(b.upstream, r.Upstream)
		b.prompt = append(b.prompt, r.PromptTokens)
		b.completion = append(b.completion, r.CompletionTokens)
		b.cached = append(b.cached, r.CachedTokens)
		b.gpu = append(b.gpu, r.GPUHours)
		b.status = append(b.status, int64(r.Status))
		b.outcome = append(b.outcome, string(r.Outcome))
		b.estimated = append(b.estimated, r.Estimated)
		b.stream = append(b.stream, r.Stream)
		b.priority = append(b.priority, int64(r.Priority))
		b.latency = append(b.latency, r.Latency.Microseconds())
		b.ttfb = append(b.ttfb, r.TTFB.Microseconds())
		if len(r.Tags) == 0 {
			b.tags = append(b.tags, "{}")
		} else {
			lit = pgTagsLiteral(lit[:0], r.Tags)
			b.tags = append(b.tags, string(lit))
		}
		b.estimateReason = append(b.estimateReason, string(r.EstimateReason))
		b.preemptions = append(b.preemptions, int64(r.Preemptions))
		b.recomputed = append(b.recomputed, r.RecomputedTokens)
	}
	return b
}

// args are the statement's arguments, in pgBatchColumns order.
func (b *pgBatch) args() []any {
	return []any{b.requestID, b.time, b.keyID, b.project, b.team, b.org, b.model, b.pool, b.upstream,
		b.prompt, b.completion, b.cached, b.gpu, b.status, b.outcome, b.estimated, b.stream, b.priority,
		b.latency, b.ttfb, b.tags, b.estimateReason, b.preemptions, b.recomputed}
}

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
	var clamped atomic.Int64
	args := newPGBatch(rs, &clamped).args()
	var err error
	for attempt := 1; ; attempt++ {
		_, err = s.pool.Exec(ctx, pgWriteRecords, args...)
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
