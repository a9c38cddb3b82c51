package store

import (
	"context"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Heartbeat renews the heartbeat of the named replica until now + ttl,
// forgets the replicas whose heartbeat expired before now, and returns
// how many are live, this one included. Replicas sharing the store
// without Redis each enforce a 1/live slice of every budget and key
// limit. Times are the callers' clocks: replicas whose clocks differ by
// more than ttl see each other come and go.
func (a *sqlDB) Heartbeat(ctx context.Context, replica string, now time.Time, ttl time.Duration) (int, error) {
	if replica == "" || ttl <= 0 || now.IsZero() {
		return 0, llmflow.Errorf(llmflow.EINVALID, "heartbeat: a replica name, a time and a positive ttl are required")
	}
	var live int64
	err := a.tx(ctx, func(q querier) error {
		if _, err := q.exec(ctx, `INSERT INTO replicas (name, expires_at) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET expires_at = excluded.expires_at`, replica, a.time(now.Add(ttl))); err != nil {
			return err
		}
		if _, err := q.exec(ctx, `DELETE FROM replicas WHERE expires_at < ?`, a.time(now)); err != nil {
			return err
		}
		return queryOne(ctx, q, "live replicas", `SELECT count(*) FROM replicas`, nil, &live)
	})
	if err != nil {
		return 0, fmt.Errorf("heartbeat: %w", err)
	}
	return int(live), nil
}

// Leave forgets the named replica's heartbeat (a clean stop): the others
// count one less at their next heartbeat.
func (a *sqlDB) Leave(ctx context.Context, replica string) error {
	if _, err := a.write.exec(ctx, `DELETE FROM replicas WHERE name = ?`, replica); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}
