package gateway

import (
	"context"
	"time"
)

// ForgetKey drops the key whose secret hashes to hash from this gateway's
// caches (valid keys and misses), so that the next request with it reads
// the store again: a key revoked through another replica stops working
// here at once instead of when its cache entry expires.
func (g *Gateway) ForgetKey(hash [32]byte) { g.auth.forget(hash) }

// ForgetAllKeys empties this gateway's key caches (valid keys and
// misses): a replica that was cut from the other replicas' announcements
// (its subscription to Redis broke) cannot know what it missed.
func (g *Gateway) ForgetAllKeys() {
	g.auth.hits.Clear()
	g.auth.misses.Clear()
}

// AdminChanged reloads the admin account changes and team model lists
// now, after another replica announced an admin write, rather than at the
// next adminReloadLoop tick (5 s). Admin principals need nothing: every
// admin request checks the store's admin generation (principalCache).
func (g *Gateway) AdminChanged(ctx context.Context) error {
	if g.admins == nil {
		return nil
	}
	_, err := g.reloadAdmin(ctx, -1) // generations start at 0: -1 is never current
	return err
}

// SharedState reports on the state a replica shares with the others
// (serve: the fair-share counters in Redis) for /healthz.
type SharedState interface {
	SharedHealth() SharedHealth
}

// SharedHealth is the "shared" block of /healthz.
type SharedHealth struct {
	// Status is "ok", or "fallback" while Redis is away: each replica
	// admits against its own slice of the reservations.
	Status string `json:"status"`
	// Replicas is the number of live replicas last seen (the divisor of
	// the slice).
	Replicas int64 `json:"replicas"`
	// Since is when the fallback began.
	Since *time.Time `json:"fallback_since,omitempty"`
	// Error is the last Redis failure during a fallback.
	Error string `json:"error,omitempty"`
	// LedgerFallback is true while the budget holds and key limits
	// are kept by this replica alone (Redis away).
	LedgerFallback bool `json:"ledger_fallback,omitempty"`
}
