package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/store"
)

// TestProbeSQLite: a missing file is reported as such and not created; a
// migrated file is at the latest version; the probe changes nothing.
func TestProbeSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "llmflow.db")
	sc, err := store.ProbeSQLite(ctx, path)
	if err != nil || !sc.Missing || sc.Latest == 0 || sc.Pending() != sc.Latest {
		t.Fatalf("missing file: %+v, %v", sc, err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the probe created the file")
	}
	if _, err := store.ProbeSQLite(ctx, filepath.Join(t.TempDir(), "nodir", "x.db")); err == nil {
		t.Error("a file in a missing directory: no error")
	}
	s, err := store.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	sc, err = store.ProbeSQLite(ctx, path)
	if err != nil || sc.Missing || sc.Version != sc.Latest || sc.Pending() != 0 || sc.TooNew() {
		t.Fatalf("migrated file: %+v, %v", sc, err)
	}
}

// TestProbePostgres: a fresh schema has every migration pending, a
// migrated one none; the database's clock is read; a DSN that does not
// connect is an error without its password.
func TestProbePostgres(t *testing.T) {
	ctx := context.Background()
	dsn := pgSchema(t)
	sc, err := store.ProbePostgres(ctx, dsn)
	if err != nil || sc.Version != 0 || sc.Pending() == 0 {
		t.Fatalf("fresh schema: %+v, %v", sc, err)
	}
	if d := time.Since(sc.Now); d > time.Minute || d < -time.Minute {
		t.Errorf("database clock %v, far from ours", sc.Now)
	}
	MustOpenPostgres(t, dsn)
	if sc, err = store.ProbePostgres(ctx, dsn); err != nil || sc.Pending() != 0 || sc.TooNew() {
		t.Fatalf("migrated schema: %+v, %v", sc, err)
	}
	const secret = "hunter2-Secret"
	_, err = store.ProbePostgres(ctx, "postgres://llmflow:"+secret+"@127.0.0.1:1/x?connect_timeout=2")
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("unreachable database: %v", err)
	}
}
