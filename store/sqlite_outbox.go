package store

import (
	"context"
	"strings"

	"github.com/go-llmflow/llmflow"
)

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
	out, err := all(ctx, s.sqlDB.write, "claim outbox", q, args, scanOutbox)
	sortOutbox(out)
	return out, err
}
