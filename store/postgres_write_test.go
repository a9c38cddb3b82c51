package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Tags go to PostgreSQL as array literals: any string comes back as it
// was, and is rolled up under itself.
func TestPostgres_WriteRecordsTagsAnyString(t *testing.T) {
	s := MustOpenPostgres(t, pgSchema(t))
	ctx := t.Context()
	at := time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)
	odd := []string{"a,b", "{x}", `"q"`, `back\slash`, "NULL", "", " spaced ", "é\u00a0ü", `\"{,}`}
	rs := []llmflow.Record{
		{RequestID: "odd", Time: at, Tags: odd},
		{RequestID: "none", Time: at},
		{RequestID: "empty", Time: at, Tags: []string{}},
	}
	if err := s.WriteRecords(ctx, rs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Records(ctx, at, at.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string][]string{}
	for _, r := range got {
		tags[r.RequestID] = r.Tags
	}
	if !slices.Equal(tags["odd"], odd) || len(tags["none"]) != 0 || len(tags["empty"]) != 0 || len(got) != 3 {
		t.Fatalf("tags read back: %q", tags)
	}
	byTag, err := s.RollupsByTag(ctx, at, at.Add(time.Hour), llmflow.RollupFilter{GroupBy: []string{"tag"}})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int64{}
	for _, r := range byTag {
		n[r.Tag] += r.Requests
	}
	for _, tag := range odd {
		want := int64(1)
		if tag == "" {
			want = 3 // and the two untagged records
		}
		if n[tag] != want {
			t.Errorf("tag %q rolled up %d times, want %d (all: %v)", tag, n[tag], want, n)
		}
	}
}
