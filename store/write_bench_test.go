package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/spool"
)

// BenchmarkAccountingWrite is the whole cost of the accounting write per
// record, from Enqueue (the request path) to the row in the store, as the
// server runs it: an accounting queue over the on-disk spool (sync
// interval) over the store, default batch size and flush interval. In
// the same run, on the same database, the same rows (other request ids)
// go in by a bare multi-row INSERT into records, prepared, in chunks of
// bareChunk rows, one transaction per batch of 500: the floor the
// accounting write is measured against. The two alternate in rounds of
// roundRecords records, so that a database that grows, a cache that warms
// or another process that steals the CPU weigh on both alike.
//
// Per record, for each: CPU time of the process (user + system: the
// writer goroutine, the request path, SQLite, the GC) and wall time (the
// queue's writer runs beside the producer, so its wall time hides what
// overlaps). For PostgreSQL the server's own CPU is not in the process's,
// so compare wall times there; bare-copy is COPY straight into records.
//
// The records come in two mixes. keys=1: one key, no tags (as
// BenchmarkSQLite_WriteRecords), so a batch adds two rollup rows. keys=50:
// fifty keys, a third of the records tagged (as
// BenchmarkPostgres_WriteRecords), so a batch of 500 adds 150 rollup rows,
// which the bare insert does not write.
//
//	go test ./store -run '^$' -bench AccountingWrite/SQLite -benchtime 20x
//	LLMFLOW_TEST_PG_DSN=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	  go test ./store -run '^$' -bench AccountingWrite/Postgres -benchtime 20x
func BenchmarkAccountingWrite(b *testing.B) {
	for _, keys := range []int{1, 50} {
		b.Run(fmt.Sprintf("SQLite/keys=%d", keys), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "llmflow.db")
			s := MustOpenSQLite(b, path)
			// The store's own connection settings (WAL is the file's).
			raw, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=10000&_synchronous=NORMAL&_txlock=immediate")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { raw.Close() })
			benchAccountingWrite(b, s, keys, map[string]bareInsert{"bare": sqliteBare(b, raw)})
		})
	}
	for _, keys := range []int{1, 50} {
		b.Run(fmt.Sprintf("Postgres/keys=%d", keys), func(b *testing.B) {
			dsn := pgSchema(b)
			s := MustOpenPostgres(b, dsn)
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { conn.Close(ctx) })
			benchAccountingWrite(b, s, keys, map[string]bareInsert{"bare": pgBare(b, conn), "bare-copy": pgBareCopy(conn)})
		})
	}
}

const (
	roundRecords = 5000 // per round and per contestant: 10 batches of 500
	bareBatch    = accounting.DefaultBatchSize
	// bareChunk is the rows per INSERT of the bare insert: from 32 to 500
	// the cost per record is the same within noise here.
	bareChunk = 64
)

// bareInsert inserts rs into records in one transaction.
type bareInsert func(ctx context.Context, rs []llmflow.Record) error

// countingWriter counts the store writes of the queue.
type countingWriter struct {
	accounting.Writer
	calls atomic.Int64
}

