package main

import (
	"context"
	"encoding/hex"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow"
)

// adminChanged is the invalidation message of an admin write (keys are
// announced by their hash in hex); treeChanged that of a Slurm import
// that changed the stored account tree.
const (
	adminChanged = "admin"
	treeChanged  = "tree"
)

// announceTree tells the other replicas that this one's Slurm import
// changed the stored tree: they serve it at once (listenInvalidations),
// not at their own next import.
func (s *server) announceTree(ctx context.Context) {
	if err := s.counters.rdb.Publish(context.WithoutCancel(ctx), s.counters.channel(), treeChanged).Err(); err != nil {
		s.log.Warn("slurm import not announced to the other replicas (redis): they follow at their next import", "err", err)
	}
}

// AppendAudit records an admin write (every admin write is audited once
// it is done) and announces it to the other replicas, which reload their
// admin account changes and team model lists at once instead of at their
// next 5 s check.
func (r *revokeBroadcast) AppendAudit(ctx context.Context, e llmflow.AuditEntry) error {
	err := r.appStore.AppendAudit(ctx, e)
	if perr := r.s.counters.rdb.Publish(context.WithoutCancel(ctx), r.s.counters.channel(), adminChanged).Err(); perr != nil {
		r.s.log.Warn("admin write not announced to the other replicas (redis): they see it within 5 s", "action", e.Action, "err", perr)
	}
	return err
}

// listenInvalidations applies what the replicas announce on the
// invalidation channel to the serving gateway until ctx ends: a key hash
// drops that key from the caches, "admin" reloads the admin state. Each
// (re)subscription — the first, and after the connection to Redis broke,
// when announcements may have been missed — empties the key caches and
// reloads the admin state.
func (s *server) listenInvalidations(ctx context.Context) {
	if s.counters.rdb == nil {
		return
	}
	sub := s.counters.rdb.Subscribe(ctx, s.counters.channel())
	go func() {
		defer sub.Close()
		first := true
		for {
			msg, err := sub.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// go-redis reconnects and subscribes again on the next Receive
				time.Sleep(100 * time.Millisecond)
				continue
			}
			gw := s.cur.Load()
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				if !first {
					s.log.Info("invalidation channel subscribed again: key caches emptied, admin state reloaded")
				}
				first = false
				gw.ForgetAllKeys()
				if err := gw.AdminChanged(ctx); err != nil {
					s.log.Warn("admin state not reloaded after resubscribing", "err", err)
				}
			case *redis.Message:
				if m.Payload == treeChanged {
					if imp := s.imp.Load(); imp != nil {
						if err := imp.reload(ctx, gw); err != nil {
							s.log.Warn("account tree not reloaded after another replica's slurm import", "err", err)
						}
					}
					continue
				}
				if m.Payload == adminChanged {
					if err := gw.AdminChanged(ctx); err != nil {
						s.log.Warn("admin state not reloaded after another replica's write", "err", err)
					}
					continue
				}
				var h [32]byte
				if b, err := hex.DecodeString(m.Payload); err == nil && len(b) == len(h) {
					copy(h[:], b)
					gw.ForgetKey(h)
				}
			}
		}
	}()
}
