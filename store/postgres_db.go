package store

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgQuerier runs the shared SQL (? parameters, rebound) on a pool or a
// transaction.
type pgQuerier struct {
	db interface {
		Exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, q string, args ...any) (pgx.Rows, error)
		CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error)
	}
}

func (p pgQuerier) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.db.Exec(ctx, rebind(q), args...)
	if err != nil {
		return 0, pgUnavailable(err)
	}
	return tag.RowsAffected(), nil
}

func (p pgQuerier) query(ctx context.Context, q string, args ...any) (dbRows, error) {
	rows, err := p.db.Query(ctx, rebind(q), args...)
	if err != nil {
		return nil, pgUnavailable(err)
	}
	return rows, nil
}

// pgUnavailable marks an error of a server that cannot be reached, went
// away, or is slower than the caller waits, as the store being
// unavailable (503, not 500).
func pgUnavailable(err error) error {
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return storeUnavailable(err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || pe.Code == "53300") {
		return storeUnavailable(err) // connection exceptions, shutting down, too many connections
	}
	return err
}

func (p pgQuerier) copyFrom(ctx context.Context, table string, cols []string, rows [][]any) error {
	_, err := p.db.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows))
	return err
}

func newPostgresDB(s *Postgres) *sqlDB {
	return &sqlDB{
		read:  pgQuerier{s.pool},
		write: pgQuerier{s.pool},
		tx: func(ctx context.Context, f func(q querier) error) error {
			return pgUnavailable(pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return f(pgQuerier{tx}) }))
		},
		time:     func(t time.Time) any { return pgTime(t) },
		nullTime: func(t time.Time) any { return pgNullTime(t) },
		bound:    func(t time.Time) any { return pgBound(t) },
		list:     func(l []string) any { return nonNil(l) },
		listDest: func(l *[]string) any { return l },
		unique: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505"
		},
		primary: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505" && strings.HasSuffix(pe.ConstraintName, "_pkey")
		},
		rowID:        "request_id",
		lockAccounts: `LOCK TABLE accounts IN EXCLUSIVE MODE`,
		nullHour:     "NULL::timestamptz",
		sumCast:      "::bigint",
	}
}
