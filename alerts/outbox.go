package alerts

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Store is the durable outbox: store.SQLite and store.Postgres.
type Store interface {
	EnqueueOutbox(ctx context.Context, msgs []llmflow.OutboxMessage) ([]llmflow.OutboxMessage, error)
	ClaimOutbox(ctx context.Context, c llmflow.OutboxClaim) ([]llmflow.OutboxMessage, error)
	CompleteOutbox(ctx context.Context, id, channel, token string, at time.Time) error
	RetryOutbox(ctx context.Context, id, channel, token string, next time.Time, lastErr string) error
	PendingOutbox(ctx context.Context) (map[string]int64, error)
	ListOutbox(ctx context.Context, f llmflow.OutboxFilter) ([]llmflow.OutboxMessage, error)
}

// Channel names.
const (
	ChannelWebhook = "webhook"
	ChannelEmail   = "email"
)

// maxSeen bounds the IDs an Outbox remembers as enqueued.
const maxSeen = 4096

// Outbox is where alerts are enqueued: Enqueue writes one outbox row per
// channel in one transaction. A nil *Outbox (alerts not configured)
// accepts and drops everything.
type Outbox struct {
	store    Store
	channels []string
	metrics  *Metrics
	wake     func()

	mu   sync.Mutex
	seen map[string]struct{} // IDs known to be in the store
}

// NewOutbox returns the outbox of store for the given channels (those of
// the configured senders, Channels). m may be nil. wake, when not nil, is
// called after an alert was written (Dispatcher.Wake), so that it goes
// out without waiting for the next poll.
func NewOutbox(store Store, channels []string, m *Metrics, wake func()) *Outbox {
	m.init(channels)
	return &Outbox{store: store, channels: channels, metrics: m, wake: wake, seen: map[string]struct{}{}}
}

// Enqueue writes a to the outbox for every channel, unless an alert with
// the same ID is there already (enqueued by this gateway before a
// restart, or by another gateway): then it does nothing. It returns once
// the alert is durably stored; delivery is the Dispatcher's. An alert
// this Outbox enqueued before costs no store write.
func (o *Outbox) Enqueue(ctx context.Context, a Alert) error {
	if o == nil || len(o.channels) == 0 {
		return nil
	}
	if err := a.Validate(); err != nil {
		return err
	}
	o.mu.Lock()
	_, done := o.seen[a.ID]
	o.mu.Unlock()
	if done {
		return nil
	}
	payload, err := a.encode()
	if err != nil {
		return fmt.Errorf("enqueue alert %s: %w", a.ID, err)
	}
	msgs := make([]llmflow.OutboxMessage, len(o.channels))
	for i, ch := range o.channels {
		msgs[i] = llmflow.OutboxMessage{ID: a.ID, Channel: ch, Payload: payload, CreatedAt: a.At}
	}
	inserted, err := o.store.EnqueueOutbox(ctx, msgs)
	if err != nil {
		return fmt.Errorf("enqueue alert %s: %w", a.ID, err)
	}
	o.remember(a.ID)
	if o.metrics != nil {
		for _, m := range inserted {
			o.metrics.enqueued.WithLabelValues(m.Channel).Inc()
		}
	}
	if len(inserted) > 0 && o.wake != nil {
		o.wake()
	}
	return nil
}

// Enqueued reports whether an alert with this ID is in the outbox
// (delivered or not): a producer that restarts can ask instead of
// keeping its own mark.
func (o *Outbox) Enqueued(ctx context.Context, id string) (bool, error) {
	if o == nil {
		return false, nil
	}
	o.mu.Lock()
	_, done := o.seen[id]
	o.mu.Unlock()
	if done {
		return true, nil
	}
	ms, err := o.store.ListOutbox(ctx, llmflow.OutboxFilter{ID: id, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("alert %s: %w", id, err)
	}
	if len(ms) > 0 {
		o.remember(id)
	}
	return len(ms) > 0, nil
}

// remember adds id to the IDs known to be stored, forgetting them all
// when there are too many (the store stays the truth).
func (o *Outbox) remember(id string) {
	o.mu.Lock()
	if len(o.seen) >= maxSeen {
		clear(o.seen)
	}
	o.seen[id] = struct{}{}
	o.mu.Unlock()
}
