package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-llmflow/llmflow"
)

// EnqueueOutbox stores msgs in one transaction, leaving alone every
// message whose (ID, Channel) is stored already (by this gateway or
// another), and returns the messages it inserted. A zero NextAttemptAt
// means CreatedAt. Nothing is stored (EINVALID) when one message is
// invalid.
func (s *Postgres) EnqueueOutbox(ctx context.Context, msgs []llmflow.OutboxMessage) ([]llmflow.OutboxMessage, error) {
	for _, m := range msgs {
		if err := checkOutboxMessage(m); err != nil {
			return nil, err
		}
	}
	var inserted []llmflow.OutboxMessage
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		inserted = inserted[:0]
		for _, m := range msgs {
			m = nextAttempt(m)
			q, args := postgresDialect.enqueueOutboxQuery(m)
			tag, err := tx.Exec(ctx, q, args...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				inserted = append(inserted, m)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("enqueue outbox: %w", err)
	}
	if len(inserted) == 0 {
		return nil, nil
	}
	return inserted, nil
}

// ClaimOutbox leases to c.Token, until c.LeaseUntil, at most c.Limit due
// messages of c.Channels that are undelivered and not held by an
// unexpired lease, counting one more attempt on each, and returns them
// ordered by NextAttemptAt, ID, Channel. FOR UPDATE SKIP LOCKED keeps
// concurrent claims, from this gateway or others, disjoint.
func (s *Postgres) ClaimOutbox(ctx context.Context, c llmflow.OutboxClaim) ([]llmflow.OutboxMessage, error) {
	if err := checkOutboxClaim(c); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `UPDATE outbox o SET lease_token = $1, lease_until = $2, attempts = o.attempts + 1
FROM (SELECT id, channel FROM outbox
	WHERE delivered_at IS NULL AND next_attempt_at <= $3 AND (lease_until IS NULL OR lease_until <= $3)
	AND channel = ANY($4)
	ORDER BY next_attempt_at, id, channel LIMIT $5
	FOR UPDATE SKIP LOCKED) due
WHERE o.id = due.id AND o.channel = due.channel
RETURNING o.id, o.channel, o.payload, o.created_at, o.next_attempt_at, o.attempts, o.last_error, o.lease_token, o.lease_until, o.delivered_at`,
		c.Token, pgTime(c.LeaseUntil), pgTime(c.Now), c.Channels, c.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.OutboxMessage, error) { return pgScanOutbox(rows) })
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	sortOutbox(out)
	return out, nil
}

// CompleteOutbox marks the message delivered at the given time, if token
// holds it; llmflow.ErrLeaseLost otherwise (another claim holds it, it is
// delivered, or it does not exist).
func (s *Postgres) CompleteOutbox(ctx context.Context, id, channel, token string, at time.Time) error {
	if token == "" {
		return llmflow.ErrLeaseLost
	}
	q, args := postgresDialect.completeOutboxQuery(id, channel, token, at)
	res, err := s.pool.Exec(ctx, q, args...)
	return pgLeaseResult("complete outbox", res, err)
}

// RetryOutbox records a failed attempt of the message held by token: it
// is due again at next, with lastErr (cut to MaxOutboxErrorBytes), and
// nobody holds it. llmflow.ErrLeaseLost when token does not hold it.
func (s *Postgres) RetryOutbox(ctx context.Context, id, channel, token string, next time.Time, lastErr string) error {
	if token == "" {
		return llmflow.ErrLeaseLost
	}
	q, args := postgresDialect.retryOutboxQuery(id, channel, token, next, lastErr)
	res, err := s.pool.Exec(ctx, q, args...)
	return pgLeaseResult("retry outbox", res, err)
}

func pgLeaseResult(what string, tag pgconn.CommandTag, err error) error {
	return leaseLost(what, tag.RowsAffected(), err)
}

// PendingOutbox counts the undelivered messages per channel (channels
// with none are absent).
func (s *Postgres) PendingOutbox(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, pendingOutboxQuery)
	if err != nil {
		return nil, fmt.Errorf("pending outbox: %w", err)
	}
	defer rows.Close()
	return scanPending(rows)
}

// ListOutbox returns the messages matching f ordered by CreatedAt, ID,
// Channel; nil when none.
func (s *Postgres) ListOutbox(ctx context.Context, f llmflow.OutboxFilter) ([]llmflow.OutboxMessage, error) {
	q, args := postgresDialect.listOutboxQuery(f)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.OutboxMessage, error) { return pgScanOutbox(rows) })
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return out, nil
}

func pgScanOutbox(row pgx.Row) (llmflow.OutboxMessage, error) {
	var (
		m                llmflow.OutboxMessage
		payload          string
		until, delivered *time.Time
	)
	if err := row.Scan(&m.ID, &m.Channel, &payload, &m.CreatedAt, &m.NextAttemptAt, &m.Attempts, &m.LastError, &m.LeaseToken, &until, &delivered); err != nil {
		return m, err
	}
	m.Payload = []byte(payload)
	m.CreatedAt, m.NextAttemptAt = m.CreatedAt.UTC(), m.NextAttemptAt.UTC()
	if until != nil {
		m.LeaseUntil = until.UTC()
	}
	if delivered != nil {
		m.DeliveredAt = delivered.UTC()
	}
	return m, nil
}
