package store

import (
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// The two backends as the shared SQL sees them (no database behind).
var (
	sqliteSQL   = newSQLiteDB(nil, nil, nil)
	postgresSQL = newPostgresDB(&Postgres{})
)

func TestRebind(t *testing.T) {
	for q, want := range map[string]string{
		"SELECT 1":                      "SELECT 1",
		"a = ? AND b IN (?, ?) LIMIT ?": "a = $1 AND b IN ($2, $3) LIMIT $4",
		"x = ? -- ∑ é":                  "x = $1 -- ∑ é",
		params(12):                      "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12",
	} {
		if got := rebind(q); got != want {
			t.Errorf("rebind(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestRollupQuery(t *testing.T) {
	from := time.Date(2026, 10, 1, 0, 0, 0, 1, time.UTC) // rounded up to the next microsecond
	to := from.AddDate(0, 1, 0)
	f := llmflow.RollupFilter{Org: "org3", GroupBy: []string{"org", "team"}, Total: true}

	q, args, err := sqliteSQL.rollupQuery(false, f, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := "SELECT NULL, '', org, team, '', '', '', '', '', sum(requests), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(gpu_hours), sum(estimated_requests)" +
		" FROM (SELECT hour, org, team, sum(requests) AS requests, sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens," +
		" sum(cached_tokens) AS cached_tokens, sum(gpu_hours) AS gpu_hours, sum(estimated_requests) AS estimated_requests" +
		" FROM rollups WHERE hour >= ? AND hour < ? AND org = ? GROUP BY hour, org, team) GROUP BY org, team ORDER BY org, team"
	if q != want {
		t.Errorf("sqlite query:\n got %s\nwant %s", q, want)
	}
	if len(args) != 3 || args[0] != from.UnixMicro()+1 || args[1] != to.UnixMicro()+1 || args[2] != "org3" {
		t.Errorf("sqlite args = %v", args)
	}

	q, args, err = postgresSQL.rollupQuery(true, f, from, to)
	if err != nil {
		t.Fatal(err)
	}
	q = rebind(q)
	want = "SELECT NULL::timestamptz, '', org, team, '', '', '', '', '', sum(requests)::bigint, sum(prompt_tokens)::bigint," +
		" sum(completion_tokens)::bigint, sum(cached_tokens)::bigint, sum(gpu_hours), sum(estimated_requests)::bigint" +
		" FROM rollups_by_tag WHERE hour >= $1 AND hour < $2 AND org = $3 GROUP BY org, team ORDER BY org, team"
	if q != want {
		t.Errorf("postgres query:\n got %s\nwant %s", q, want)
	}
	if len(args) != 3 || args[0] != pgBound(from) || args[1] != pgBound(to) {
		t.Errorf("postgres args = %v", args)
	}
}

func TestRollupQueryErrInvalid(t *testing.T) {
	for _, c := range []struct {
		name  string
		byTag bool
		f     llmflow.RollupFilter
		param string
	}{
		{"UnknownDimension", true, llmflow.RollupFilter{GroupBy: []string{"cluster"}}, "group_by"},
		{"TagWithoutTags", false, llmflow.RollupFilter{GroupBy: []string{"tag"}}, "group_by"},
		{"TagFilterWithoutTags", false, llmflow.RollupFilter{Tag: "x"}, "tag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := sqliteSQL.rollupQuery(c.byTag, c.f, time.Time{}, time.Time{})
			e, ok := err.(*llmflow.Error)
			if !ok || e.Code != llmflow.EINVALID || e.Param != c.param {
				t.Fatalf("err = %v, want EINVALID on %s", err, c.param)
			}
			if _, known, _ := strings.Cut(e.Message, "known:"); !c.byTag && strings.Contains(known, "tag") {
				t.Errorf("message %q lists tag for the plain rollups", e.Message)
			}
		})
	}
}

func TestListKeysQuery(t *testing.T) {
	q, args := listKeysQuery(llmflow.KeyFilter{Org: "a", Team: "b"})
	want := "SELECT " + keyColumns + " FROM keys WHERE org = $1 AND team = $2 AND revoked_at IS NULL ORDER BY created_at, id"
	if q = rebind(q); q != want || len(args) != 2 {
		t.Errorf("postgres: got %s %v\nwant %s", q, args, want)
	}
	q, args = listKeysQuery(llmflow.KeyFilter{Team: "b", IncludeRevoked: true})
	want = "SELECT " + keyColumns + " FROM keys WHERE team = ? ORDER BY created_at, id"
	if q != want || len(args) != 1 {
		t.Errorf("sqlite: got %s %v\nwant %s", q, args, want)
	}
}

// BenchmarkRollupQuery measures building the SQL of a report's rollup
// query, for each backend.
func BenchmarkRollupQuery(b *testing.B) {
	f := llmflow.RollupFilter{Org: "org3", GroupBy: []string{"org", "team", "project", "owner"}, Total: true}
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	for _, d := range []struct {
		name string
		d    *sqlDB
	}{{"SQLite", sqliteSQL}, {"Postgres", postgresSQL}} {
		b.Run(d.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.d.rollupQuery(true, f, from, to); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