func (c *countingWriter) WriteRecords(ctx context.Context, rs []llmflow.Record) error {
	c.calls.Add(1)
	return c.Writer.WriteRecords(ctx, rs)
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeCostRecords are n records as the gateway writes them, over keys
// keys; with more than one, a third of them tagged.
func writeCostRecords(prefix string, n, keys int, start time.Time) []llmflow.Record {
	rs := benchRecords(prefix, n, start)
	if keys == 1 {
		return rs
	}
	for i := range rs {
		rs[i].KeyID = fmt.Sprintf("key_%02d", i%keys)
		if i%3 == 0 {
			rs[i].Tags = []string{"teaching"}
		}
	}
	return rs
}

func benchAccountingWrite(b *testing.B, w accounting.Writer, keys int, bares map[string]bareInsert) {
	ctx := context.Background()
	sp, _, err := spool.Open(b.TempDir(), spool.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var written, want atomic.Int64
	progress := make(chan struct{}, 1)
	cw := &countingWriter{Writer: w}
	q := accounting.New(cw, accounting.Options{Spool: sp, OnWrite: func(n, failed int) {
		if failed > 0 {
			b.Errorf("%d records failed", failed)
		}
		if written.Add(int64(n)) >= want.Load() {
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}})
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	type cost struct{ cpu, wall time.Duration }
	total := map[string]*cost{"queue": {}}
	for name := range bares {
		total[name] = &cost{}
	}
	// The records of each round are built outside the timings.
	round := func(i int) map[string][]llmflow.Record {
		m := map[string][]llmflow.Record{}
		for name := range total {
			m[name] = writeCostRecords(fmt.Sprintf("%s%d", name, i), roundRecords, keys, start.Add(time.Duration(i)*time.Minute))
		}
		return m
	}
	timed := func(name string, f func()) {
		c0, w0 := cpuNow(), time.Now()
		f()
		total[name].wall += time.Since(w0)
		total[name].cpu += cpuNow() - c0
	}
	runQueue := func(rs []llmflow.Record) {
		want.Add(int64(len(rs)))
		for _, r := range rs {
			if !q.Enqueue(r) {
				b.Fatal("record dropped")
			}
		}
		for written.Load() < want.Load() {
			<-progress
		}
	}
	runBare := func(f bareInsert, rs []llmflow.Record) {
		for i := 0; i < len(rs); i += bareBatch {
			if err := f(ctx, rs[i:min(i+bareBatch, len(rs))]); err != nil {
				b.Fatal(err)
			}
		}
	}
	names := []string{"queue"}
	for name := range bares {
		names = append(names, name)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		recs := round(i)
		b.StartTimer()
		for j := range names {
			name := names[(i+j)%len(names)] // each goes first in turn
			timed(name, func() {
				if name == "queue" {
					runQueue(recs[name])
				} else {
					runBare(bares[name], recs[name])
				}
			})
		}
	}
	b.StopTimer()
	if err := q.Close(ctx); err != nil {
		b.Fatal(err)
	}
	n := float64(b.N * roundRecords)
	for name, c := range total {
		prefix := name + "-"
		if name == "queue" {
			prefix = ""
		}
		b.ReportMetric(float64(c.cpu.Microseconds())/n, prefix+"cpu-µs/record")
		b.ReportMetric(float64(c.wall.Microseconds())/n, prefix+"wall-µs/record")
	}
	b.ReportMetric(n/float64(cw.calls.Load()), "records/write")
}

// sqliteBare is the bare insert on SQLite: multi-row INSERTs of bareChunk
// rows, the last chunk of a batch shorter, each size prepared once.
func sqliteBare(b *testing.B, db *sql.DB) bareInsert {
	db.SetMaxOpenConns(1)
	// Prepared up front: the one connection is the transaction's later.
	stmts := map[int]*sql.Stmt{}
	for _, n := range []int{bareChunk, bareBatch % bareChunk} {
		row := "(" + strings.Repeat("?,", 23) + "?)"
		st, err := db.Prepare(`INSERT INTO records (request_id, time, key_id, project, team, org, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours, status, outcome, estimated, stream, priority,
	latency_us, ttfb_us, tags, estimate_reason, preemptions, recomputed_tokens) VALUES ` + strings.TrimSuffix(strings.Repeat(row+",", n), ","))
		if err != nil {
			b.Fatal(err)
		}
		stmts[n] = st
	}
	b.Cleanup(func() {
		for _, st := range stmts {
			st.Close()
		}
	})
	prepared := func(n int) (*sql.Stmt, error) {
		if st := stmts[n]; st != nil {
			return st, nil
		}
		return nil, fmt.Errorf("no statement prepared for %d rows", n)
	}
	args := make([]any, 0, 24*bareChunk)
	return func(ctx context.Context, rs []llmflow.Record) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for i := 0; i < len(rs); i += bareChunk {
			chunk := rs[i:min(i+bareChunk, len(rs))]
			args = args[:0]
			for j := range chunk {
				r := &chunk[j]
				tags := "[]"
				if len(r.Tags) > 0 {
					t, _ := json.Marshal(r.Tags)
					tags = string(t)
				}
				args = append(args, r.RequestID, r.Time.UnixMicro(), r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream,
					r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours, int64(r.Status), string(r.Outcome), r.Estimated, r.Stream, int64(r.Priority),
					r.Latency.Microseconds(), r.TTFB.Microseconds(), tags, string(r.EstimateReason), int64(r.Preemptions), r.RecomputedTokens)
			}
			st, err := prepared(len(chunk))
			if err != nil {
				return err
			}
			txst := tx.Stmt(st)
			_, err = txst.ExecContext(ctx, args...)
			txst.Close()
			if err != nil {
				return err
			}
		}
		return tx.Commit()
	}
}

func pgRow(r *llmflow.Record) []any {
	tags := r.Tags
	if tags == nil {
		tags = []string{}
	}
	return []any{r.RequestID, time.UnixMicro(r.Time.UnixMicro()).UTC(), r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream,
		r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours, int64(r.Status), string(r.Outcome), r.Estimated, r.Stream, int64(r.Priority),
		r.Latency.Microseconds(), r.TTFB.Microseconds(), tags, string(r.EstimateReason), int64(r.Preemptions), r.RecomputedTokens}
}

var pgRecordColumns = []string{"request_id", "time", "key_id", "project", "team", "org", "model", "pool", "upstream",
	"prompt_tokens", "completion_tokens", "cached_tokens", "gpu_hours", "status", "outcome", "estimated", "stream", "priority",
	"latency_us", "ttfb_us", "tags", "estimate_reason", "preemptions", "recomputed_tokens"}

// pgBare is the bare insert on PostgreSQL: multi-row INSERTs of bareChunk
// rows (pgx prepares and caches the statement).
func pgBare(b *testing.B, conn *pgx.Conn) bareInsert {
	insert := func(n int) string {
		var sb strings.Builder
		sb.WriteString(`INSERT INTO records (` + strings.Join(pgRecordColumns, ", ") + `) VALUES `)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteByte('(')
			for c := range 24 {
				if c > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, "$%d", i*24+c+1)
			}
			sb.WriteByte(')')
		}
		return sb.String()
	}
	stmts := map[int]string{}
	args := make([]any, 0, 24*bareChunk)
	return func(ctx context.Context, rs []llmflow.Record) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for i := 0; i < len(rs); i += bareChunk {
				chunk := rs[i:min(i+bareChunk, len(rs))]
				args = args[:0]
				for j := range chunk {
					args = append(args, pgRow(&chunk[j])...)
				}
				q, ok := stmts[len(chunk)]
				if !ok {
					q = insert(len(chunk))
					stmts[len(chunk)] = q
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// pgBareCopy is COPY straight into records.
func pgBareCopy(conn *pgx.Conn) bareInsert {
	return func(ctx context.Context, rs []llmflow.Record) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"records"}, pgRecordColumns, pgx.CopyFromSlice(len(rs), func(i int) ([]any, error) {
				return pgRow(&rs[i]), nil
			}))
			return err
		})
	}
}
