package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-llmflow/llmflow"
)

// The outbox (EnqueueOutbox, ClaimOutbox, CompleteOutbox, RetryOutbox,
// PendingOutbox, ListOutbox) is the same contract in both backends:
//
//   - (ID, Channel) is the key. Enqueueing a message whose key exists
//     leaves the stored one as it is, delivered or not, so a producer may
//     enqueue the same event again after a crash, a restart or from
//     another gateway.
//   - A claim leases the due, undelivered messages nobody else holds to
//     one token, atomically: two dispatchers claiming at once never get
//     the same message (SQLite: the write lock; PostgreSQL: FOR UPDATE
//     SKIP LOCKED). A lease that expires makes the message claimable
//     again: a crashed dispatcher delays a message, never loses it.
//   - Complete and Retry only act under the token that holds the message
//     (a lease that expired without another claim still holds it); any
//     other token gets llmflow.ErrLeaseLost. So a message is marked
//     delivered once, and a late dispatcher cannot undo a newer claim.

// checkOutboxMessage validates what EnqueueOutbox stores.
func checkOutboxMessage(m llmflow.OutboxMessage) error {
	switch {
	case m.ID == "" || len(m.ID) > llmflow.MaxOutboxIDBytes:
		return &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("outbox message id must have 1 to %d bytes", llmflow.MaxOutboxIDBytes), Param: "id"}
	case m.Channel == "":
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "outbox message channel is required", Param: "channel"}
	case len(m.Payload) > llmflow.MaxOutboxPayloadBytes:
		return &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("outbox payload is larger than %d bytes", llmflow.MaxOutboxPayloadBytes), Param: "payload"}
	case !utf8.Valid(m.Payload) || !utf8.ValidString(m.ID) || !utf8.ValidString(m.Channel):
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "outbox message id, channel and payload must be UTF-8"}
	case m.CreatedAt.IsZero():
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "outbox message creation time is required", Param: "created_at"}
	}
	return nil
}

// checkOutboxClaim validates a claim.
func checkOutboxClaim(c llmflow.OutboxClaim) error {
	switch {
	case len(c.Channels) == 0:
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "claim names no channel"}
	case c.Token == "":
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "claim token is required"}
	case c.Now.IsZero() || !c.LeaseUntil.After(c.Now):
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "claim lease must end after now"}
	case c.Limit < 1:
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "claim limit must be at least 1"}
	}
	return nil
}

// nextAttempt is when a newly enqueued message is first due.
func nextAttempt(m llmflow.OutboxMessage) llmflow.OutboxMessage {
	if m.NextAttemptAt.IsZero() {
		m.NextAttemptAt = m.CreatedAt
	}
	return m
}

// cutError bounds a stored LastError, on a rune boundary, without control
// characters (it is shown in listings and logs).
func cutError(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) <= llmflow.MaxOutboxErrorBytes {
		return s
	}
	i := llmflow.MaxOutboxErrorBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// outboxColumns are the columns of outbox in the order outboxDest reads
// them.
const outboxColumns = `id, channel, payload, created_at, next_attempt_at, attempts, last_error, lease_token, lease_until, delivered_at`

