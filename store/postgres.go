package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-llmflow/llmflow"
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
	pool      *pgxpool.Pool
	closeOnce sync.Once
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
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, pgBatchTable)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, redact(err, dsn, password)
	}
	s := &Postgres{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, redact(err, dsn, password)
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

// redact returns err without the DSN, its password, nor pgx's
// "failed to connect to `user=… database=…`" prefix.
func redact(err error, dsn, password string) error {
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
	if dsn != "" {
		msg = strings.ReplaceAll(msg, dsn, "<dsn>")
	}
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "xxxxx")
	}
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

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// pgCode returns the SQLSTATE of a server error, "" for any other error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// CreateKey stores k. It fails with ECONFLICT when a key with the same ID
// or the same Hash exists (revoked or not), and with EINVALID when k.ID is
// empty.
func (s *Postgres) CreateKey(ctx context.Context, k llmflow.Key) error {
	if k.ID == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "key id is required", Param: "id"}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO keys (`+keyColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		k.ID, k.Hash[:], k.Hint, k.Name, k.Org, k.Team, k.Project, k.Owner,
		k.RPM, k.TPM, k.MaxInFlight, nonNil(k.Tags), pgTime(k.CreatedAt), pgNullTime(k.RevokedAt))
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			switch pe.ConstraintName {
			case "keys_pkey":
				return &llmflow.Error{Code: llmflow.ECONFLICT, Message: fmt.Sprintf("key %s already exists", k.ID), Param: "id", Err: err}
			case "keys_hash_key":
				return &llmflow.Error{Code: llmflow.ECONFLICT, Message: "a key with the same secret already exists", Err: err}
			}
		}
		return fmt.Errorf("create key: %w", err)
	}
	return nil
}

// KeyByHash returns the key whose secret hashes to hash, revoked or not,
// or llmflow.ErrNotFound.
func (s *Postgres) KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error) {
	k, err := pgScanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE hash = $1`, hash[:]))
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by hash: %w", err)
	}
	return k, nil
}

