package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// Schema is what a probe of a store found, without changing it: the
// version its schema is at, the last version this binary knows, and the
// database's clock (zero for SQLite: the local file has the host's).
type Schema struct {
	Version int  // 0: a fresh database (or no SQLite file yet)
	Latest  int  // the last embedded migration
	Missing bool // SQLite: the file does not exist yet (serve creates it)
	Now     time.Time
}

// Pending is how many migrations serve will apply at its start.
func (s Schema) Pending() int { return max(s.Latest-s.Version, 0) }

// TooNew reports whether a newer llmflow migrated the database past what
// this binary knows (serve refuses it, ErrSchemaTooNew).
func (s Schema) TooNew() bool { return s.Version > s.Latest }

// ProbeSQLite reads the schema version of the SQLite file at path, read
// only: it neither creates the file nor migrates it (llmflow doctor).
func ProbeSQLite(ctx context.Context, path string) (Schema, error) {
	ms, err := loadMigrations(sqliteMigrations, "migrations/sqlite")
	if err != nil {
		return Schema{}, err
	}
	sc := Schema{Latest: ms[len(ms)-1].Version}
	abs, err := filepath.Abs(path)
	if err != nil {
		return sc, err
	}
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(filepath.Dir(abs)); derr != nil {
			return sc, fmt.Errorf("directory of %s: %w", path, derr)
		}
		sc.Missing = true
		return sc, nil
	} else if err != nil {
		return sc, err
	}
	db, err := sql.Open("sqlite", sqliteDSN(abs, "mode=ro&_query_only=1"))
	if err != nil {
		return sc, err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n); err != nil {
		return sc, fmt.Errorf("%s: %w", path, err)
	}
	if n == 0 {
		return sc, nil
	}
	if sc.Version, err = sqliteVersion(ctx, db); err != nil {
		return sc, fmt.Errorf("%s: read schema version: %w", path, err)
	}
	return sc, nil
}

// ProbePostgres connects to the database of dsn and reads its schema
// version and clock, without migrating it. Its errors never contain the
// DSN or its password.
func ProbePostgres(ctx context.Context, dsn string) (Schema, error) {
	ms, err := loadMigrations(postgresMigrations, "migrations/postgres")
	if err != nil {
		return Schema{}, err
	}
	sc := Schema{Latest: ms[len(ms)-1].Version}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return sc, ErrInvalidDSN
	}
	password := cfg.Password
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return sc, redactErr(err, dsn, password)
	}
	defer c.Close(context.Background())
	var exists bool
	if err := c.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL, now()`).Scan(&exists, &sc.Now); err != nil {
		return sc, redactErr(err, dsn, password)
	}
	if exists {
		if err := c.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&sc.Version); err != nil {
			return sc, redactErr(err, dsn, password)
		}
	}
	return sc, nil
}
