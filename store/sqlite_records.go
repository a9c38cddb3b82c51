package store

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
)

// recordColumns is the number of columns insertRecordsSQL binds per row.
const recordColumns = 26

// recordsPerInsert is how many rows one INSERT carries: a batch goes in
// as few statements as possible, which is where the write throughput
// comes from (the per-statement cost of the driver dominates a one-row
// insert). 64 rows × 24 columns stays far under SQLite's bound of 32766
// parameters.
const recordsPerInsert = 64

// batchTable is the write connection's staging table: WriteRecords puts a
// batch there, drops what is already stored, then moves the rest into
// records and rolls it up, all in one transaction. ord keeps the batch
// order (the first of two records with one RequestID wins); hour is the
// start of the record's hour.
const batchTable = `CREATE TEMP TABLE IF NOT EXISTS batch (
	request_id        TEXT    NOT NULL PRIMARY KEY,
	time              INTEGER NOT NULL,
	key_id            TEXT    NOT NULL,
	project           TEXT    NOT NULL,
	team              TEXT    NOT NULL,
	org               TEXT    NOT NULL,
	model             TEXT    NOT NULL,
	pool              TEXT    NOT NULL,
	upstream          TEXT    NOT NULL,
	prompt_tokens     INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	cached_tokens     INTEGER NOT NULL,
	gpu_hours         REAL    NOT NULL,
	status            INTEGER NOT NULL,
	outcome           TEXT    NOT NULL,
	estimated         INTEGER NOT NULL,
	stream            INTEGER NOT NULL,
	priority          INTEGER NOT NULL,
	latency_us        INTEGER NOT NULL,
	ttfb_us           INTEGER NOT NULL,
	tags              TEXT    NOT NULL,
	estimate_reason   TEXT    NOT NULL,
	preemptions       INTEGER NOT NULL,
	recomputed_tokens INTEGER NOT NULL,
	hour              INTEGER NOT NULL,
	ord               INTEGER NOT NULL
)`