// KeyByID returns the key with the given ID, revoked or not, or
// llmflow.ErrNotFound.
func (s *Postgres) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	k, err := pgScanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = $1`, id))
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by id: %w", err)
	}
	return k, nil
}

// ListKeys returns the keys matching f ordered by creation time, then ID.
// Revoked keys are included only with f.IncludeRevoked. It returns nil
// when nothing matches.
func (s *Postgres) ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error) {
	q, args := postgresDialect.listKeysQuery(f)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	var keys []llmflow.Key
	for rows.Next() {
		k, err := pgScanKey(rows)
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

// RevokeKey marks the key revoked at the given time, keeping the first
// revocation time of a revoked key. llmflow.ErrNotFound for an unknown ID,
// EINVALID for a zero time.
func (s *Postgres) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "revocation time is required"}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, pgTime(at), id)
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

func pgScanKey(row pgx.Row) (llmflow.Key, error) {
	var (
		k       llmflow.Key
		hash    []byte
		created time.Time
		revoked *time.Time
	)
	err := row.Scan(&k.ID, &hash, &k.Hint, &k.Name, &k.Org, &k.Team, &k.Project, &k.Owner,
		&k.RPM, &k.TPM, &k.MaxInFlight, &k.Tags, &created, &revoked)
	if err != nil {
		return llmflow.Key{}, err
	}
	if len(hash) != len(k.Hash) {
		return llmflow.Key{}, fmt.Errorf("key %s: hash has %d bytes, want %d", k.ID, len(hash), len(k.Hash))
	}
	copy(k.Hash[:], hash)
	k.Tags = nilIfEmpty(k.Tags)
	k.CreatedAt = created.UTC()
	if revoked != nil {
		k.RevokedAt = revoked.UTC()
	}
	return k, nil
}

// pgBatchTable is created on every new connection: WriteRecords copies a
// batch into it. Its rows go at commit (and with a rollback).
const pgBatchTable = `CREATE TEMP TABLE IF NOT EXISTS llmflow_batch (
	request_id        text             COLLATE "C" NOT NULL,
	time              timestamptz      NOT NULL,
	key_id            text             COLLATE "C" NOT NULL,
	project           text             COLLATE "C" NOT NULL,
	team              text             COLLATE "C" NOT NULL,
	org               text             COLLATE "C" NOT NULL,
	model             text             COLLATE "C" NOT NULL,
	pool              text             COLLATE "C" NOT NULL,
	upstream          text             COLLATE "C" NOT NULL,
	prompt_tokens     bigint           NOT NULL,
	completion_tokens bigint           NOT NULL,
	cached_tokens     bigint           NOT NULL,
	gpu_hours         double precision NOT NULL,
	status            bigint           NOT NULL,
	outcome           text             COLLATE "C" NOT NULL,
	estimated         boolean          NOT NULL,
	stream            boolean          NOT NULL,
	priority          bigint           NOT NULL,
	latency_us        bigint           NOT NULL,
	ttfb_us           bigint           NOT NULL,
	tags              text[]           COLLATE "C" NOT NULL,
	ord               integer          NOT NULL
) ON COMMIT DELETE ROWS`

var pgBatchColumns = []string{
	"request_id", "time", "key_id", "project", "team", "org", "model", "pool", "upstream",
	"prompt_tokens", "completion_tokens", "cached_tokens", "gpu_hours",
	"status", "outcome", "estimated", "stream", "priority", "latency_us", "ttfb_us", "tags", "ord",
}

// pgMoveBatch moves the copied batch into records and rolls up what was
// actually inserted, in one statement. DISTINCT ON keeps the first record
// of a RequestID within the batch; ON CONFLICT DO NOTHING skips those
// already stored (waiting, when another transaction is inserting the same
// RequestID, for its outcome). Rows are inserted in key order, the same in
// every transaction, so concurrent writers do not deadlock.
const pgMoveBatch = `WITH ins AS (
	INSERT INTO records (` + recordCols + `)
	SELECT DISTINCT ON (request_id) ` + recordCols + `
	FROM pg_temp.llmflow_batch ORDER BY request_id, ord
	ON CONFLICT (request_id) DO NOTHING
	RETURNING date_trunc('hour', time, 'UTC') AS hour, key_id, project, team, org, model, pool,
		prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated, tags
), owned AS (
	SELECT ins.*, COALESCE(k.owner, '') AS owner FROM ins LEFT JOIN keys k ON k.id = ins.key_id
), plain AS (
	INSERT INTO rollups (hour, org, team, project, key_id, owner, model, pool,
		requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
	SELECT hour, org, team, project, key_id, owner, model, pool,
		count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(gpu_hours),
		count(*) FILTER (WHERE estimated)
	FROM owned
	GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
	ON CONFLICT (hour, org, team, project, key_id, owner, model, pool) DO UPDATE SET
		requests = rollups.requests + EXCLUDED.requests,
		prompt_tokens = rollups.prompt_tokens + EXCLUDED.prompt_tokens,
		completion_tokens = rollups.completion_tokens + EXCLUDED.completion_tokens,
		cached_tokens = rollups.cached_tokens + EXCLUDED.cached_tokens,
		gpu_hours = rollups.gpu_hours + EXCLUDED.gpu_hours,
		estimated_requests = rollups.estimated_requests + EXCLUDED.estimated_requests
)
INSERT INTO rollups_by_tag (hour, tag, org, team, project, key_id, owner, model, pool,
	requests, prompt_tokens, completion_tokens, cached_tokens, gpu_hours, estimated_requests)
SELECT hour, t.tag, org, team, project, key_id, owner, model, pool,
	count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(gpu_hours),
	count(*) FILTER (WHERE estimated)
FROM owned CROSS JOIN LATERAL (
	SELECT DISTINCT u FROM unnest(CASE WHEN cardinality(owned.tags) = 0 THEN ARRAY['']::text[] ELSE owned.tags END) u
) t(tag)
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9
ON CONFLICT (hour, tag, org, team, project, key_id, owner, model, pool) DO UPDATE SET
	requests = rollups_by_tag.requests + EXCLUDED.requests,
	prompt_tokens = rollups_by_tag.prompt_tokens + EXCLUDED.prompt_tokens,
	completion_tokens = rollups_by_tag.completion_tokens + EXCLUDED.completion_tokens,
	cached_tokens = rollups_by_tag.cached_tokens + EXCLUDED.cached_tokens,
	gpu_hours = rollups_by_tag.gpu_hours + EXCLUDED.gpu_hours,
	estimated_requests = rollups_by_tag.estimated_requests + EXCLUDED.estimated_requests`

// maxWriteAttempts bounds the retries of a batch that lost a deadlock or a
// serialization conflict to another writer.
const maxWriteAttempts = 5

// WriteRecords stores rs and rolls them up, in one transaction. A record
// whose RequestID is already stored (by this or another gateway, or
// earlier in rs) is skipped, in records and in the rollups: the first
// write wins, so a retried batch is never counted twice. An empty batch
// does nothing. A record without a RequestID fails the whole batch with
// EINVALID before anything is written.
func (s *Postgres) WriteRecords(ctx context.Context, rs []llmflow.Record) error {
	if len(rs) == 0 {
		return nil
	}
	for i := range rs {
		if rs[i].RequestID == "" {
			return &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("record %d: request id is required", i)}
		}
	}
	src := func(i int) ([]any, error) {
		r := &rs[i]
		return []any{
			r.RequestID, pgTime(r.Time), r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream,
			r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours,
			int64(r.Status), string(r.Outcome), r.Estimated, r.Stream, int64(r.Priority),
			r.Latency.Microseconds(), r.TTFB.Microseconds(), nonNil(r.Tags), int32(i),
		}, nil
	}
	var err error
	for attempt := 1; ; attempt++ {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", "llmflow_batch"}, pgBatchColumns, pgx.CopyFromSlice(len(rs), src)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, pgMoveBatch)
			return err
		})
		if code := pgCode(err); err == nil || attempt == maxWriteAttempts || (code != "40P01" && code != "40001") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("write records: %w", ctx.Err())
		case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("write records %s…: %w", rs[0].RequestID, err)
	}
	return nil
}

// Records returns the records with from ≤ Time < to, ordered by Time then
// RequestID. Bounds finer than a microsecond are compared exactly against
// the stored microseconds. It returns nil when nothing matches.
func (s *Postgres) Records(ctx context.Context, from, to time.Time) ([]llmflow.Record, error) {
	if !from.Before(to) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+recordCols+`
FROM records WHERE time >= $1 AND time < $2 ORDER BY time, request_id`, pgBound(from), pgBound(to))
	if err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	defer rows.Close()
	var rs []llmflow.Record
	for rows.Next() {
		var (
			r         llmflow.Record
			lat, ttfb int64
			outcome   string
		)
		if err := rows.Scan(&r.RequestID, &r.Time, &r.KeyID, &r.Project, &r.Team, &r.Org, &r.Model, &r.Pool, &r.Upstream,
			&r.PromptTokens, &r.CompletionTokens, &r.CachedTokens, &r.GPUHours,
			&r.Status, &outcome, &r.Estimated, &r.Stream, &r.Priority, &lat, &ttfb, &r.Tags); err != nil {
			return nil, fmt.Errorf("read records: %w", err)
		}
		r.Time = r.Time.UTC()
		r.Outcome = llmflow.Outcome(outcome)
		r.Latency = time.Duration(lat) * time.Microsecond
		r.TTFB = time.Duration(ttfb) * time.Microsecond
		r.Tags = nilIfEmpty(r.Tags)
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read records: %w", err)
	}
	return rs, nil
}

// PurgeRecords deletes the raw records with Time < before and returns how
// many it deleted. The rollups stay. It deletes in steps of their own
// transactions, so accounting writes interleave with a large purge; a
// purge stopped by ctx keeps what it deleted so far (and returns that
// count with the error).
func (s *Postgres) PurgeRecords(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	bound := pgBound(before)
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM records WHERE request_id IN (
	SELECT request_id FROM records WHERE time < $1 ORDER BY time LIMIT $2)`, bound, purgeChunk)
		if err != nil {
			return total, fmt.Errorf("purge records: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeChunk {
			return total, nil
		}
	}
}

