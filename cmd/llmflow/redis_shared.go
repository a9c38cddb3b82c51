package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/redisstate"
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

// replicaName names this process among the replicas (host, pid and a
// random part: a restarted process is a new replica).
func replicaName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), redisstate.NewReplicaID()[:8])
}

// SharedHealth implements gateway.SharedState: "fallback" while any
// pool's counters fall back to this replica's slice.
func (c *sharedCounters) SharedHealth() gateway.SharedHealth {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := gateway.SharedHealth{Status: "ok", Replicas: 1}
	for _, m := range c.m {
		r, ok := m.(*redisstate.Counters)
		if !ok {
			continue
		}
		x := r.Health()
		h.Replicas = max(h.Replicas, x.Replicas)
		if x.Fallback {
			h.Status, h.Error = "fallback", x.Err
			if h.Since == nil || x.Since.Before(*h.Since) {
				since := x.Since.UTC()
				h.Since = &since
			}
		}
	}
	if c.ledger != nil {
		if x := c.ledger.Health(); x.Fallback {
			h.LedgerFallback = true
			if h.Status == "ok" {
				since := x.Since.UTC()
				h.Status, h.Error, h.Since = "fallback", "budgets ledger: "+x.Err, &since
			}
		}
	}
	return h
}

// registerSharedMetrics exports the state of the shared counters.
func registerSharedMetrics(reg *prometheus.Registry, c *sharedCounters) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "llmflow_redis_fallback",
		Help: "1 while Redis is away and this replica admits against its own slice of each reservation (reservation / llmflow_redis_replicas).",
	}, func() float64 {
		if c.SharedHealth().Status != "ok" {
			return 1
		}
		return 0
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "llmflow_redis_replicas",
		Help: "Live gateway replicas last seen in Redis (leases).",
	}, func() float64 { return float64(c.SharedHealth().Replicas) }))
}

// redisLogger sends go-redis's own messages (a failed dial, each retry)
// to the log at debug level: the fallback's start and end are logged
// once by redisstate, at warn and info.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "go-redis")
}
