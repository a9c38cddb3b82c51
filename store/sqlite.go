package store

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
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
	write *sql.DB
	read  *sql.DB

	keyByHash     *sql.Stmt // on read
	insertRecords *sql.Stmt // on write, recordsPerInsert rows

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

	if s.keyByHash, err = s.read.PrepareContext(ctx, `SELECT `+keyColumns+` FROM keys WHERE hash = ?`); err != nil {
		return nil, err
	}
	if _, err := s.write.ExecContext(ctx, batchTable); err != nil {
		return nil, err
	}
	if s.insertRecords, err = s.write.PrepareContext(ctx, insertRecordsSQL(recordsPerInsert)); err != nil {
		return nil, err
	}
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
		for _, st := range []*sql.Stmt{s.keyByHash, s.insertRecords} {
			if st != nil {
				errs = append(errs, st.Close())
			}
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

// CreateKey stores k. It fails with ECONFLICT when a key with the same ID
// or the same Hash exists (revoked or not), and with EINVALID when k.ID is
// empty.
func (s *SQLite) CreateKey(ctx context.Context, k llmflow.Key) error {
	if k.ID == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "key id is required", Param: "id"}
	}
	tags, err := encodeTags(k.Tags)
	if err != nil {
		return fmt.Errorf("create key: %w", err)
	}
	_, err = s.write.ExecContext(ctx, `INSERT INTO keys (`+keyColumns+`)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Hash[:], k.Hint, k.Name, k.Org, k.Team, k.Project, k.Owner,
		k.RPM, k.TPM, k.MaxInFlight, tags, toMicros(k.CreatedAt), nullMicros(k.RevokedAt))
	if err != nil {
		// The driver error names the column, never the values.
		switch sqliteCode(err) {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return &llmflow.Error{Code: llmflow.ECONFLICT, Message: fmt.Sprintf("key %s already exists", k.ID), Param: "id", Err: err}
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return &llmflow.Error{Code: llmflow.ECONFLICT, Message: "a key with the same secret already exists", Err: err}
		}
		return fmt.Errorf("create key: %w", err)
	}
	return nil
}

// KeyByHash returns the key whose secret hashes to hash, revoked or not:
// the caller checks Key.Active. It returns llmflow.ErrNotFound when there
// is none.
func (s *SQLite) KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error) {
	k, err := scanKey(s.keyByHash.QueryRowContext(ctx, hash[:]))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by hash: %w", err)
	}
	return k, nil
}

// KeyByID returns the key with the given ID, revoked or not, or
// llmflow.ErrNotFound.
func (s *SQLite) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	k, err := scanKey(s.read.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = ?`, id))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by id: %w", err)
	}
	return k, nil
}

// ListKeys returns the keys matching f ordered by creation time, then ID.
// Revoked keys are included only with f.IncludeRevoked. It returns nil
// when nothing matches.
func (s *SQLite) ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error) {
	q, args := sqliteDialect.listKeysQuery(f)

	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	var keys []llmflow.Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return keys, nil
}

