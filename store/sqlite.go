package store

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
	"modernc.org/sqlite"
)

//go:embed migrations/sqlite/*.sql
var sqliteMigrations embed.FS

// busyTimeout is how long a connection waits for another one (or another
// process) holding the write lock before SQLite gives up with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// SQLite is the embedded store: one database file in WAL mode, no server.
//
// It keeps two connection pools on the same file. Writes go through a
// single connection, so writers of this process queue in database/sql
// instead of contending for SQLite's write lock (which is what turns into
// SQLITE_BUSY); every write transaction starts with BEGIN IMMEDIATE, so a
// writer in another process waits in the busy handler rather than failing
// on lock upgrade. Reads go through a pool of read-only connections that
// WAL lets run alongside the writer.
//
// A *SQLite is safe for concurrent use.
type SQLite struct {
	*sqlDB // users, admin tokens, roles, audit (admin.go)

	write *sql.DB
	read  *sql.DB

	keyByHash *sql.Stmt         // on read
	stmts     *sqliteWriteStmts // on write: WriteRecords

	clamped atomic.Int64 // records stored with their usage clamped

	closeOnce sync.Once
	closeErr  error
}

// OpenSQLite opens the database file at path, creating the file (not its
// directory) when it does not exist, and applies the embedded migrations
// that the file lacks. It refuses, wrapping ErrSchemaTooNew, a file that a
// newer llmflow has migrated past what this binary knows.
//
// The connections run with journal_mode=WAL, synchronous=NORMAL (a commit
// survives a crash of the process, not necessarily a power loss),
// foreign_keys=ON and a busy timeout. The file must be on a local file
// system: WAL needs shared memory between the processes using it.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	s, err := openSQLite(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	return s, nil
}

func openSQLite(ctx context.Context, path string) (_ *SQLite, err error) {
	if path == "" {
		return nil, errors.New("empty path")
	}
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("%q: path must name a file (use a file in a temporary directory for a throwaway store)", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("directory of %s: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("directory of %s: not a directory", path)
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}

	if err := createPrivate(abs); err != nil {
		return nil, err
	}

	common := fmt.Sprintf("_busy_timeout=%d&_foreign_keys=1&_synchronous=NORMAL", busyTimeout.Milliseconds())
	s := &SQLite{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	s.write, err = sql.Open("sqlite", sqliteDSN(abs, common+"&_journal_mode=WAL&_txlock=immediate"))
	if err != nil {
		return nil, err
	}
	s.write.SetMaxOpenConns(1)
	s.write.SetMaxIdleConns(1)
	s.write.SetConnMaxLifetime(0)
	s.write.SetConnMaxIdleTime(0)

	var mode string
	if err := s.write.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return nil, fmt.Errorf("%s: journal mode is %q, not wal (is the file on a network file system?)", path, mode)
	}

	ms, err := loadMigrations(sqliteMigrations, "migrations/sqlite")
	if err != nil {
		return nil, err
	}
	if _, err := migrate(ctx, sqliteMigrator{s.write}, ms); err != nil {
		return nil, err
	}

	// mode=rw: the read pool never creates the file.
	s.read, err = sql.Open("sqlite", sqliteDSN(abs, "mode=rw&"+common+"&_query_only=1"))
	if err != nil {
		return nil, err
	}
	n := max(4, runtime.GOMAXPROCS(0))
	s.read.SetMaxOpenConns(n)
	s.read.SetMaxIdleConns(n)
	if err := s.read.PingContext(ctx); err != nil {
		return nil, err
	}

	if s.keyByHash, err = s.read.PrepareContext(ctx, keyByHashSQL); err != nil {
		return nil, err
	}
	if s.stmts, err = prepareWriteStmts(ctx, s.write); err != nil {
		return nil, err
	}
	s.sqlDB = newSQLiteDB(s.read, s.write, map[string]*sql.Stmt{keyByHashSQL: s.keyByHash})
	return s, nil
}

// sqliteDSN returns a "file:" URI for the absolute path abs, so that a '?'
// or '#' in the path cannot be taken for the start of the parameters.
func sqliteDSN(abs, params string) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // C:/x -> /C:/x
	}
	p = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
	return "file:" + p + "?" + params
}

// sqliteMigrator applies migrations over the single write connection,
// whose transactions begin IMMEDIATE and so hold the write lock throughout.
type sqliteMigrator struct{ db *sql.DB }

func (m sqliteMigrator) init(ctx context.Context) error {
	_, err := m.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER NOT NULL PRIMARY KEY,
	applied_at INTEGER NOT NULL -- unix microseconds UTC
) STRICT`)
	return err
}

func (m sqliteMigrator) version(ctx context.Context) (int, error) {
	return sqliteVersion(ctx, m.db)
}

func sqliteVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

func (m sqliteMigrator) apply(ctx context.Context, mig migration) (bool, error) {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	cur, err := sqliteVersion(ctx, tx)
	if err != nil {
		return false, err
	}
	if cur >= mig.Version {
		return false, nil // another process got there first
	}
	if _, err := tx.ExecContext(ctx, mig.SQL); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
		mig.Version, time.Now().UnixMicro()); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// Ping reports whether the database file can still be read and written.
// Its error has code EUNAVAILABLE.
func (s *SQLite) Ping(ctx context.Context) error {
	err := s.write.PingContext(ctx)
	if err == nil {
		err = s.read.PingContext(ctx)
	}
	if err != nil {
		return &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "store unavailable", Err: err}
	}
	return nil
}

// Close closes both pools. Calling it again returns the first result.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.keyByHash != nil {
			errs = append(errs, s.keyByHash.Close())
		}
		if s.stmts != nil {
			errs = append(errs, s.stmts.close())
		}
		for _, db := range []*sql.DB{s.read, s.write} {
			if db != nil {
				errs = append(errs, db.Close())
			}
		}
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close sqlite store: %w", err)
		}
	})
	return s.closeErr
}

// sqliteCode returns the extended result code of a driver error, 0 for
// any other error.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// Times are stored as integer unix microseconds UTC: exact ordering and
// range comparisons, no time zone or text format to parse.

func toMicros(t time.Time) int64 { return t.UnixMicro() }

func nullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Tags are stored as a JSON array; no tags (nil or empty) is "[]" and
// reads back as nil.

func encodeTags(tags []string) (string, error) {
	if len(tags) == 0 {
		return "[]", nil
	}
	// What encoding/json writes, without it for the usual tags: plain
	// ASCII, nothing to escape.
	n := 1
	for _, t := range tags {
		for i := 0; i < len(t); i++ {
			if c := t[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				b, err := json.Marshal(tags)
				return string(b), err
			}
		}
		n += len(t) + 3
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, t := range tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, t...)
		b = append(b, '"')
	}
	return string(append(b, ']')), nil
}

// createPrivate creates the database file with mode 0600 when it does not
// exist yet, whatever the umask, so accounting records and key hashes are
// readable by the gateway's user only; SQLite gives the -wal and -shm
// files it creates next to it the same mode. An existing file keeps the
// mode its owner gave it.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil { // the umask may have removed bits
		f.Close()
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}