// EnqueueOutbox stores msgs in one transaction, leaving alone every
// message whose (ID, Channel) is stored already (by this gateway or
// another), and returns the messages it inserted. A zero NextAttemptAt
// means CreatedAt. Nothing is stored (EINVALID) when one message is
// invalid.
func (a *sqlDB) EnqueueOutbox(ctx context.Context, msgs []llmflow.OutboxMessage) ([]llmflow.OutboxMessage, error) {
	for _, m := range msgs {
		if err := checkOutboxMessage(m); err != nil {
			return nil, err
		}
	}
	var inserted []llmflow.OutboxMessage
	err := a.tx(ctx, func(q querier) error {
		inserted = inserted[:0]
		for _, m := range msgs {
			m = nextAttempt(m)
			n, err := q.exec(ctx, `INSERT INTO outbox (id, channel, payload, created_at, next_attempt_at)
VALUES (?, ?, ?, ?, ?) ON CONFLICT (id, channel) DO NOTHING`,
				m.ID, m.Channel, string(m.Payload), a.time(m.CreatedAt), a.time(m.NextAttemptAt))
			if err != nil {
				return err
			}
			if n == 1 {
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

// CompleteOutbox marks the message delivered at the given time, if token
// holds it; llmflow.ErrLeaseLost otherwise (another claim holds it, it is
// delivered, or it does not exist).
func (a *sqlDB) CompleteOutbox(ctx context.Context, id, channel, token string, at time.Time) error {
	if token == "" {
		return llmflow.ErrLeaseLost
	}
	n, err := a.write.exec(ctx, `UPDATE outbox SET delivered_at = ?, lease_token = '', lease_until = NULL, last_error = ''
WHERE id = ? AND channel = ? AND lease_token = ? AND delivered_at IS NULL`, a.time(at), id, channel, token)
	return leaseLost("complete outbox", n, err)
}

// RetryOutbox records a failed attempt of the message held by token: it
// is due again at next, with lastErr (cut to MaxOutboxErrorBytes), and
// nobody holds it. llmflow.ErrLeaseLost when token does not hold it.
func (a *sqlDB) RetryOutbox(ctx context.Context, id, channel, token string, next time.Time, lastErr string) error {
	if token == "" {
		return llmflow.ErrLeaseLost
	}
	n, err := a.write.exec(ctx, `UPDATE outbox SET next_attempt_at = ?, last_error = ?, lease_token = '', lease_until = NULL
WHERE id = ? AND channel = ? AND lease_token = ? AND delivered_at IS NULL`, a.time(next), cutError(lastErr), id, channel, token)
	return leaseLost("retry outbox", n, err)
}

// PendingOutbox counts the undelivered messages per channel (channels
// with none are absent).
func (a *sqlDB) PendingOutbox(ctx context.Context) (map[string]int64, error) {
	type pending struct {
		ch string
		n  int64
	}
	ps, err := all(ctx, a.read, "pending outbox", `SELECT channel, count(*) FROM outbox WHERE delivered_at IS NULL GROUP BY channel`, nil,
		func(rows dbRows) (p pending, err error) { return p, rows.Scan(&p.ch, &p.n) })
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(ps))
	for _, p := range ps {
		out[p.ch] = p.n
	}
	return out, nil
}

// ListOutbox returns the messages matching f ordered by CreatedAt, ID,
// Channel; nil when none.
func (a *sqlDB) ListOutbox(ctx context.Context, f llmflow.OutboxFilter) ([]llmflow.OutboxMessage, error) {
	var where []string
	var args []any
	if f.ID != "" {
		args = append(args, f.ID)
		where = append(where, "id = ?")
	}
	if f.Undelivered {
		where = append(where, "delivered_at IS NULL")
	}
	q := `SELECT ` + outboxColumns + ` FROM outbox`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at, id, channel`
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += ` LIMIT ?`
	}
	return all(ctx, a.read, "list outbox", q, args, scanOutbox)
}

// scanOutbox reads a row of outboxColumns.
func scanOutbox(rows dbRows) (llmflow.OutboxMessage, error) {
	var (
		m       llmflow.OutboxMessage
		payload string
	)
	err := rows.Scan(&m.ID, &m.Channel, &payload, dbTime{&m.CreatedAt}, dbTime{&m.NextAttemptAt}, &m.Attempts, &m.LastError, &m.LeaseToken,
		dbTime{&m.LeaseUntil}, dbTime{&m.DeliveredAt})
	m.Payload = []byte(payload)
	return m, err
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

// leaseLost maps a Complete or Retry that changed n rows (or failed with
// err) to its result: llmflow.ErrLeaseLost when nothing changed.
func leaseLost(what string, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return llmflow.ErrLeaseLost
	}
	return nil
}
