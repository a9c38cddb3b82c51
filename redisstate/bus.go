package redisstate

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/redis/go-redis/v9"
)

// Bus announces to every replica (this one too) the changes a cache must
// not outlive, on one Redis publish/subscribe channel: a key whose
// revocation, activation or limits changed (its hash, in hex), an admin
// write ("admin": reload the admin state, team model lists, routing), and
// a Slurm import that changed the stored account tree ("tree"). It is the
// replicas' Notifier; a single replica needs none.
//
// Publish/subscribe delivers at most once: a replica cut from Redis misses
// what was announced meanwhile, so each (re)subscription tells the
// receiver to forget every cached key and reload the admin state (Resync).
// An announcement that cannot be published is logged; the change is
// stored, and the other replicas see it when their cache entry expires (a
// minute at most for keys, 5 s for the admin state).
type Bus struct {
	rdb     redis.UniversalClient
	channel string
	timeout time.Duration
	log     *slog.Logger
}

// Messages on the channel other than key hashes.
const (
	msgAdmin = "admin"
	msgTree  = "tree"
)

// NewBus returns the bus on channel; timeout bounds each publish.
func NewBus(rdb redis.UniversalClient, channel string, timeout time.Duration, log *slog.Logger) *Bus {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Bus{rdb: rdb, channel: channel, timeout: timeout, log: log}
}

// KeyChanged announces that the key whose secret hashes to hash changed
// in the store (revoked, disabled or enabled, new limits or tags).
func (b *Bus) KeyChanged(ctx context.Context, hash [32]byte) {
	b.publish(ctx, hex.EncodeToString(hash[:]), "key change not announced to the other replicas (redis): they see it when their cached key expires (1 min)")
}

// AdminChanged announces an admin write (accounts, users, roles, model
// lists, routing, budgets).
func (b *Bus) AdminChanged(ctx context.Context) {
	b.publish(ctx, msgAdmin, "admin write not announced to the other replicas (redis): they see it within 5 s")
}

// TreeChanged announces that a Slurm import changed the stored account
// tree: the other replicas serve it at once, not at their next import.
func (b *Bus) TreeChanged(ctx context.Context) {
	b.publish(ctx, msgTree, "slurm import not announced to the other replicas (redis): they follow at their next import")
}

func (b *Bus) publish(ctx context.Context, msg, failed string) {
	if err := b.send(ctx, msg); err != nil {
		b.log.Warn(failed, "err", err)
	}
}

func (b *Bus) send(ctx context.Context, msg string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	return b.rdb.Publish(ctx, b.channel, msg).Err()
}

// AnnounceTree tells the gateways listening on the bus of rc's Redis
// (every replica with that redis block) that the stored account tree
// changed, from outside a gateway (`llmflow sync`): they serve it at
// once. It returns how many gateways received the announcement.
func AnnounceTree(ctx context.Context, rc config.Redis) (int64, error) {
	rdb, err := dial(rc)
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, max(rc.Timeout, time.Second))
	defer cancel()
	n, err := rdb.Publish(ctx, busChannel(rc), msgTree).Result()
	if err != nil {
		return 0, fmt.Errorf("redis %s: %w", rc.Address, err)
	}
	return n, nil
}

// busChannel is the channel of the bus of rc's replicas (Shared.BusChannel
// of a Shared opened on rc).
func busChannel(rc config.Redis) string { return cmp.Or(rc.KeyPrefix, DefaultPrefix) + "invalidate" }

// Receiver applies what the replicas announce: the serving gateway and
// its control plane.
type Receiver interface {
	// ForgetKey drops a key from the caches.
	ForgetKey(hash [32]byte)
	// AdminChanged reloads the admin state.
	AdminChanged(ctx context.Context) error
	// TreeChanged serves the account tree stored now.
	TreeChanged(ctx context.Context) error
	// Resync forgets every cached key and reloads the admin state: the
	// replica may have missed announcements.
	Resync(ctx context.Context) error
}

// Listen applies the announcements to rcv until ctx ends; it returns at
// once, the subscription running in its own goroutine, and done is closed
// when that has ended. Each (re)subscription (the first, and after the
// connection to Redis broke) calls rcv.Resync.
func (b *Bus) Listen(ctx context.Context, rcv Receiver) (done <-chan struct{}) {
	sub := b.rdb.Subscribe(ctx, b.channel)
	// Receive does not return when ctx ends (go-redis reads without a
	// deadline): closing the subscription makes it return.
	unwatch := context.AfterFunc(ctx, func() { sub.Close() })
	d := make(chan struct{})
	go func() {
		defer close(d)
		defer unwatch()
		defer sub.Close()
		first := true
		for {
			msg, err := sub.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// go-redis reconnects and subscribes again on the next Receive
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return
				}
				continue
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				if !first {
					b.log.Info("invalidation channel subscribed again: key caches emptied, admin state reloaded")
				}
				first = false
				if err := rcv.Resync(ctx); err != nil {
					b.log.Warn("admin state not reloaded after (re)subscribing", "err", err)
				}
			case *redis.Message:
				b.apply(ctx, rcv, m.Payload)
			}
		}
	}()
	return d
}

func (b *Bus) apply(ctx context.Context, rcv Receiver, payload string) {
	switch payload {
	case msgTree:
		if err := rcv.TreeChanged(ctx); err != nil {
			b.log.Warn("account tree not reloaded after another replica's slurm import", "err", err)
		}
	case msgAdmin:
		if err := rcv.AdminChanged(ctx); err != nil {
			b.log.Warn("admin state not reloaded after another replica's write", "err", err)
		}
	default:
		var h [32]byte
		if len(payload) != 2*len(h) {
			return // not ours
		}
		if _, err := hex.Decode(h[:], []byte(payload)); err == nil {
			rcv.ForgetKey(h)
		}
	}
}
