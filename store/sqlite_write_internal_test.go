package store

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store/storetest"
)

// chunks covers every run length with the prepared sizes, largest first,
// and no statement binds more parameters than SQLite allows.
func TestChunksCoverEveryLength(t *testing.T) {
	for n := range 1000 {
		var sizes []int
		covered := 0
		err := chunks(make([]int, n), func(size int, run []int) error {
			if len(run) != chunkRows[size] {
				t.Fatalf("n=%d: run of %d for statement size %d", n, len(run), chunkRows[size])
			}
			sizes = append(sizes, len(run))
			covered += len(run)
			return nil
		})
		if err != nil || covered != n {
			t.Fatalf("n=%d: covered %d, %v", n, covered, err)
		}
		if !slices.IsSortedFunc(sizes, func(a, b int) int { return b - a }) {
			t.Fatalf("n=%d: sizes %v not largest first", n, sizes)
		}
		if len(sizes) > n/chunkRows[0]+3*(len(chunkRows)-1) {
			t.Fatalf("n=%d: %d statements", n, len(sizes))
		}
	}
	const sqliteMaxParams = 32766
	for _, c := range []struct {
		sql  string
		want int
	}{
		{insertRecordsSQL(chunkRows[0]), chunkRows[0] * recordColumns},
		{upsertRollupsSQL(chunkRows[0]), chunkRows[0] * rollupArgs},
		{upsertRollupsByTagSQL(chunkRows[0]), chunkRows[0] * rollupByTagArgs},
	} {
		if n := strings.Count(c.sql, "?"); n != c.want || n > sqliteMaxParams {
			t.Errorf("statement binds %d parameters, want %d (at most %d)", n, c.want, sqliteMaxParams)
		}
	}
}

// A batch far larger than any statement, some of whose records are stored
// already and some repeated within it, goes the careful way: each record
// is stored once (the first), in order, and rolled up once, however the
// batch splits into statements and look-ups.
func TestSQLiteWriteRecordsLargeBatchWithDuplicates(t *testing.T) {
	ctx := t.Context()
	s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hour0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	rec := func(i int, gpu float64) llmflow.Record {
		r := llmflow.Record{RequestID: fmt.Sprintf("r%05d", i), Time: hour0.Add(time.Duration(i) * time.Second),
			KeyID: fmt.Sprintf("k%03d", i%301), Org: fmt.Sprintf("o%d", i%7), Model: "m", Pool: "p",
			PromptTokens: int64(i), CompletionTokens: 1, GPUHours: gpu, Status: 200, Outcome: llmflow.OutcomeOK}
		if i%3 == 0 {
			r.Tags = []string{fmt.Sprintf("t%d", i%5), "x", fmt.Sprintf("t%d", i%5)}
		}
		return r
	}
	var first []llmflow.Record
	for i := 0; i < 3000; i += 2 {
		first = append(first, rec(i, 1))
	}
	if err := s.WriteRecords(ctx, first); err != nil {
		t.Fatal(err)
	}
	// Every record again (the even ones changed: the stored ones win),
	// and a few new ones twice within the batch.
	var batch []llmflow.Record
	for i := range 3000 {
		batch = append(batch, rec(i, 2))
	}
	batch = append(batch, rec(3000, 3), rec(3000, 4), rec(3001, 3))
	if err := s.WriteRecords(ctx, batch); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(first), batch...) // first write wins, in this order
	got, err := s.Records(ctx, hour0.Add(-time.Hour), hour0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3002 {
		t.Fatalf("%d records stored, want 3002", len(got))
	}
	for _, r := range got {
		i := 0
		fmt.Sscanf(r.RequestID, "r%05d", &i)
		if wantGPU := map[bool]float64{true: 1, false: 2}[i%2 == 0]; i < 3000 && r.GPUHours != wantGPU || i == 3000 && r.GPUHours != 3 {
			t.Fatalf("record %s stored with %v GPU-hours: not the first write", r.RequestID, r.GPUHours)
		}
	}
	approx := cmpopts.EquateApprox(1e-12, 1e-9)
	from, to := hour0.Add(-time.Hour), hour0.Add(24*time.Hour)
	rolls, err := s.Rollups(ctx, from, to, llmflow.RollupFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(storetest.ExpectRollups(want, nil, false, false), rolls, approx); diff != "" {
		t.Errorf("rollups (-want +got):\n%s", diff)
	}
	byTag, err := s.RollupsByTag(ctx, from, to, llmflow.RollupFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(storetest.ExpectRollups(want, nil, true, false), byTag, approx); diff != "" {
		t.Errorf("rollups by tag (-want +got):\n%s", diff)
	}
	if len(rolls) < 2*chunkRows[0] {
		t.Errorf("only %d rollup rows: the test does not split the rollup statements", len(rolls))
	}
}

// encodeTags writes what encoding/json writes, by hand for plain tags.
func FuzzEncodeTags(f *testing.F) {
	for _, s := range []string{"teaching", "", "a<b", `q"`, "é", "\x00", "a b-c_d.e"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, tags := range [][]string{{a}, {a, b}, {b, a, a}} {
			got, err := encodeTags(tags)
			want, werr := json.Marshal(tags)
			if err != nil || werr != nil || got != string(want) {
				t.Fatalf("encodeTags(%q) = %q, %v; json %q", tags, got, err, want)
			}
		}
	})
}
