package store

import (
	"context"

	"github.com/go-llmflow/llmflow"
)

// ClaimOutbox leases to c.Token, until c.LeaseUntil, at most c.Limit due
// messages of c.Channels that are undelivered and not held by an
// unexpired lease, counting one more attempt on each, and returns them
// ordered by NextAttemptAt, ID, Channel. FOR UPDATE SKIP LOCKED keeps
// concurrent claims, from this gateway or others, disjoint.
func (s *Postgres) ClaimOutbox(ctx context.Context, c llmflow.OutboxClaim) ([]llmflow.OutboxMessage, error) {
	if err := checkOutboxClaim(c); err != nil {
		return nil, err
	}
	now := pgTime(c.Now)
	out, err := all(ctx, s.sqlDB.write, "claim outbox", `UPDATE outbox o SET lease_token = ?, lease_until = ?, attempts = o.attempts + 1
FROM (SELECT id, channel FROM outbox
	WHERE delivered_at IS NULL AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until <= ?)
	AND channel = ANY(?)
	ORDER BY next_attempt_at, id, channel LIMIT ?
	FOR UPDATE SKIP LOCKED) due
WHERE o.id = due.id AND o.channel = due.channel
RETURNING o.id, o.channel, o.payload, o.created_at, o.next_attempt_at, o.attempts, o.last_error, o.lease_token, o.lease_until, o.delivered_at`,
		[]any{c.Token, pgTime(c.LeaseUntil), now, now, c.Channels, c.Limit}, scanOutbox)
	sortOutbox(out)
	return out, err
}
