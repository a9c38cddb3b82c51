package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/redact"
)

//go:embed migrations/postgres/*.sql
var postgresMigrations embed.FS

// Postgres is the server store (pgx/v5, pure Go), for production and for
// several gateways sharing one database: every write is one transaction,
// records are idempotent per RequestID across all of them, and migrations
// run under an advisory lock so gateways starting together do not race.
//
// Accounting batches are copied (COPY, binary) into a per-connection
// temporary table, then moved into records with INSERT … ON CONFLICT
// (request_id) DO NOTHING; the rows actually inserted (RETURNING) are
// rolled up in the same statement, so a record written twice, by one
// gateway or by two at once, is counted once.
//
// The tables are created in the first schema of the connection's
// search_path (set it in the DSN, e.g. "…?search_path=llmflow", to keep
// llmflow in its own schema). A *Postgres is safe for concurrent use.
type Postgres struct {
	*sqlDB // users, admin tokens, roles, audit (admin.go)

	pool      *pgxpool.Pool
	closeOnce sync.Once
	clamped   atomic.Int64 // records stored with their usage clamped
}

// ErrInvalidDSN is wrapped by the error OpenPostgres returns for a DSN it
// cannot parse. The DSN itself is never part of the message: it may hold
// a password.
var ErrInvalidDSN = errors.New("invalid PostgreSQL DSN (not shown: it may hold a password); want postgres://user@host:port/database?… or host=… user=… dbname=…")

// OpenPostgres connects to the database named by dsn (a postgres:// URL or
// key=value pairs, as libpq) and applies the embedded migrations that it
// lacks, holding an advisory lock meanwhile. It refuses, wrapping
// ErrSchemaTooNew, a database that a newer llmflow has migrated past what
// this binary knows. Its errors never contain the DSN or its password.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	s, err := openPostgres(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	return s, nil
}

func openPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("empty DSN")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, ErrInvalidDSN
	}
	password := cfg.ConnConfig.Password
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, redactErr(err, dsn, password)
	}
	s := &Postgres{pool: pool}
	s.sqlDB = newPostgresDB(s)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, redactErr(err, dsn, password)
	}
	return s, nil
}

// redactedError is an error whose message was cleaned of the DSN and its
// password. It unwraps only to the sentinels callers test for, never to
// the original error (whose message may hold them).
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Unwrap() error { return e.cause }

// redactErr returns err without the DSN, its password, nor pgx's
// "failed to connect to `user=… database=…`" prefix.
func redactErr(err error, dsn, password string) error {
	msg := err.Error()
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		if inner := ce.Unwrap(); inner != nil {
			msg = "connect: " + inner.Error()
		}
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		msg = ErrInvalidDSN.Error()
	}
	msg = redact.DSN(msg, dsn, password)
	var cause error
	for _, sentinel := range []error{ErrSchemaTooNew, ErrInvalidDSN, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, sentinel) {
			cause = sentinel
			break
		}
	}
	return &redactedError{msg: msg, cause: cause}
}

// migrateLockKey is the advisory lock held while migrating, one per schema
// so that stores in different schemas of one database migrate
// independently.
const migrateLockKey = `hashtext('llmflow migrate ' || coalesce(current_schema(), ''))`

// migrate applies the embedded migrations on one connection holding a
// session advisory lock: a second gateway starting at the same time waits,
// then finds the schema current.
func (s *Postgres) migrate(ctx context.Context) (err error) {
	ms, err := loadMigrations(postgresMigrations, "migrations/postgres")
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+migrateLockKey+`)`); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, `SELECT pg_advisory_unlock(`+migrateLockKey+`)`); uerr != nil {
			// Closing the session releases the lock; the pool drops the
			// closed connection.
			conn.Conn().Close(uctx)
			if err == nil {
				err = fmt.Errorf("migration unlock: %w", uerr)
			}
		}
	}()
	_, err = migrate(ctx, pgMigrator{conn.Conn()}, ms)
	return err
}

// pgMigrator applies migrations on a connection that holds the migration
// advisory lock (see Postgres.migrate).
type pgMigrator struct{ c *pgx.Conn }

func (m pgMigrator) init(ctx context.Context) error {
	_, err := m.c.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     NOT NULL PRIMARY KEY,
	applied_at timestamptz NOT NULL
)`)
	return err
}

func (m pgMigrator) version(ctx context.Context) (int, error) {
	var v int
	err := m.c.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

func (m pgMigrator) apply(ctx context.Context, mig migration) (bool, error) {
	tx, err := m.c.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	// The session lock is held already; this one also covers a caller
	// that would apply without it.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+migrateLockKey+` + 1)`); err != nil {
		return false, err
	}
	var cur int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&cur); err != nil {
		return false, err
	}
	if cur >= mig.Version {
		return false, nil
	}
	if _, err := tx.Exec(ctx, mig.SQL); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, mig.Version, time.Now()); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// Ping reports whether the database answers. Its error has code
// EUNAVAILABLE.
func (s *Postgres) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "store unavailable", Err: err}
	}
	return nil
}

// Close closes the connection pool. Calling it again does nothing.
func (s *Postgres) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}

// pgTime is t at microsecond precision (sub-microsecond digits truncated,
// as the database would) in UTC.
func pgTime(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }

// pgBound is a range bound rounded up to the next microsecond, so that a
// stored time is ≥ pgBound(t) exactly when it is at or after t.
func pgBound(t time.Time) time.Time { return time.UnixMicro(ceilMicros(t)).UTC() }

func pgNullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return pgTime(t)
}

// pgCode returns the SQLSTATE of a server error, "" for any other error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
