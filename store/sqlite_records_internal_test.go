package store

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// A batch that fails is not stored, so its clamped records are not
// counted by ClampedRecords: only a committed batch counts.
func TestSQLiteClampedCountsOnlyCommitted(t *testing.T) {
	ctx := t.Context()
	s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Make the batch fail after its records were clamped and staged.
	if _, err := s.write.ExecContext(ctx, `CREATE TRIGGER boom BEFORE INSERT ON records
WHEN NEW.request_id = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	rec := func(id string, prompt int64) llmflow.Record {
		return llmflow.Record{RequestID: id, Time: time.Now(), Org: "o", Team: "t", Model: "m", Pool: "p",
			Status: 200, Outcome: llmflow.OutcomeOK, PromptTokens: prompt}
	}
	if err := s.WriteRecords(ctx, []llmflow.Record{rec("bad", -1), rec("boom", 1)}); err == nil {
		t.Fatal("WriteRecords: no error from the failing batch")
	}
	if n := s.ClampedRecords(); n != 0 {
		t.Errorf("ClampedRecords = %d after a failed batch, want 0", n)
	}
	if err := s.WriteRecords(ctx, []llmflow.Record{rec("bad", -1)}); err != nil {
		t.Fatal(err)
	}
	if n := s.ClampedRecords(); n != 1 {
		t.Errorf("ClampedRecords = %d after one clamped record, want 1", n)
	}
}

// recordColumns, the parameters of one inserted row, are recordCols, which
// both backends read and write.
func TestSQLiteRecordColumns(t *testing.T) {
	if n := len(strings.Split(recordCols, ",")); n != recordColumns {
		t.Errorf("recordCols = %d columns, recordColumns = %d", n, recordColumns)
	}
	if n := strings.Count(insertRecordsSQL(2), "?"); n != 2*recordColumns {
		t.Errorf("insertRecordsSQL(2) binds %d parameters, want %d", n, 2*recordColumns)
	}
}
