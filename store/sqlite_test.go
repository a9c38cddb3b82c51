package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/store/storetest"
	"github.com/google/go-cmp/cmp"
)

var _ storetest.Store = (*store.SQLite)(nil)

// MustOpenSQLite opens a store at path and closes it when the test ends.
func MustOpenSQLite(tb testing.TB, path string) *store.SQLite {
	tb.Helper()
	s, err := store.OpenSQLite(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// rawDB opens the file with the bare driver, behind the store's back.
func rawDB(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", path+"?_busy_timeout=10000")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		return MustOpenSQLite(t, filepath.Join(t.TempDir(), "llmflow.db"))
	})
}

type migrationRow struct {
	Version   int
	AppliedAt int64
}

func migrationRows(t *testing.T, path string) []migrationRow {
	t.Helper()
	rows, err := rawDB(t, path).Query(`SELECT version, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ms []migrationRow
	for rows.Next() {
		var m migrationRow
		if err := rows.Scan(&m.Version, &m.AppliedAt); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestOpenSQLite_ReopenAppliesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmflow.db")
	s := MustOpenSQLite(t, path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	first := migrationRows(t, path)
	if len(first) == 0 || first[0].Version != 1 {
		t.Fatalf("schema_migrations after first open: %+v", first)
	}
	for i := range first {
		if first[i].Version != i+1 {
			t.Errorf("schema_migrations: %+v, want versions 1..n", first)
		}
	}
	time.Sleep(2 * time.Millisecond) // a re-applied migration would get a new applied_at
	MustOpenSQLite(t, path).Close()
	MustOpenSQLite(t, path).Close()
	if diff := cmp.Diff(first, migrationRows(t, path)); diff != "" {
		t.Errorf("schema_migrations changed by re-opening (-before +after):\n%s", diff)
	}
}

func TestOpenSQLite_ErrSchemaTooNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmflow.db")
	MustOpenSQLite(t, path).Close()
	if _, err := rawDB(t, path).Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenSQLite(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("OpenSQLite on a newer schema: nil error")
	}
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("error %q does not wrap ErrSchemaTooNew", err)
	}
	for _, want := range []string{"open sqlite store", "9999"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestOpenSQLite_WAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmflow.db")
	s := MustOpenSQLite(t, path)
	if err := s.WriteRecords(t.Context(), []llmflow.Record{{RequestID: "r", Time: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := rawDB(t, path).QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("no WAL file while the store is open: %v", err)
	}
}

func TestOpenSQLite_Reopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmflow.db")
	created := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	k := storetest.NewKey("persist", created)
	k.Tags = []string{"x"}
	rs := []llmflow.Record{
		{RequestID: "r1", Time: created, KeyID: k.ID, PromptTokens: 10, GPUHours: 0.5, Outcome: llmflow.OutcomeOK},
		{RequestID: "r2", Time: created.Add(time.Second), KeyID: k.ID, Stream: true},
	}

	s := MustOpenSQLite(t, path)
	if err := s.CreateKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRecords(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = MustOpenSQLite(t, path)
	got, err := s.KeyByHash(t.Context(), k.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k, got); diff != "" {
		t.Errorf("key after reopen (-want +got):\n%s", diff)
	}
	gotRs, err := s.Records(t.Context(), created, created.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rs, gotRs); diff != "" {
		t.Errorf("records after reopen (-want +got):\n%s", diff)
	}
}

func TestOpenSQLite_Errors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"MissingDirectory", filepath.Join(dir, "missing", "llmflow.db"), "no such file or directory"},
		{"Directory", dir, "is a directory"},
		{"Empty", "", "empty path"},
		{"NotADatabase", garbage, "not a database"},
		{"Memory", ":memory:", "must name a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := store.OpenSQLite(t.Context(), tt.path)
			if err == nil {
				s.Close()
				t.Fatal("nil error")
			}
			t.Log(err)
			if !strings.HasPrefix(err.Error(), "open sqlite store: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want prefix %q and %q", err, "open sqlite store: ", tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing directory created: %v", err)
	}
}

func TestOpenSQLite_PathNeedsEscaping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a?b#c%20d.db")
	s := MustOpenSQLite(t, path)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at the given path: %v", err)
	}
}

// TestSQLite_TwoStoresOneFile stands for two processes sharing a file:
// their writes contend for SQLite's lock, not only for the write pool.
func TestSQLite_TwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmflow.db")
	stores := []*store.SQLite{MustOpenSQLite(t, path), MustOpenSQLite(t, path)}
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range 8 {
		s := stores[g%2]
		wg.Go(func() {
			for b := range 5 {
				rs := make([]llmflow.Record, 50)
				for i := range rs {
					rs[i] = llmflow.Record{RequestID: fmt.Sprintf("g%d-b%d-%d", g, b, i), Time: base.Add(time.Duration(i) * time.Second)}
				}
				if err := s.WriteRecords(t.Context(), rs); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	got, err := stores[1].Records(t.Context(), base, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8*5*50 {
		t.Errorf("Records: %d, want %d", len(got), 8*5*50)
	}
}

func benchRecords(prefix string, n int, start time.Time) []llmflow.Record {
	rs := make([]llmflow.Record, n)
	for i := range rs {
		rs[i] = llmflow.Record{
			Time: start.Add(time.Duration(i) * time.Millisecond), RequestID: fmt.Sprintf("%s-%06d", prefix, i),
			KeyID: "key_0123456789abcdef", Project: "p", Team: "t", Org: "o", Model: "llama-3.1-70b", Pool: "h100", Upstream: "vllm-1",
			PromptTokens: 812, CompletionTokens: 211, CachedTokens: 64, GPUHours: 0.00042,
			Status: 200, Outcome: llmflow.OutcomeOK, Stream: true, Priority: 1,
			Latency: 2300 * time.Millisecond, TTFB: 180 * time.Millisecond,
		}
	}
	return rs
}

func BenchmarkSQLite_WriteRecords(b *testing.B) {
	const batch = 500
	s := MustOpenSQLite(b, filepath.Join(b.TempDir(), "llmflow.db"))
	ctx := context.Background()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	// Records built up front, fresh IDs for every batch.
	var batches [][]llmflow.Record
	next := func(i int) []llmflow.Record {
		for len(batches) <= i {
			batches = append(batches, benchRecords(fmt.Sprintf("b%d", len(batches)), batch, start))
		}
		return batches[i]
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		b.StopTimer()
		rs := next(n)
		b.StartTimer()
		if err := s.WriteRecords(ctx, rs); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkSQLite_KeyByHash(b *testing.B) {
	s := MustOpenSQLite(b, filepath.Join(b.TempDir(), "llmflow.db"))
	ctx := context.Background()
	keys := make([]llmflow.Key, 1000)
	for i := range keys {
		keys[i] = storetest.NewKey(fmt.Sprintf("bench-%d", i), time.Now())
		keys[i].Tags = []string{"a", "b"}
		if err := s.CreateKey(ctx, keys[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.KeyByHash(ctx, keys[i%len(keys)].Hash); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := s.KeyByHash(ctx, keys[i%len(keys)].Hash); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

func TestSQLite_Accounts(t *testing.T) {
	storetest.RunAccounts(t, func(t *testing.T) storetest.AccountStore {
		s, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "llmflow.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

var _ storetest.OutboxStore = (*store.SQLite)(nil)

func TestSQLite_Outbox(t *testing.T) {
	storetest.RunOutbox(t, func(t *testing.T) func() storetest.OutboxStore {
		path := filepath.Join(t.TempDir(), "llmflow.db")
		return func() storetest.OutboxStore { return MustOpenSQLite(t, path) }
	})
}

func TestSQLite_AccountLimits(t *testing.T) {
	storetest.RunAccountLimits(t, func(t *testing.T) storetest.AccountStore {
		return MustOpenSQLite(t, filepath.Join(t.TempDir(), "llmflow.db"))
	})
}

func TestSQLite_Admin(t *testing.T) {
	storetest.RunAdmin(t, func(t *testing.T) storetest.AdminStore {
		return MustOpenSQLite(t, filepath.Join(t.TempDir(), "llmflow.db"))
	})
}

func TestSQLite_RoleSync(t *testing.T) {
	storetest.RunRoleSync(t, func(t *testing.T) storetest.RoleSyncStore {
		return MustOpenSQLite(t, filepath.Join(t.TempDir(), "llmflow.db"))
	})
}

func TestSQLite_Replicas(t *testing.T) {
	storetest.RunReplicas(t, func(t *testing.T) storetest.ReplicaStore {
		return MustOpenSQLite(t, filepath.Join(t.TempDir(), "llmflow.db"))
	})
}
