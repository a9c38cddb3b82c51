package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/progress"
	"github.com/go-llmflow/llmflow/reports"
	"github.com/go-llmflow/llmflow/store"
)

// tickingSpend is a store whose Spend lets the meter's ticker fire once
// before it answers: the line of a query that takes more than a second.
type tickingSpend struct {
	spendReader
	ticks chan<- time.Time
}

func (s tickingSpend) Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	s.ticks <- time.Now()
	return s.spendReader.Spend(ctx, from, to, f)
}

// TestExportProgress: an export over several months prints the same bytes
// with progress drawn (a terminal) as without (a pipe), in every format,
// and the line drawn is the time its one query takes, with no count.
func TestExportProgress(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	from := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 5, 0)
	var recs []llmflow.Record
	for i, at := 0, from; at.Before(to); i, at = i+1, at.Add(3*time.Hour+7*time.Minute) {
		team := []string{"lab-nlp", "lab-chem", "lab-bio"}[i%3]
		recs = append(recs, llmflow.Record{Time: at, RequestID: fmt.Sprintf("r%d", i), KeyID: "k" + team, Org: "etaba", Team: team,
			Project: []string{"", "p1"}[i%2], Model: "m", Pool: "p", GPUHours: 0.1 * float64(i%7) / 3, PromptTokens: int64(i),
			Status: 200, Outcome: llmflow.OutcomeOK, Tags: []string{"t" + fmt.Sprint(i%2)}})
	}
	if err := db.WriteRecords(ctx, recs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		groupBy, format string
	}{
		{"org,team", "csv"},
		{"team,project", "json"},
		{"tag,team", "parsable2"},
	} {
		t.Run(tc.groupBy+"/"+tc.format, func(t *testing.T) {
			dims, err := reports.ParseGroupBy(tc.groupBy)
			if err != nil {
				t.Fatal(err)
			}
			f := llmflow.RollupFilter{GroupBy: dims, Total: true}
			export := func(m *progress.Meter, db spendReader) string {
				t.Helper()
				rows, err := readSpend(ctx, db, from, to, f, m)
				m.Done()
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) < 2 {
					t.Fatalf("%d rows", len(rows))
				}
				var b bytes.Buffer
				if err := reports.WriteSpend(&b, rows, dims, tc.format, from, to); err != nil {
					t.Fatal(err)
				}
				return b.String()
			}
			piped := export(nil, db)
			var line bytes.Buffer
			ticks := make(chan time.Time)
			m := progress.NewAlwaysTicks(&line, exportWhat(from, to), "hours", 0, ticks)
			if got := export(m, tickingSpend{db, ticks}); got != piped {
				t.Errorf("on a terminal:\n%s\npiped:\n%s", got, piped)
			}
			// the time elapsed, whatever it is: no count, rate or time left
			want := regexp.MustCompile(`^\r\x1b\[Kexport, one query over 3672 hours of rollups \(2026-07-01T00:00:00Z to 2026-12-01T00:00:00Z\): [0-9.]+m?s\r\x1b\[K$`)
			if got := line.String(); !want.MatchString(got) {
				t.Errorf("drew %q, want %s", got, want)
			}
		})
	}
}
