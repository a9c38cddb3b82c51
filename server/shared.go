package server

import (
	"context"
	"log/slog"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/redisstate"
)

// sharedCounters keeps the state the gateways' admissions share for the
// life of the process (admission.Source), so a reload keeps the requests
// in flight and the usage: in this process, or with a redis block in
// Redis, shared by every replica (redisstate.Shared), with the bus that
// announces invalidations to them.
type sharedCounters struct {
	shared *redisstate.Shared // nil without a redis block: in memory
	bus    *redisstate.Bus    // the invalidations; nil without Redis
	mem    *admission.MemSource
	// replica names this process in the store's heartbeats, which
	// replicas sharing the store without Redis slice budgets and key
	// limits by (gateway.Options.Replicas); "" with Redis
	replica string
}

// newSharedCounters connects to the configured Redis, if any. Redis that
// does not answer at start is logged, not fatal: each pool admits against
// this replica's slice (redisstate) until it answers.
func newSharedCounters(ctx context.Context, cfg *config.Config, log *slog.Logger) (*sharedCounters, error) {
	if cfg.Redis == nil {
		return &sharedCounters{mem: admission.NewMemSource(), replica: redisstate.ReplicaName()}, nil
	}
	sh, err := redisstate.Open(ctx, *cfg.Redis, cfg.Limits.MaxRequestDuration, log)
	if err != nil {
		return nil, err
	}
	bus := redisstate.NewBus(sh.Client(), sh.BusChannel(), cfg.Redis.Timeout, log)
	return &sharedCounters{shared: sh, bus: bus}, nil
}

// source is what the gateways' admissions share.
func (c *sharedCounters) source() admission.Source {
	if c.shared != nil {
		return c.shared
	}
	return c.mem
}

// holdsUsage reports whether the counters already hold every pool's
// usage: Redis kept by the other replicas. The gateway then does not load
// the (older) usage saved in the store over it.
func (c *sharedCounters) holdsUsage(ctx context.Context, cfg *config.Config) bool {
	if c.shared == nil {
		return false
	}
	pools := make([]string, 0, len(cfg.Pools))
	for _, p := range cfg.Pools {
		pools = append(pools, p.Name)
	}
	return c.shared.HoldsUsage(ctx, cfg.FairShare.HalfLife, pools...)
}

func (c *sharedCounters) close() {
	if c.shared != nil {
		c.shared.Close()
	}
}