// RevokeKey marks the key revoked at the given time. Revoking a revoked key
// keeps the first revocation time and returns nil. It returns
// llmflow.ErrNotFound for an unknown ID and EINVALID for a zero time (which
// would mean "active").
func (s *SQLite) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "revocation time is required"}
	}
	// SQLite counts a matched row as changed even when COALESCE keeps the
	// old value, so zero rows means no such key.
	res, err := s.write.ExecContext(ctx, `UPDATE keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, toMicros(at), id)
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	if n == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanKey(row rowScanner) (llmflow.Key, error) {
	var (
		k       llmflow.Key
		hash    []byte
		tags    string
		created int64
		revoked sql.NullInt64
	)
	err := row.Scan(&k.ID, &hash, &k.Hint, &k.Name, &k.Org, &k.Team, &k.Project, &k.Owner,
		&k.RPM, &k.TPM, &k.MaxInFlight, &tags, &created, &revoked)
	if err != nil {
		return llmflow.Key{}, err
	}
	if len(hash) != len(k.Hash) {
		return llmflow.Key{}, fmt.Errorf("key %s: hash has %d bytes, want %d", k.ID, len(hash), len(k.Hash))
	}
	copy(k.Hash[:], hash)
	if k.Tags, err = decodeTags(tags); err != nil {
		return llmflow.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
	}
	k.CreatedAt = fromMicros(created)
	if revoked.Valid {
		k.RevokedAt = fromMicros(revoked.Int64)
	}
	return k, nil
}

// recordColumns is the number of columns insertRecordsSQL binds per row.
const recordColumns = 23

// recordsPerInsert is how many rows one INSERT carries: a batch goes in
// as few statements as possible, which is where the write throughput
// comes from (the per-statement cost of the driver dominates a one-row
// insert). 64 rows × 23 columns stays far under SQLite's bound of 32766
// parameters.
const recordsPerInsert = 64

// batchTable is the write connection's staging table: WriteRecords puts a
// batch there, drops what is already stored, then moves the rest into
// records and rolls it up, all in one transaction. ord keeps the batch
// order (the first of two records with one RequestID wins); hour is the
// start of the record's hour.
const batchTable = `CREATE TEMP TABLE IF NOT EXISTS batch (
	request_id        TEXT    NOT NULL PRIMARY KEY,
	time              INTEGER NOT NULL,
	key_id            TEXT    NOT NULL,
	project           TEXT    NOT NULL,
	team              TEXT    NOT NULL,
	org               TEXT    NOT NULL,
	model             TEXT    NOT NULL,
	pool              TEXT    NOT NULL,
	upstream          TEXT    NOT NULL,
	prompt_tokens     INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	cached_tokens     INTEGER NOT NULL,
	gpu_hours         REAL    NOT NULL,
	status            INTEGER NOT NULL,
	outcome           TEXT    NOT NULL,
	estimated         INTEGER NOT NULL,
	stream            INTEGER NOT NULL,
	priority          INTEGER NOT NULL,
	latency_us        INTEGER NOT NULL,
	ttfb_us           INTEGER NOT NULL,
	tags              TEXT    NOT NULL,
	hour              INTEGER NOT NULL,
	ord               INTEGER NOT NULL
)`

const recordCols = `request_id, time, key_id, project, team, org, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours,
	status, outcome, estimated, stream, priority, latency_us, ttfb_us, tags`

// insertRecordsSQL is an INSERT of n rows into the staging table. OR
// IGNORE keeps the first of two rows with the same RequestID.
func insertRecordsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT OR IGNORE INTO temp.batch (` + recordCols + `, hour, ord) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
	}
	return b.String()
}

// The statements that move the staged batch into records and the rollups.
// Only rows not already in records are left in the batch when they run, so
// a record written again is never rolled up twice. (An upsert from a
// SELECT needs a WHERE clause in SQLite, hence WHERE true.)
var sqliteMoveBatch = []string{
	`DELETE FROM temp.batch WHERE EXISTS (SELECT 1 FROM main.records r WHERE r.request_id = temp.batch.request_id)`,
	`INSERT INTO main.records (` + recordCols + `) SELECT ` + recordCols + ` FROM temp.batch ORDER BY ord`,
	`INSERT INTO main.rollups (hour, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT b.hour, b.org, b.team, b.project, b.key_id, COALESCE(k.owner, ''), b.model, b.pool,
	count(*), sum(b.prompt_tokens), sum(b.completion_tokens), sum(b.cached_tokens), sum(b.gpu_hours), sum(b.estimated)
FROM temp.batch b LEFT JOIN main.keys k ON k.id = b.key_id
WHERE true
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
ON CONFLICT DO UPDATE SET
	requests = requests + excluded.requests,
	prompt_tokens = prompt_tokens + excluded.prompt_tokens,
	completion_tokens = completion_tokens + excluded.completion_tokens,
	cached_tokens = cached_tokens + excluded.cached_tokens,
	gpu_hours = gpu_hours + excluded.gpu_hours,
	estimated_requests = estimated_requests + excluded.estimated_requests`,
	`INSERT INTO main.rollups_by_tag (hour, tag, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT b.hour, t.tag, b.org, b.team, b.project, b.key_id, COALESCE(k.owner, ''), b.model, b.pool,
	count(*), sum(b.prompt_tokens), sum(b.completion_tokens), sum(b.cached_tokens), sum(b.gpu_hours), sum(b.estimated)
FROM (
	SELECT DISTINCT b.request_id, j.value AS tag FROM temp.batch b, json_each(b.tags) j
	UNION ALL
	SELECT request_id, '' FROM temp.batch WHERE tags = '[]'
) t
JOIN temp.batch b ON b.request_id = t.request_id
LEFT JOIN main.keys k ON k.id = b.key_id
WHERE true
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
ON CONFLICT DO UPDATE SET
	requests = requests + excluded.requests,
	prompt_tokens = prompt_tokens + excluded.prompt_tokens,
	completion_tokens = completion_tokens + excluded.completion_tokens,
	cached_tokens = cached_tokens + excluded.cached_tokens,
	gpu_hours = gpu_hours + excluded.gpu_hours,
	estimated_requests = estimated_requests + excluded.estimated_requests`,
	`DELETE FROM temp.batch`,
}

// recordArgs appends r's column values in insertRecordsSQL's order.
func recordArgs(args []any, r *llmflow.Record, ord int) ([]any, error) {
	tags, err := encodeTags(r.Tags)
	if err != nil {
		return nil, err
	}
	t := toMicros(r.Time)
	return append(args,
		r.RequestID, t, r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream,
		r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours,
		r.Status, string(r.Outcome), r.Estimated, r.Stream, r.Priority,
		r.Latency.Microseconds(), r.TTFB.Microseconds(), tags, hourOf(t), ord,
	), nil
}

// WriteRecords stores rs and rolls them up, in one transaction. A record
// whose RequestID is already stored (by this or an earlier call, or
// earlier in rs) is skipped, in records and in the rollups: the first
// write wins, so a retried batch is never counted twice. An empty batch
// does nothing. A record without a RequestID fails the whole batch with
// EINVALID before anything is written.
func (s *SQLite) WriteRecords(ctx context.Context, rs []llmflow.Record) (err error) {
	if len(rs) == 0 {
		return nil
	}
	for i := range rs {
		if rs[i].RequestID == "" {
			return &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("record %d: request id is required", i)}
		}
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("write records: %w", err)
		}
	}()
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The connection may be new (the pool reopened it): the staging table
	// is per connection.
	if _, err := tx.ExecContext(ctx, batchTable); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM temp.batch`); err != nil {
		return err
	}
	full := tx.StmtContext(ctx, s.insertRecords)
	defer full.Close()
	args := make([]any, 0, recordsPerInsert*recordColumns)
	first := rs[0].RequestID
	for ord := 0; ord < len(rs); {
		n := min(len(rs)-ord, recordsPerInsert)
		args = args[:0]
		for i := range n {
			if args, err = recordArgs(args, &rs[ord+i], ord+i); err != nil {
				return fmt.Errorf("record %s: %w", rs[ord+i].RequestID, err)
			}
		}
		var err error
		if n == recordsPerInsert {
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, insertRecordsSQL(n), args...)
		}
		if err != nil {
			return fmt.Errorf("records %s…: %w", rs[ord].RequestID, err)
		}
		ord += n
	}
	for _, q := range sqliteMoveBatch {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("records %s…: %w", first, err)
		}
	}
	return tx.Commit()
}

