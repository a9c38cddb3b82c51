package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/go-llmflow/llmflow"
)

// recordColumns is the number of columns insertRecordsSQL binds per row:
// recordCols.
const recordColumns = 24

// chunkRows are the row counts of the multi-row statements WriteRecords
// runs, largest first: n rows go in as many statements of the largest
// size as fit, then of the smaller ones. Each size is prepared once on
// the write connection, so no batch size makes the store parse SQL on
// the write path, and the per-statement cost of the driver (what
// dominates a one-row insert) is paid once per 64 rows. The largest
// statement binds 64 × 24 parameters, far under SQLite's bound of 32766.
var chunkRows = [...]int{64, 16, 4, 1}

// chunks calls f with the consecutive runs of rs that chunkRows sizes
// cover, each with the index of its statement size.
func chunks[T any](rs []T, f func(size int, run []T) error) error {
	for size, n := range chunkRows {
		for len(rs) >= n {
			if err := f(size, rs[:n]); err != nil {
				return err
			}
			rs = rs[n:]
		}
	}
	return nil
}

// multiRow is an INSERT head followed by n parenthesized groups of cols
// parameters, and tail.
func multiRow(head string, cols, n int, tail string) string {
	var b strings.Builder
	b.WriteString(head)
	row := "(" + strings.Repeat("?,", cols-1) + "?)"
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	b.WriteString(tail)
	return b.String()
}

// insertRecordsSQL inserts n rows into records. It is a plain INSERT: a
// RequestID already stored fails it (SQLITE_CONSTRAINT_PRIMARYKEY), which
// sends the batch the careful way (WriteRecords).
func insertRecordsSQL(n int) string {
	return multiRow(`INSERT INTO main.records (`+recordCols+`) VALUES `, recordColumns, n, "")
}

// The rollup rows a batch adds: its sums per hour and dimensions (see
// batchRollups), the owner looked up here, added to the row already there.
// (An upsert from a SELECT needs a WHERE clause in SQLite, hence WHERE
// true.)
const (
	rollupArgs          = 13
	rollupByTagArgs     = 14
	rollupUpsertColumns = `
ON CONFLICT DO UPDATE SET
	requests = requests + excluded.requests,
	prompt_tokens = prompt_tokens + excluded.prompt_tokens,
	completion_tokens = completion_tokens + excluded.completion_tokens,
	cached_tokens = cached_tokens + excluded.cached_tokens,
	gpu_hours = gpu_hours + excluded.gpu_hours,
	estimated_requests = estimated_requests + excluded.estimated_requests`
)

func upsertRollupsSQL(n int) string {
	return multiRow(`INSERT INTO main.rollups (hour, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT v.column1, v.column2, v.column3, v.column4, v.column5, COALESCE(k.owner, ''), v.column6, v.column7,
	v.column8, v.column9, v.column10, v.column11, v.column12, v.column13
FROM (VALUES `, rollupArgs, n, `) v LEFT JOIN main.keys k ON k.id = v.column5
WHERE true`+rollupUpsertColumns)
}

func upsertRollupsByTagSQL(n int) string {
	return multiRow(`INSERT INTO main.rollups_by_tag (hour, tag, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, COALESCE(k.owner, ''), v.column7, v.column8,
	v.column9, v.column10, v.column11, v.column12, v.column13, v.column14
FROM (VALUES `, rollupByTagArgs, n, `) v LEFT JOIN main.keys k ON k.id = v.column6
WHERE true`+rollupUpsertColumns)
}

// sqliteWriteStmts are the write connection's prepared statements of
// WriteRecords, one per chunkRows size.
type sqliteWriteStmts struct {
	records, rollups, rollupsByTag [len(chunkRows)]*sql.Stmt
}

func prepareWriteStmts(ctx context.Context, db *sql.DB) (*sqliteWriteStmts, error) {
	st := &sqliteWriteStmts{}
	for i, n := range chunkRows {
		for _, p := range []struct {
			dst **sql.Stmt
			sql string
		}{{&st.records[i], insertRecordsSQL(n)}, {&st.rollups[i], upsertRollupsSQL(n)}, {&st.rollupsByTag[i], upsertRollupsByTagSQL(n)}} {
			var err error
			if *p.dst, err = db.PrepareContext(ctx, p.sql); err != nil {
				st.close()
				return nil, err
			}
		}
	}
	return st, nil
}

