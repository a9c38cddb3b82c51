package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// The SQL of both backends is written once, against sqlDB, with ?
// parameters (rebind turns them into $1, $2, … for PostgreSQL); each
// backend adapts its driver to it (sqlite_db.go, postgres_db.go) and keeps
// in its own files only what really differs: the schema (migrations), the
// bulk writes (SQLite's multi-row INSERT into a staging table, PostgreSQL's
// COPY) and the outbox claim (SQLite's single writer, PostgreSQL's FOR
// UPDATE SKIP LOCKED).

// storeUnavailable wraps err, a database that cannot answer now, so that
// it is told as the store being unavailable (llmflow.EUNAVAILABLE: 503
// with Retry-After where answered, never 500); errors.Is and As still
// find err.
func storeUnavailable(err error) error {
	var le *llmflow.Error
	if err == nil || errors.As(err, &le) {
		return err
	}
	return &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "store unavailable; retry later", Err: err}
}

// querier runs SQL written with ? parameters.
type querier interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	query(ctx context.Context, q string, args ...any) (dbRows, error)
	// copyFrom inserts rows into table's cols: PostgreSQL's COPY, a
	// prepared INSERT in SQLite.
	copyFrom(ctx context.Context, table string, cols []string, rows [][]any) error
}

type dbRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// sqlDB is a backend as the shared SQL needs it: how to run SQL, and the
// few ways its column types differ.
type sqlDB struct {
	read  querier // reads (SQLite: the read-only pool)
	write querier // a write of one statement, outside any transaction
	// tx runs f in one write transaction.
	tx func(ctx context.Context, f func(q querier) error) error
	// time converts a time to the backend's column type (whole
	// microseconds); nullTime the same, zero as NULL; bound a range bound,
	// rounded up to the next microsecond so that a stored time is ≥ the
	// bound exactly when it is at or after the time.
	time     func(time.Time) any
	nullTime func(time.Time) any
	bound    func(time.Time) any
	// list is a list column's value (key and record tags, account
	// members, a share path): JSON text in SQLite, text[] in PostgreSQL;
	// listDest scans one into *[]string ([] as an empty slice).
	list     func([]string) any
	listDest func(*[]string) any
	// unique reports whether err is a unique-constraint violation, and
	// primary whether it is one of the primary key.
	unique  func(err error) bool
	primary func(err error) bool
	// rowID is the column that finds a row of records fastest (SQLite:
	// rowid).
	rowID string
	// lockAccounts serialises two imports replacing the accounts (SQLite
	// has one writer already: "").
	lockAccounts string
	// nullHour is the hour of a rollup summed over a whole range: a NULL
	// of the hour column's type.
	nullHour string
	// sumCast is appended to the sum of an integer column to make it an
	// integer again (PostgreSQL's sum(bigint) is numeric).
	sumCast string
	// nestRollups sums the rollups in two steps when it helps a backend
	// without hash aggregation (see rollupQuery).
	nestRollups bool
}

// rebind rewrites ? parameters as $1, $2, … for PostgreSQL.
func rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// params returns n ? parameters, comma-separated.
func params(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// dbTime scans a time column of either backend: unix microseconds
// (SQLite), a time.Time (PostgreSQL), or NULL (zero).
type dbTime struct{ t *time.Time }

func (d dbTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.t = time.Time{}
	case int64:
		*d.t = fromMicros(v)
	case time.Time:
		*d.t = v.UTC()
	default:
		return fmt.Errorf("time column: unexpected %T", src)
	}
	return nil
}

// jsonList scans a list stored as a JSON array of strings (SQLite).
type jsonList struct{ l *[]string }

func (j jsonList) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("list column: unexpected %T", src)
	}
	*j.l = nil
	if err := json.Unmarshal(b, j.l); err != nil {
		return fmt.Errorf("list column %q: %w", b, err)
	}
	if *j.l == nil {
		*j.l = []string{}
	}
	return nil
}

// one scans the single row of a read into dest; llmflow.ErrNotFound when
// there is none. Other errors are wrapped with what.
func (a *sqlDB) one(ctx context.Context, what string, q string, args []any, dest ...any) error {
	return queryOne(ctx, a.read, what, q, args, dest...)
}

// queryOne is one on q (a write's RETURNING, or a read in a transaction).
func queryOne(ctx context.Context, q querier, what string, sql string, args []any, dest ...any) error {
	rows, err := q.query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return llmflow.ErrNotFound
	}
	if err := rows.Scan(dest...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return rows.Err()
}

// all reads every row of a read with scan (which scans the current row of
// rows); nil when there are none. Errors are wrapped with what.
func all[T any](ctx context.Context, q querier, what string, sql string, args []any, scan func(rows dbRows) (T, error)) ([]T, error) {
	rows, err := q.query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (T, error) { return scan(rows) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// execOne runs a write that must change one row: llmflow.ErrNotFound when
// it changes none.
func execOne(ctx context.Context, q querier, what string, sql string, args ...any) error {
	n, err := q.exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

// ceilMicros rounds t up to the next microsecond, so that for a stored
// time us (whole microseconds) us >= ceilMicros(t) exactly when the stored
// time is at or after t.
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return us
}

// nilIfEmpty returns nil for an empty list: a list read back empty is nil
// (Key.Tags, Record.Tags, Account.Members).
func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
