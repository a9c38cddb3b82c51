package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestLoadMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	t.Run("OK", func(t *testing.T) {
		fsys := fstest.MapFS{
			"m/0002_b.sql":  file("B"),
			"m/0001_a.sql":  file("A"),
			"m/10_c.sql":    file("C"), // unlikely but valid once 3..9 exist
			"m/README.md":   file("ignored"),
			"m/0003_c.sql":  file("3"),
			"m/4_d.sql":     file("4"),
			"m/005_e.sql":   file("5"),
			"m/0006_f.sql":  file("6"),
			"m/0007_g.sql":  file("7"),
			"m/0008_h.sql":  file("8"),
			"m/0009_i.sql":  file("9"),
			"m/sub/0_x.sql": file("in a subdirectory: ignored"),
		}
		ms, err := loadMigrations(fsys, "m")
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, m := range ms {
			got = append(got, m.Version)
		}
		if diff := cmp.Diff([]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, got); diff != "" {
			t.Errorf("versions (-want +got):\n%s", diff)
		}
		if ms[0].SQL != "A" || ms[0].Name != "0001_a.sql" {
			t.Errorf("first migration: %+v", ms[0])
		}
	})
	tests := []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"ErrGap", fstest.MapFS{"m/0001_a.sql": file(""), "m/0003_c.sql": file("")}, "expected version 2"},
		{"ErrNoOne", fstest.MapFS{"m/0002_a.sql": file("")}, "expected version 1"},
		{"ErrDuplicate", fstest.MapFS{"m/0001_a.sql": file(""), "m/1_b.sql": file("")}, "same version"},
		{"ErrName", fstest.MapFS{"m/init.sql": file("")}, "<version>_<name>.sql"},
		{"ErrVersion", fstest.MapFS{"m/x1_init.sql": file("")}, "not a positive integer"},
		{"ErrZero", fstest.MapFS{"m/0000_init.sql": file("")}, "not a positive integer"},
		{"ErrEmpty", fstest.MapFS{"m/README": file("")}, "no migrations"},
		{"ErrNoDir", fstest.MapFS{}, "read migrations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadMigrations(tt.fsys, "m")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestLoadMigrations_Embedded(t *testing.T) {
	ms, err := loadMigrations(sqliteMigrations, "migrations/sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Name != "0001_init.sql" {
		t.Errorf("first migration %s", ms[0].Name)
	}
}

// fakeMigrator records what the runner asks of a database.
type fakeMigrator struct {
	cur     int
	applied []int
	failAt  int
	raceAt  int // apply reports that another process applied this version
}

func (f *fakeMigrator) init(context.Context) error           { return nil }
func (f *fakeMigrator) version(context.Context) (int, error) { return f.cur, nil }
func (f *fakeMigrator) apply(_ context.Context, m migration) (bool, error) {
	if m.Version == f.failAt {
		return false, errors.New("boom")
	}
	if m.Version != f.cur+1 {
		return false, errors.New("out of order")
	}
	f.cur = m.Version
	if m.Version == f.raceAt {
		return false, nil
	}
	f.applied = append(f.applied, m.Version)
	return true, nil
}

func TestMigrate(t *testing.T) {
	ms := []migration{{1, "0001_a.sql", ""}, {2, "0002_b.sql", ""}, {3, "0003_c.sql", ""}}
	tests := []struct {
		name    string
		db      fakeMigrator
		want    []int
		wantErr string
	}{
		{"Fresh", fakeMigrator{}, []int{1, 2, 3}, ""},
		{"Partial", fakeMigrator{cur: 1}, []int{2, 3}, ""},
		{"Current", fakeMigrator{cur: 3}, nil, ""},
		{"Raced", fakeMigrator{raceAt: 2}, []int{1, 3}, ""},
		{"ErrTooNew", fakeMigrator{cur: 4}, nil, "database is at version 4, this binary knows up to 3"},
		{"ErrApply", fakeMigrator{failAt: 2}, []int{1}, "apply migration 0002_b.sql: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := tt.db
			got, err := migrate(t.Context(), &db, ms)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("migrate: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("migrate: error %v, want %q", err, tt.wantErr)
			}
			if strings.HasPrefix(tt.name, "ErrTooNew") && !errors.Is(err, ErrSchemaTooNew) {
				t.Errorf("error %v does not wrap ErrSchemaTooNew", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("applied (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, db.applied); diff != "" {
				t.Errorf("database saw (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOpenSQLite_Pragmas checks the per-connection settings on both pools.
func TestOpenSQLite_Pragmas(t *testing.T) {
	s, err := OpenSQLite(t.Context(), t.TempDir()+"/llmflow.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string]map[string]string{
		"write": {"journal_mode": "wal", "synchronous": "1", "foreign_keys": "1", "busy_timeout": "10000", "query_only": "0"},
		"read":  {"journal_mode": "wal", "synchronous": "1", "foreign_keys": "1", "busy_timeout": "10000", "query_only": "1"},
	}
	for pool, db := range map[string]*sql.DB{"write": s.write, "read": s.read} {
		for pragma, v := range want[pool] {
			var got string
			if err := db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil {
				t.Fatalf("%s pool: PRAGMA %s: %v", pool, pragma, err)
			}
			if got != v {
				t.Errorf("%s pool: %s = %q, want %q", pool, pragma, got, v)
			}
		}
	}
	// The read pool refuses writes.
	if _, err := s.read.ExecContext(t.Context(), `DELETE FROM keys`); err == nil {
		t.Error("read pool accepted a write")
	}
}