// Records returns the records with from ≤ Time < to, ordered by Time then
// RequestID. Bounds finer than a microsecond are compared exactly against
// the stored microseconds. It returns nil when nothing matches.
func (s *SQLite) Records(ctx context.Context, from, to time.Time) ([]llmflow.Record, error) {
	if !from.Before(to) {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx, `SELECT
	request_id, time, key_id, project, team, org, model, pool, upstream,
	prompt_tokens, completion_tokens, cached_tokens, gpu_hours,
	status, outcome, estimated, stream, priority, latency_us, ttfb_us, tags
FROM records WHERE time >= ? AND time < ? ORDER BY time, request_id`, ceilMicros(from), ceilMicros(to))
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	defer rows.Close()
	var rs []llmflow.Record
	for rows.Next() {
		var (
			r            llmflow.Record
			t, lat, ttfb int64
			outcome      string
			tags         string
		)
		if err := rows.Scan(&r.RequestID, &t, &r.KeyID, &r.Project, &r.Team, &r.Org, &r.Model, &r.Pool, &r.Upstream,
			&r.PromptTokens, &r.CompletionTokens, &r.CachedTokens, &r.GPUHours,
			&r.Status, &outcome, &r.Estimated, &r.Stream, &r.Priority, &lat, &ttfb, &tags); err != nil {
			return nil, fmt.Errorf("read records: %w", err)
		}
		var err error
		if r.Tags, err = decodeTags(tags); err != nil {
			return nil, fmt.Errorf("read records: %s: %w", r.RequestID, err)
		}
		r.Time = fromMicros(t)
		r.Outcome = llmflow.Outcome(outcome)
		r.Latency = time.Duration(lat) * time.Microsecond
		r.TTFB = time.Duration(ttfb) * time.Microsecond
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	return rs, nil
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
	b, err := json.Marshal(tags)
	return string(b), err
}

func decodeTags(s string) ([]string, error) {
	if s == "" || s == "[]" {
		return nil, nil
	}
	var tags []string
	if err := json.Unmarshal([]byte(s), &tags); err != nil {
		return nil, fmt.Errorf("decode tags: %w", err)
	}
	if len(tags) == 0 {
		return nil, nil
	}
	return tags, nil
}
