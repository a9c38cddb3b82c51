package store

import (
	"context"
	"database/sql"
	"time"

	sqlite3 "modernc.org/sqlite/lib"
)

// sqlQuerier runs the admin SQL on a database/sql pool or transaction.
type sqlQuerier struct {
	db interface {
		ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	}
}

func (s sqlQuerier) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQuerier) query(ctx context.Context, q string, args ...any) (adminRows, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// newSQLiteAdmin is the admin SQL over the store's two pools: reads on
// the read-only pool, writes in BEGIN IMMEDIATE transactions on the
// writer.
func newSQLiteAdmin(read, write *sql.DB) *adminDB {
	return &adminDB{
		read: sqlQuerier{read},
		tx: func(ctx context.Context, f func(q adminQuerier) error) error {
			tx, err := write.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := f(sqlQuerier{tx}); err != nil {
				return err
			}
			return tx.Commit()
		},
		time:     func(t time.Time) any { return toMicros(t) },
		nullTime: func(t time.Time) any { return nullMicros(t) },
		unique: func(err error) bool {
			c := sqliteCode(err)
			return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
		},
	}
}
