package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// outboxColumns are the columns of outbox in the order the scanners read
// them.
const outboxColumns = `id, channel, payload, created_at, next_attempt_at, attempts, last_error, lease_token, lease_until, delivered_at`

// EnqueueOutbox stores msgs in one transaction, leaving alone every
// message whose (ID, Channel) is stored already, and returns the messages
// it inserted. A zero NextAttemptAt means CreatedAt. Nothing is stored
// (EINVALID) when one message is invalid.
func (s *SQLite) EnqueueOutbox(ctx context.Context, msgs []llmflow.OutboxMessage) ([]llmflow.OutboxMessage, error) {
	for _, m := range msgs {
		if err := checkOutboxMessage(m); err != nil {
			return nil, err
		}
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("enqueue outbox: %w", err)
	}
	defer tx.Rollback()
	var inserted []llmflow.OutboxMessage
	for _, m := range msgs {
		m = nextAttempt(m)
		q, args := sqliteDialect.enqueueOutboxQuery(m)
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("enqueue outbox: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("enqueue outbox: %w", err)
		} else if n == 1 {
			inserted = append(inserted, m)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("enqueue outbox: %w", err)
	}
	return inserted, nil
}

// ClaimOutbox leases to c.Token, until c.LeaseUntil, at most c.Limit due
// messages of c.Channels that are undelivered and not held by an
// unexpired lease, counting one more attempt on each, and returns them
// ordered by NextAttemptAt, ID, Channel. The single write connection and
// BEGIN IMMEDIATE make the claim atomic against every other process on
// the file.
func (s *SQLite) ClaimOutbox(ctx context.Context, c llmflow.OutboxClaim) ([]llmflow.OutboxMessage, error) {
	if err := checkOutboxClaim(c); err != nil {
		return nil, err
	}
	now := toMicros(c.Now)
	args := []any{c.Token, toMicros(c.LeaseUntil), now, now}
	for _, ch := range c.Channels {
		args = append(args, ch)
	}
	args = append(args, c.Limit)
	q := `UPDATE outbox SET lease_token = ?, lease_until = ?, attempts = attempts + 1
WHERE rowid IN (SELECT rowid FROM outbox
	WHERE delivered_at IS NULL AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until <= ?)
	AND channel IN (` + strings.Repeat("?, ", len(c.Channels)-1) + `?)
	ORDER BY next_attempt_at, id, channel LIMIT ?)
RETURNING ` + outboxColumns
	rows, err := s.write.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.OutboxMessage, error) { return scanOutbox(rows) })
	if err != nil {
		return nil, fmt.Errorf("claim outbox: %w", err)
	}
	sortOutbox(out)
	return out, nil
}

// CompleteOutbox marks the message delivered at the given time, if token
// holds it; llmflow.ErrLeaseLost otherwise (another claim holds it, it is
// delivered, or it does not exist).
func (s *SQLite) CompleteOutbox(ctx context.Context, id, channel, token string, at time.Time) error {
	if token == "" {
		return llmflow.ErrLeaseLost
	}
	q, args := sqliteDialect.completeOutboxQuery(id, channel, token, at)
	res, err := s.write.ExecContext(ctx, q, args...)
	return leaseResult("complete outbox", res, err)
}

// RetryOutbox records a failed attempt of the message held by token: it
// is due again at next, with lastErr (cut to MaxOutboxErrorBytes), and
// nobody holds it. llmflow.ErrLeaseLost when token does not hold it.
func (s *SQLite) RetryOutbox(ctx context.Context, id, channel, token string, next time.Time, lastErr string) error {
	if token == "" {
		return llmflow.ErrLeaseLost
	}
	q, args := sqliteDialect.retryOutboxQuery(id, channel, token, next, lastErr)
	res, err := s.write.ExecContext(ctx, q, args...)
	return leaseResult("retry outbox", res, err)
}

func leaseResult(what string, res sql.Result, err error) error {
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	return leaseLost(what, n, err)
}

// PendingOutbox counts the undelivered messages per channel (channels
// with none are absent).
func (s *SQLite) PendingOutbox(ctx context.Context) (map[string]int64, error) {
	rows, err := s.read.QueryContext(ctx, pendingOutboxQuery)
	if err != nil {
		return nil, fmt.Errorf("pending outbox: %w", err)
	}
	defer rows.Close()
	return scanPending(rows)
}

// ListOutbox returns the messages matching f ordered by CreatedAt, ID,
// Channel; nil when none.
func (s *SQLite) ListOutbox(ctx context.Context, f llmflow.OutboxFilter) ([]llmflow.OutboxMessage, error) {
	q, args := sqliteDialect.listOutboxQuery(f)
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.OutboxMessage, error) { return scanOutbox(rows) })
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return out, nil
}

func scanOutbox(row rowScanner) (llmflow.OutboxMessage, error) {
	var (
		m                llmflow.OutboxMessage
		payload          string
		created, next    int64
		until, delivered sql.NullInt64
	)
	if err := row.Scan(&m.ID, &m.Channel, &payload, &created, &next, &m.Attempts, &m.LastError, &m.LeaseToken, &until, &delivered); err != nil {
		return m, err
	}
	m.Payload = []byte(payload)
	m.CreatedAt, m.NextAttemptAt = fromMicros(created), fromMicros(next)
	if until.Valid {
		m.LeaseUntil = fromMicros(until.Int64)
	}
	if delivered.Valid {
		m.DeliveredAt = fromMicros(delivered.Int64)
	}
	return m, nil
}

// sortOutbox orders claimed messages as a listing of due messages:
// NextAttemptAt, ID, Channel (RETURNING has no order).
func sortOutbox(ms []llmflow.OutboxMessage) {
	slices.SortFunc(ms, func(a, b llmflow.OutboxMessage) int {
		if c := a.NextAttemptAt.Compare(b.NextAttemptAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Channel, b.Channel)
	})
}
