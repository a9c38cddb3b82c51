package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// A migration is one schema step, read from a file named
// "<version>_<name>.sql" (for example "0001_init.sql"). Versions start at 1
// and have no gaps.
type migration struct {
	Version int
	Name    string // file name, for error messages
	SQL     string
}

// loadMigrations reads every *.sql file in dir of fsys and returns them in
// version order. It rejects a file name without a numeric prefix, a
// duplicate version and a gap, so a mistake in the embedded set fails every
// test rather than a production start.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		prefix, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			return nil, fmt.Errorf("migration %s: name must be <version>_<name>.sql", e.Name())
		}
		v, err := strconv.Atoi(prefix)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: version %q is not a positive integer", e.Name(), prefix)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			if i > 0 && m.Version == ms[i-1].Version {
				return nil, fmt.Errorf("migrations %s and %s have the same version", ms[i-1].Name, m.Name)
			}
			return nil, fmt.Errorf("migration %s: expected version %d (versions start at 1 without gaps)", m.Name, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	return ms, nil
}

// migrator is what the migration runner needs from a database. Each
// implementation (SQLite over database/sql, PostgreSQL over pgx) keeps
// its own SQL dialect and its own locking; the runner keeps the ordering and
// the version checks.
type migrator interface {
	// init creates schema_migrations(version, applied_at) if it is missing.
	init(ctx context.Context) error
	// version returns the highest applied version, 0 for a fresh database.
	version(ctx context.Context) (int, error)
	// apply runs m and records m.Version in one transaction. It must hold
	// the database's write lock for the whole transaction and re-check the
	// version inside it, returning applied == false when another process
	// applied m first.
	apply(ctx context.Context, m migration) (applied bool, err error)
}

// ErrSchemaTooNew is wrapped by the error an Open function returns when the
// database was migrated by a newer llmflow than this one: the binary does
// not know what the newer schema means and refuses to touch it.
var ErrSchemaTooNew = errors.New("database schema is newer than this binary")

// migrate brings db up to the last of ms, which must be in version order
// (loadMigrations). It returns the versions it applied. A database at a
// version above the last of ms is refused: this binary does not know what
// the newer schema means, and writing to it could lose data.
func migrate(ctx context.Context, db migrator, ms []migration) ([]int, error) {
	if err := db.init(ctx); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	cur, err := db.version(ctx)
	if err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].Version
	}
	if cur > latest {
		return nil, fmt.Errorf("%w: database is at version %d, this binary knows up to %d; upgrade llmflow", ErrSchemaTooNew, cur, latest)
	}
	var applied []int
	for _, m := range ms {
		if m.Version <= cur {
			continue
		}
		ok, err := db.apply(ctx, m)
		if err != nil {
			return applied, fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		if ok {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}