func (st *sqliteWriteStmts) close() error {
	var errs []error
	for _, l := range [][len(chunkRows)]*sql.Stmt{st.records, st.rollups, st.rollupsByTag} {
		for _, s := range l {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
	}
	return errors.Join(errs...)
}

// recordArgs appends r's column values in recordCols order; t is its time
// in unix microseconds.
func recordArgs(args []any, r *llmflow.Record, t int64) ([]any, error) {
	tags, err := encodeTags(r.Tags)
	if err != nil {
		return nil, err
	}
	// Integers as int64: database/sql passes those on as they are, an int
	// it converts by reflection.
	return append(args,
		r.RequestID, t, r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream,
		r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours,
		int64(r.Status), string(r.Outcome), r.Estimated, r.Stream, int64(r.Priority),
		r.Latency.Microseconds(), r.TTFB.Microseconds(), tags, string(r.EstimateReason),
		int64(r.Preemptions), r.RecomputedTokens,
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
//
// The records go straight into records by multi-row INSERTs, the cost of
// a bare insert; the rollups get the batch's sums, computed here, a few
// rows. A batch of records none of which is stored yet (every batch but a
// replay) is written so in one go. When an INSERT meets a RequestID that
// is stored already, the transaction is rolled back and the batch written
// the careful way: the records already stored (or earlier in the batch)
// are looked up and left out first.
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
	var clamped atomic.Int64 // counted once the batch is committed
	err = s.writeRecords(ctx, rs, false, &clamped)
	if errors.Is(err, errStoredAlready) {
		err = s.writeRecords(ctx, rs, true, &clamped)
	}
	if err == nil {
		s.clamped.Add(clamped.Load())
	}
	return err
}

// errStoredAlready is a first attempt at a batch that met a RequestID
// already stored.
var errStoredAlready = errors.New("a record is stored already")

// writeRecords is one transaction of WriteRecords; careful leaves out the
// records already stored (or earlier in rs) first. clamped is set to the
// records stored clamped.
func (s *SQLite) writeRecords(ctx context.Context, rs []llmflow.Record, careful bool, clamped *atomic.Int64) error {
	clamped.Store(0)
	// BEGIN IMMEDIATE is where a write waits (for another writer's lock),
	// and it honours ctx; so does the transaction (database/sql rolls it
	// back once ctx is done, and Commit refuses). The statements after it,
	// the write lock held, wait for nothing (WAL: no reader blocks a
	// writer), and run without ctx: under a ctx that can end, the driver
	// starts a goroutine and a progress callback for every statement.
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ctx = context.WithoutCancel(ctx)
	if careful {
		if rs, err = newRecords(ctx, tx, rs); err != nil {
			return err
		}
		if len(rs) == 0 {
			return nil // all stored already
		}
	}
	first := rs[0].RequestID
	roll := newBatchRollups(len(rs))
	args := make([]any, 0, chunkRows[0]*recordColumns)
	// The prepared statements bound to tx, made as they are first used.
	var txStmts [3][len(chunkRows)]*sql.Stmt
	defer func() {
		for _, l := range txStmts {
			for _, st := range l {
				if st != nil {
					st.Close()
				}
			}
		}
	}()
	const records, rollups, rollupsByTag = 0, 1, 2
	stmt := func(kind, size int) *sql.Stmt {
		if txStmts[kind][size] == nil {
			prepared := [...]*[len(chunkRows)]*sql.Stmt{&s.stmts.records, &s.stmts.rollups, &s.stmts.rollupsByTag}[kind]
			txStmts[kind][size] = tx.StmtContext(ctx, prepared[size])
		}
		return txStmts[kind][size]
	}
	err = chunks(rs, func(size int, run []llmflow.Record) error {
		args = args[:0]
		for i := range run {
			r := clampedRecord(&run[i], clamped)
			t := toMicros(r.Time)
			var err error
			if args, err = recordArgs(args, r, t); err != nil {
				return fmt.Errorf("record %s: %w", r.RequestID, err)
			}
			roll.add(r, hourOf(t))
		}
		_, err := stmt(records, size).ExecContext(ctx, args...)
		if err != nil && !careful && sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY {
			return errStoredAlready
		}
		if err != nil {
			return fmt.Errorf("records %s…: %w", run[0].RequestID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	plain, tagged := roll.rows()
	err = chunks(plain, func(size int, run []plainRow) error {
		args = args[:0]
		for _, r := range run {
			args = append(args, r.hour, r.org, r.team, r.project, r.key, r.model, r.pool,
				r.requests, r.prompt, r.completion, r.cached, r.gpuHours(), r.estimated)
		}
		_, err := stmt(rollups, size).ExecContext(ctx, args...)
		return err
	})
	if err == nil {
		err = chunks(tagged, func(size int, run []taggedRow) error {
			args = args[:0]
			for _, r := range run {
				args = append(args, r.hour, r.tag, r.org, r.team, r.project, r.key, r.model, r.pool,
					r.requests, r.prompt, r.completion, r.cached, r.gpuHours(), r.estimated)
			}
			_, err := stmt(rollupsByTag, size).ExecContext(ctx, args...)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("records %s…: rollups: %w", first, err)
	}
	return tx.Commit()
}

// lookupChunk is how many request ids one query of newRecords looks up:
// far under SQLite's bound of 32766 parameters.
const lookupChunk = 500

// newRecords returns the records of rs whose RequestID is neither stored
// nor earlier in rs, in order.
func newRecords(ctx context.Context, tx *sql.Tx, rs []llmflow.Record) ([]llmflow.Record, error) {
	stored := make(map[string]bool, len(rs))
	args := make([]any, 0, lookupChunk)
	for i := 0; i < len(rs); i += lookupChunk {
		args = args[:0]
		for _, r := range rs[i:min(i+lookupChunk, len(rs))] {
			args = append(args, r.RequestID)
		}
		rows, err := tx.QueryContext(ctx, `SELECT request_id FROM main.records WHERE request_id IN (`+params(len(args))+`)`, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			stored[id] = true
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]llmflow.Record, 0, len(rs))
	for _, r := range rs {
		if !stored[r.RequestID] {
			stored[r.RequestID] = true
			out = append(out, r)
		}
	}
	return out, nil
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
