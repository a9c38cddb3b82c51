package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgQuerier runs the admin SQL (? parameters, rebound) on a pool or a
// transaction.
type pgQuerier struct {
	db interface {
		Exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, q string, args ...any) (pgx.Rows, error)
	}
}

func (p pgQuerier) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.db.Exec(ctx, rebind(q), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p pgQuerier) query(ctx context.Context, q string, args ...any) (adminRows, error) {
	rows, err := p.db.Query(ctx, rebind(q), args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func newPostgresAdmin(s *Postgres) *adminDB {
	return &adminDB{
		read: pgQuerier{s.pool},
		tx: func(ctx context.Context, f func(q adminQuerier) error) error {
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return f(pgQuerier{tx}) })
		},
		time:     func(t time.Time) any { return pgTime(t) },
		nullTime: func(t time.Time) any { return pgNullTime(t) },
		unique: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505"
		},
	}
}
