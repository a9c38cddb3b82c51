package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/progress"
	"github.com/go-llmflow/llmflow/store"
	"github.com/google/go-cmp/cmp"
)

// TestReadRollupsChunked: read a week at a time (progress on a terminal),
// the rollups of a month are those of one read, in the same order; the
// meter counts the hours read.
func TestReadRollupsChunked(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	var recs []llmflow.Record
	for i, at := 0, from; at.Before(to); i, at = i+1, at.Add(5*time.Hour+17*time.Minute) {
		team := []string{"lab-nlp", "lab-chem", "lab-bio"}[i%3]
		recs = append(recs, llmflow.Record{Time: at, RequestID: fmt.Sprintf("r%d", i), KeyID: "k" + team, Org: "etaba", Team: team,
			Project: []string{"", "p1"}[i%2], Model: "m", Pool: "p", GPUHours: 0.125 * float64(i%7), PromptTokens: int64(i), Status: 200, Outcome: llmflow.OutcomeOK})
	}
	if err := db.WriteRecords(ctx, recs); err != nil {
		t.Fatal(err)
	}
	f := llmflow.RollupFilter{GroupBy: []string{"team", "project", "owner"}}
	whole, err := readRollups(ctx, db, from, to, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	m := progress.NewAlways(&b, "report", "hours", 0)
	chunked, err := readRollups(ctx, db, from, to, f, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) < 100 {
		t.Fatalf("%d rollups", len(whole))
	}
	if diff := cmp.Diff(whole, chunked); diff != "" {
		t.Errorf("chunked read differs (-whole +chunked):\n%s", diff)
	}
	if got := b.String(); !strings.Contains(got, "reading rollups: 744/744 hours (100%)") {
		t.Errorf("meter drew %q", got)
	}
}
