package store

import (
	"fmt"
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

// listOutboxQuery is the ListOutbox query of every backend, in d's SQL.
func (d dialect) listOutboxQuery(f llmflow.OutboxFilter) (string, []any) {
	var where []string
	var args []any
	if f.ID != "" {
		args = append(args, f.ID)
		where = append(where, "id = "+d.placeholder(len(args)))
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
		q += ` LIMIT ` + d.placeholder(len(args))
	}
	return q, args
}

// The statements below are the outbox's in every backend, in d's SQL;
// only the claim differs (see each backend's ClaimOutbox).

// enqueueOutboxQuery inserts m unless its (ID, Channel) is stored.
func (d dialect) enqueueOutboxQuery(m llmflow.OutboxMessage) (string, []any) {
	return `INSERT INTO outbox (id, channel, payload, created_at, next_attempt_at)
VALUES (` + d.placeholders(1, 5) + `) ON CONFLICT (id, channel) DO NOTHING`,
		[]any{m.ID, m.Channel, string(m.Payload), d.at(m.CreatedAt), d.at(m.NextAttemptAt)}
}

// completeOutboxQuery marks a message delivered at at, if token holds it.
func (d dialect) completeOutboxQuery(id, channel, token string, at time.Time) (string, []any) {
	return `UPDATE outbox SET delivered_at = ` + d.placeholder(1) + `, lease_token = '', lease_until = NULL, last_error = ''
WHERE id = ` + d.placeholder(2) + ` AND channel = ` + d.placeholder(3) + ` AND lease_token = ` + d.placeholder(4) + ` AND delivered_at IS NULL`,
		[]any{d.at(at), id, channel, token}
}

// retryOutboxQuery makes a message held by token due again at next.
func (d dialect) retryOutboxQuery(id, channel, token string, next time.Time, lastErr string) (string, []any) {
	return `UPDATE outbox SET next_attempt_at = ` + d.placeholder(1) + `, last_error = ` + d.placeholder(2) + `, lease_token = '', lease_until = NULL
WHERE id = ` + d.placeholder(3) + ` AND channel = ` + d.placeholder(4) + ` AND lease_token = ` + d.placeholder(5) + ` AND delivered_at IS NULL`,
		[]any{d.at(next), cutError(lastErr), id, channel, token}
}

// pendingOutboxQuery counts the undelivered messages per channel.
const pendingOutboxQuery = `SELECT channel, count(*) FROM outbox WHERE delivered_at IS NULL GROUP BY channel`

// scanPending reads pendingOutboxQuery's rows (a *sql.Rows or pgx.Rows).
func scanPending(rows interface {
	Next() bool
	Err() error
	Scan(dest ...any) error
}) (map[string]int64, error) {
	type pending struct {
		ch string
		n  int64
	}
	ps, err := scanRows(rows, func() (p pending, err error) { return p, rows.Scan(&p.ch, &p.n) })
	if err != nil {
		return nil, fmt.Errorf("pending outbox: %w", err)
	}
	out := make(map[string]int64, len(ps))
	for _, p := range ps {
		out[p.ch] = p.n
	}
	return out, nil
}

// leaseLost maps a Complete or Retry that changed n rows (or failed with
// err) to its result: llmflow.ErrLeaseLost when none.
func leaseLost(what string, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return llmflow.ErrLeaseLost
	}
	return nil
}
