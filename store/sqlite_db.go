package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"
)

// sqlQuerier runs the shared SQL on a database/sql pool or transaction;
// a query found in stmts runs as that prepared statement.
type sqlQuerier struct {
	db interface {
		ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
		PrepareContext(ctx context.Context, q string) (*sql.Stmt, error)
	}
	stmts map[string]*sql.Stmt
}

func (s sqlQuerier) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, sqliteUnavailable(err)
	}
	return res.RowsAffected()
}

// sqliteUnavailable marks an error of a database that is locked or busy
// (another process holds it longer than the busy timeout), or slower than
// the caller waits, as the store being unavailable (503, not 500).
func sqliteUnavailable(err error) error {
	switch sqliteCode(err) & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return storeUnavailable(err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return storeUnavailable(err)
	}
	return err
}

func (s sqlQuerier) query(ctx context.Context, q string, args ...any) (dbRows, error) {
	var rows *sql.Rows
	var err error
	if st := s.stmts[q]; st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = s.db.QueryContext(ctx, q, args...)
	}
	if err != nil {
		return nil, sqliteUnavailable(err)
	}
	return sqlRows{rows}, nil
}

func (s sqlQuerier) copyFrom(ctx context.Context, table string, cols []string, rows [][]any) error {
	st, err := s.db.PrepareContext(ctx, `INSERT INTO `+table+` (`+strings.Join(cols, ", ")+`) VALUES (`+params(len(cols))+`)`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, r := range rows {
		if _, err := st.ExecContext(ctx, r...); err != nil {
			return err
		}
	}
	return nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// newSQLiteDB is the shared SQL over the store's two pools: reads on the
// read-only pool (with the prepared statements of reads), writes on the
// single writer, transactions BEGIN IMMEDIATE.
func newSQLiteDB(read, write *sql.DB, prepared map[string]*sql.Stmt) *sqlDB {
	return &sqlDB{
		read:  sqlQuerier{read, prepared},
		write: sqlQuerier{db: write},
		tx: func(ctx context.Context, f func(q querier) error) error {
			tx, err := write.BeginTx(ctx, nil)
			if err != nil {
				return sqliteUnavailable(err)
			}
			defer tx.Rollback()
			if err := f(sqlQuerier{db: tx}); err != nil {
				return err
			}
			return sqliteUnavailable(tx.Commit())
		},
		time:     func(t time.Time) any { return toMicros(t) },
		nullTime: func(t time.Time) any { return nullMicros(t) },
		bound:    func(t time.Time) any { return ceilMicros(t) },
		list: func(l []string) any {
			b, _ := json.Marshal(nonNil(l)) // strings: cannot fail
			return string(b)
		},
		listDest: func(l *[]string) any { return jsonList{l} },
		unique: func(err error) bool {
			c := sqliteCode(err)
			return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
		},
		primary:     func(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY },
		rowID:       "rowid",
		nullHour:    "NULL",
		nestRollups: true,
	}
}
