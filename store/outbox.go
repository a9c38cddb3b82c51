package store

import (
	"fmt"
	"strings"
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
