package llmflow

import "time"

// OutboxMessage is one row of the durable outbox: one event (an alert) to
// deliver on one channel. The store keeps it until it is delivered and
// hands it to one dispatcher at a time under a lease, so that several
// gateways sharing a store, or a gateway restarted in the middle, deliver
// it once. (ID, Channel) is the key: enqueueing it again is a no-op.
type OutboxMessage struct {
	// ID is the event's idempotency key, chosen by the producer (one alert
	// per budget and period: "budget:42:2026-12-01T00:00:00Z:soft").
	ID string
	// Channel is where the message goes ("webhook", "email").
	Channel string
	// Payload is what to deliver, opaque to the store (JSON).
	Payload []byte

	CreatedAt     time.Time
	NextAttemptAt time.Time // due from this time on
	Attempts      int       // claims so far (a claim whose dispatcher crashed counts)
	LastError     string    // of the last failed attempt; "" when none

	// LeaseToken identifies the claim holding the message; LeaseUntil is
	// when that claim expires and another dispatcher may take it. Both
	// are zero when nobody holds it.
	LeaseToken string
	LeaseUntil time.Time

	DeliveredAt time.Time // zero until delivered
}

// Delivered reports whether the message has been delivered.
func (m OutboxMessage) Delivered() bool { return !m.DeliveredAt.IsZero() }

// OutboxClaim asks a store for the messages a dispatcher may deliver now:
// undelivered, due (NextAttemptAt ≤ Now), not held by an unexpired lease,
// on one of Channels. The store leases them to Token until LeaseUntil.
type OutboxClaim struct {
	Channels   []string
	Now        time.Time
	LeaseUntil time.Time
	Token      string // unique per claim
	Limit      int    // most messages returned, ≥ 1
}

// OutboxFilter selects messages in listings. Empty fields match everything.
type OutboxFilter struct {
	ID          string
	Undelivered bool // only the messages not delivered yet
	Limit       int  // 0 = no limit
}

// Limits of what a store accepts in an outbox message.
const (
	MaxOutboxIDBytes      = 512
	MaxOutboxPayloadBytes = 64 << 10
	// MaxOutboxErrorBytes is where a stored LastError is cut.
	MaxOutboxErrorBytes = 1024
)

// ErrLeaseLost is returned (code ECONFLICT) by a store asked to complete
// or retry an outbox message under a lease token that no longer holds it:
// the lease expired and another dispatcher claimed the message, or the
// message was delivered already.
var ErrLeaseLost = &Error{Code: ECONFLICT, Message: "outbox lease lost: the message is held by another claim or delivered"}
