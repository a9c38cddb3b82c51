//go:build unix

package store_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
)

// The database file and its -wal and -shm are created 0600, whatever the
// umask (here 0, which would otherwise give 0644).
func TestSQLiteFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "llmflow.db")
	ctx := context.Background()
	s, err := store.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := llmflow.Record{Time: time.Now(), RequestID: "req_mode", Org: "o", Team: "t", Model: "m", Pool: "p", Status: 200, Outcome: llmflow.OutcomeOK}
	if err := s.WriteRecords(ctx, []llmflow.Record{rec}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: mode %o, want 600", filepath.Base(p), m)
		}
	}
}
