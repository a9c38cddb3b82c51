package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow"
)

// Benchmarks of the accounting path and of the monthly rollup queries.
// The generated data sets are only built under -bench:
//
//	LLMFLOW_TEST_PG_DSN=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	  go test ./store -run '^$' -bench 'WriteRecords|RollupMonth' -benchtime 10x
//
// LLMFLOW_BENCH_PG_RECORDS (default 10,000,000) and
// LLMFLOW_BENCH_SQLITE_RECORDS (default 1,000,000) set the sizes.

// BenchmarkPostgres_WriteRecords measures sustained accounting into
// PostgreSQL: batches of 500 (the default store batch_size), COPY, the
// idempotent insert and the rollups, one writer (as one gateway) and four
// (as several gateways sharing the database).
func BenchmarkPostgres_WriteRecords(b *testing.B) {
	const batch = 500
	s := MustOpenPostgres(b, pgSchema(b))
	ctx := context.Background()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var seq atomic.Int64
	next := func() []llmflow.Record {
		rs := benchRecords(fmt.Sprintf("b%d", seq.Add(1)), batch, start)
		for i := range rs {
			rs[i].Tags = []string{"teaching"}
			rs[i].KeyID = fmt.Sprintf("key_%d", i%50)
		}
		return rs
	}
	b.Run("Serial", func(b *testing.B) {
		n := 0
		for b.Loop() {
			b.StopTimer()
			rs := next()
			b.StartTimer()
			if err := s.WriteRecords(ctx, rs); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("Parallel4", func(b *testing.B) {
		var n atomic.Int64
		b.SetParallelism(2) // 2 × GOMAXPROCS(2) = 4 writers
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.WriteRecords(ctx, next()); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
		b.ReportMetric(float64(n.Load()*batch)/b.Elapsed().Seconds(), "records/s")
	})
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// genMonth is the month the generated records span.
var genMonth = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

// The generated population: 200 keys (10 orgs × 5 teams × 4 projects, 50
// owners), 4 models on 2 pools, a third of the requests untagged, a third
// "teaching", a third "research" and "gpu".
const genKeys = 200

// benchRollupQueries runs the monthly queries a report makes.
func benchRollupQueries(b *testing.B, rollups, byTag func(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error), n int) {
	ctx := context.Background()
	from, to := genMonth, genMonth.AddDate(0, 1, 0)
	for _, q := range []struct {
		name  string
		byTag bool
		f     llmflow.RollupFilter
	}{
		{"OrgTeam", false, llmflow.RollupFilter{GroupBy: []string{"org", "team"}, Total: true}},
		{"ProjectOwner", false, llmflow.RollupFilter{GroupBy: []string{"org", "team", "project", "owner"}, Total: true}},
		{"PoolHourly", false, llmflow.RollupFilter{GroupBy: []string{"pool"}}},
		{"OneOrgByKeyModel", false, llmflow.RollupFilter{Org: "org3", GroupBy: []string{"key", "model"}, Total: true}},
		{"Tag", true, llmflow.RollupFilter{GroupBy: []string{"tag"}, Total: true}},
		{"TagOrg", true, llmflow.RollupFilter{GroupBy: []string{"tag", "org"}, Total: true}},
	} {
		b.Run(q.name, func(b *testing.B) {
			read := rollups
			if q.byTag {
				read = byTag
			}
			var rows int
			for b.Loop() {
				rs, err := read(ctx, from, to, q.f)
				if err != nil {
					b.Fatal(err)
				}
				rows = len(rs)
				var total int64
				for _, r := range rs {
					total += r.Requests
				}
				if !q.byTag && q.f.Org == "" && total != int64(n) {
					b.Fatalf("rollups count %d requests, want %d", total, n)
				}
			}
			b.ReportMetric(float64(rows), "rows")
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/query")
		})
	}
}

// BenchmarkPostgres_RollupMonth generates a month of records (10 million
// by default) with one INSERT … SELECT generate_series, rolls them up as
// WriteRecords would, then times the month's grouped queries.
func BenchmarkPostgres_RollupMonth(b *testing.B) {
	n := envInt("LLMFLOW_BENCH_PG_RECORDS", 10_000_000)
	dsn := pgSchema(b)
	s := MustOpenPostgres(b, dsn)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	t0 := time.Now()
	step := genMonth.AddDate(0, 1, 0).Sub(genMonth).Microseconds() / int64(n)
	for _, q := range []string{
		`SET maintenance_work_mem = '256MB'`,
		`SET work_mem = '64MB'`,
		fmt.Sprintf(`INSERT INTO keys (id, hash, org, team, project, owner, created_at)
SELECT 'key_' || k, sha256(('k' || k)::bytea), 'org' || (k / 20), 'team' || (k / 4 %% 5), 'proj' || (k %% 4), 'user' || (k %% 50), now()
FROM generate_series(0, %d) k`, genKeys-1),
		fmt.Sprintf(`INSERT INTO records (request_id, time, key_id, org, team, project, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours, status, outcome, estimated, stream, latency_us, tags)
SELECT 'gen-' || i, $1::timestamptz + (i * %d) * interval '1 microsecond',
	'key_' || k, 'org' || (k / 20), 'team' || (k / 4 %% 5), 'proj' || (k %% 4),
	'model-' || m, 'pool-' || (m %% 2), 'u', 200 + i %% 1000, 50 + i %% 300, i %% 64, (1 + i %% 17) * 1e-4,
	200, 'ok', i %% 50 = 0, true, 1500000,
	CASE i %% 3 WHEN 0 THEN '{}'::text[] WHEN 1 THEN '{teaching}' ELSE '{research,gpu}' END
FROM generate_series(0, %d::bigint) i, LATERAL (SELECT i %% %d AS k, (i / %d) %% 4 AS m) d`, step, n-1, genKeys, genKeys),
		`INSERT INTO rollups
SELECT date_trunc('hour', r.time, 'UTC'), r.org, r.team, r.project, r.key_id, COALESCE(k.owner, ''), r.model, r.pool,
	count(*), sum(r.prompt_tokens), sum(r.completion_tokens), sum(r.cached_tokens), sum(r.gpu_hours), count(*) FILTER (WHERE r.estimated)
FROM records r LEFT JOIN keys k ON k.id = r.key_id GROUP BY 1, 2, 3, 4, 5, 6, 7, 8`,
		`INSERT INTO rollups_by_tag
SELECT date_trunc('hour', r.time, 'UTC'), t.tag, r.org, r.team, r.project, r.key_id, COALESCE(k.owner, ''), r.model, r.pool,
	count(*), sum(r.prompt_tokens), sum(r.completion_tokens), sum(r.cached_tokens), sum(r.gpu_hours), count(*) FILTER (WHERE r.estimated)
FROM records r LEFT JOIN keys k ON k.id = r.key_id
CROSS JOIN LATERAL (SELECT DISTINCT u FROM unnest(CASE WHEN cardinality(r.tags) = 0 THEN ARRAY['']::text[] ELSE r.tags END) u) t(tag)
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9`,
		`VACUUM ANALYZE records`,
		`VACUUM ANALYZE rollups`,
		`VACUUM ANALYZE rollups_by_tag`,
	} {
		var args []any
		if len(q) > 20 && q[:19] == "INSERT INTO records" {
			args = []any{genMonth}
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			b.Fatalf("generate: %v\n%s", err, q)
		}
	}
	var rollups, tagRollups int64
	conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM rollups), (SELECT count(*) FROM rollups_by_tag)`).Scan(&rollups, &tagRollups)
	b.Logf("generated %d records, %d rollups, %d tag rollups in %v", n, rollups, tagRollups, time.Since(t0).Round(time.Second))
	benchRollupQueries(b, s.Rollups, s.RollupsByTag, n)
}

// BenchmarkSQLite_RollupMonth is the same on SQLite, with 1 million
// records by default: generating 10 million in SQLite takes minutes per
// run (set LLMFLOW_BENCH_SQLITE_RECORDS=10000000 to try).
func BenchmarkSQLite_RollupMonth(b *testing.B) {
	n := envInt("LLMFLOW_BENCH_SQLITE_RECORDS", 1_000_000)
	path := filepath.Join(b.TempDir(), "llmflow.db")
	s := MustOpenSQLite(b, path)
	db, err := sql.Open("sqlite", path+"?_busy_timeout=10000&_journal_mode=WAL")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	t0 := time.Now()
	start := genMonth.UnixMicro()
	step := genMonth.AddDate(0, 1, 0).Sub(genMonth).Microseconds() / int64(n)
	for _, q := range []string{
		`PRAGMA cache_size = -262144`,
		fmt.Sprintf(`INSERT INTO keys (id, hash, org, team, project, owner, created_at)
WITH RECURSIVE g(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM g WHERE k < %d)
SELECT 'key_' || k, randomblob(32), 'org' || (k / 20), 'team' || (k / 4 %% 5), 'proj' || (k %% 4), 'user' || (k %% 50), 0 FROM g`, genKeys-1),
		fmt.Sprintf(`INSERT INTO records (request_id, time, key_id, org, team, project, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours, status, outcome, estimated, stream, latency_us, tags)
WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < %d)
SELECT 'gen-' || i, %d + i * %d, 'key_' || (i %% %d), 'org' || (i %% %d / 20), 'team' || (i %% %d / 4 %% 5), 'proj' || (i %% %d %% 4),
	'model-' || (i / %d %% 4), 'pool-' || (i / %d %% 4 %% 2), 'u', 200 + i %% 1000, 50 + i %% 300, i %% 64, (1 + i %% 17) * 1e-4,
	200, 'ok', i %% 50 = 0, 1, 1500000,
	CASE i %% 3 WHEN 0 THEN '[]' WHEN 1 THEN '["teaching"]' ELSE '["research","gpu"]' END
FROM g`, n-1, start, step, genKeys, genKeys, genKeys, genKeys, genKeys, genKeys),
		`INSERT INTO rollups
SELECT r.time - ((r.time % 3600000000) + 3600000000) % 3600000000, r.org, r.team, r.project, r.key_id, COALESCE(k.owner, ''), r.model, r.pool,
	count(*), sum(r.prompt_tokens), sum(r.completion_tokens), sum(r.cached_tokens), sum(r.gpu_hours), sum(r.estimated)
FROM records r LEFT JOIN keys k ON k.id = r.key_id GROUP BY 1, 2, 3, 4, 5, 6, 7, 8`,
		`INSERT INTO rollups_by_tag
SELECT r.time - ((r.time % 3600000000) + 3600000000) % 3600000000, t.tag, r.org, r.team, r.project, r.key_id, COALESCE(k.owner, ''), r.model, r.pool,
	count(*), sum(r.prompt_tokens), sum(r.completion_tokens), sum(r.cached_tokens), sum(r.gpu_hours), sum(r.estimated)
FROM (SELECT DISTINCT r.request_id, j.value AS tag FROM records r, json_each(r.tags) j
	UNION ALL SELECT request_id, '' FROM records WHERE tags = '[]') t
JOIN records r ON r.request_id = t.request_id
LEFT JOIN keys k ON k.id = r.key_id
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9`,
		// No ANALYZE: the store never runs it, so the planner works
		// without statistics, as in production.
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatalf("generate: %v\n%s", err, q)
		}
	}
	var rollups, tagRollups int64
	db.QueryRow(`SELECT (SELECT count(*) FROM rollups), (SELECT count(*) FROM rollups_by_tag)`).Scan(&rollups, &tagRollups)
	b.Logf("generated %d records, %d rollups, %d tag rollups in %v", n, rollups, tagRollups, time.Since(t0).Round(time.Second))
	benchRollupQueries(b, s.Rollups, s.RollupsByTag, n)
}