// Rollups returns the hourly rollups of the hours starting in [from, to),
// selected and grouped by f, ordered by hour then the kept dimensions. It
// reads rollups only, never raw records.
func (s *Postgres) Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, false, from, to, f)
}

// RollupsByTag is Rollups per tag: a request with several tags counts once
// under each distinct tag, a request without tags under the tag "".
func (s *Postgres) RollupsByTag(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, true, from, to, f)
}

// Spend returns the rollups f selects: from RollupsByTag when f needs the
// tags (llmflow.RollupFilter.NeedsTags), from Rollups otherwise.
func (s *Postgres) Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return s.rollups(ctx, f.NeedsTags(), from, to, f)
}

func (s *Postgres) rollups(ctx context.Context, byTag bool, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	q, args, err := postgresDialect.rollupQuery(byTag, f, from, to)
	if err != nil {
		return nil, err
	}
	if !from.Before(to) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	defer rows.Close()
	var out []llmflow.Rollup
	for rows.Next() {
		var (
			r    llmflow.Rollup
			hour *time.Time
		)
		if err := rows.Scan(append([]any{&hour}, rollupDest(&r)...)...); err != nil {
			return nil, fmt.Errorf("read rollups: %w", err)
		}
		if hour != nil {
			r.Hour = hour.UTC()
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	return out, nil
}