// insertRecordsSQL is an INSERT of n rows into the staging table. OR
// IGNORE keeps the first of two rows with the same RequestID.
func insertRecordsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT OR IGNORE INTO temp.batch (` + recordCols + `, hour, ord) VALUES `)
	row := "(" + strings.Repeat("?,", recordColumns-1) + "?)"
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	return b.String()
}

// The statements that move the staged batch into records and the rollups.
// Only rows not already in records are left in the batch when they run, so
// a record written again is never rolled up twice. (An upsert from a
// SELECT needs a WHERE clause in SQLite, hence WHERE true.)
var sqliteMoveBatch = []string{
	`DELETE FROM temp.batch WHERE EXISTS (SELECT 1 FROM main.records r WHERE r.request_id = temp.batch.request_id)`,
	`INSERT INTO main.records (` + recordCols + `) SELECT ` + recordCols + ` FROM temp.batch ORDER BY ord`,
	`INSERT INTO main.rollups (hour, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT b.hour, b.org, b.team, b.project, b.key_id, COALESCE(k.owner, ''), b.model, b.pool,
	count(*), sum(b.prompt_tokens), sum(b.completion_tokens), sum(b.cached_tokens), sum(b.gpu_hours), sum(b.estimated)
FROM temp.batch b LEFT JOIN main.keys k ON k.id = b.key_id
WHERE true
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
ON CONFLICT DO UPDATE SET
	requests = requests + excluded.requests,
	prompt_tokens = prompt_tokens + excluded.prompt_tokens,
	completion_tokens = completion_tokens + excluded.completion_tokens,
	cached_tokens = cached_tokens + excluded.cached_tokens,
	gpu_hours = gpu_hours + excluded.gpu_hours,
	estimated_requests = estimated_requests + excluded.estimated_requests`,
	`INSERT INTO main.rollups_by_tag (hour, tag, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT b.hour, t.tag, b.org, b.team, b.project, b.key_id, COALESCE(k.owner, ''), b.model, b.pool,
	count(*), sum(b.prompt_tokens), sum(b.completion_tokens), sum(b.cached_tokens), sum(b.gpu_hours), sum(b.estimated)
FROM (
	SELECT DISTINCT b.request_id, j.value AS tag FROM temp.batch b, json_each(b.tags) j
	UNION ALL
	SELECT request_id, '' FROM temp.batch WHERE tags = '[]'
) t
JOIN temp.batch b ON b.request_id = t.request_id
LEFT JOIN main.keys k ON k.id = b.key_id
WHERE true
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
ON CONFLICT DO UPDATE SET
	requests = requests + excluded.requests,
	prompt_tokens = prompt_tokens + excluded.prompt_tokens,
	completion_tokens = completion_tokens + excluded.completion_tokens,
	cached_tokens = cached_tokens + excluded.cached_tokens,
	gpu_hours = gpu_hours + excluded.gpu_hours,
	estimated_requests = estimated_requests + excluded.estimated_requests`,
	`DELETE FROM temp.batch`,
}

// recordArgs appends r's column values in insertRecordsSQL's order.
func recordArgs(args []any, r *llmflow.Record, ord int) ([]any, error) {
	tags, err := encodeTags(r.Tags)
	if err != nil {
		return nil, err
	}
	t := toMicros(r.Time)
	return append(args,
		r.RequestID, t, r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream,
		r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours,
		r.Status, string(r.Outcome), r.Estimated, r.Stream, r.Priority,
		r.Latency.Microseconds(), r.TTFB.Microseconds(), tags, string(r.EstimateReason),
		r.Preemptions, r.RecomputedTokens, hourOf(t), ord,
	), nil
}

// WriteRecords stores rs and rolls them up, in one transaction. A record
// whose RequestID is already stored (by this or an earlier call, or
// earlier in rs) is skipped, in records and in the rollups: the first
// write wins, so a retried batch is never counted twice. An empty batch
// does nothing. A record without a RequestID fails the whole batch with
// EINVALID before anything is written. A record with usage out of bounds
// is stored clamped (llmflow.Record.ClampUsage) and counted
// (ClampedRecords), never refused.
func (s *SQLite) WriteRecords(ctx context.Context, rs []llmflow.Record) (err error) {
	if len(rs) == 0 {
		return nil
	}
	for i := range rs {
		if rs[i].RequestID == "" {
			return &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("record %d: request id is required", i)}
		}
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("write records: %w", err)
		}
	}()
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The connection may be new (the pool reopened it): the staging table
	// is per connection.
	if _, err := tx.ExecContext(ctx, batchTable); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM temp.batch`); err != nil {
		return err
	}
	full := tx.StmtContext(ctx, s.insertRecords)
	defer full.Close()
	args := make([]any, 0, recordsPerInsert*recordColumns)
	first := rs[0].RequestID
	var clamped atomic.Int64 // counted once the batch is committed
	for ord := 0; ord < len(rs); {
		n := min(len(rs)-ord, recordsPerInsert)
		args = args[:0]
		for i := range n {
			if args, err = recordArgs(args, clampedRecord(&rs[ord+i], &clamped), ord+i); err != nil {
				return fmt.Errorf("record %s: %w", rs[ord+i].RequestID, err)
			}
		}
		var err error
		if n == recordsPerInsert {
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, insertRecordsSQL(n), args...)
		}
		if err != nil {
			return fmt.Errorf("records %s…: %w", rs[ord].RequestID, err)
		}
		ord += n
	}
	for _, q := range sqliteMoveBatch {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("records %s…: %w", first, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.clamped.Add(clamped.Load())
	return nil
}

// ClampedRecords returns how many records WriteRecords has stored with
// their usage clamped since the store was opened.
func (s *SQLite) ClampedRecords() int64 { return s.clamped.Load() }

// hourMicros is the length of an hour in microseconds.
const hourMicros = int64(time.Hour / time.Microsecond)

// hourOf returns the start of the UTC hour holding t, in unix microseconds
// (floored also before 1970).
func hourOf(us int64) int64 {
	return us - ((us%hourMicros)+hourMicros)%hourMicros
}
