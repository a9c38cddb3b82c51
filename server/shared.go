package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/redisstate"
)

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

// sharedCounters keeps each pool's fair-share counters for the life of
// the process, so a reload keeps the requests in flight and the usage: in
// this process, or with a redis block in Redis, shared by every replica.
type sharedCounters struct {
	rdb     redis.UniversalClient // nil: in memory
	bus     *redisstate.Bus       // the invalidations; nil without Redis
	ledger  *redisstate.Ledger    // budget holds and key limits in Redis; nil without it
	prefix  string
	base    string // the configured key prefix
	timeout time.Duration
	replica string // this process among the replicas (leases)
	// replicas is redis.replicas: the divisor of each slice until Redis
	// has answered once
	replicas int64
	log      *slog.Logger
	// run is the context of the counters' beats; close cancels it and
	// waits for each to give up its lease.
	run     context.Context
	stop    context.CancelFunc
	beating sync.WaitGroup

	mu sync.Mutex
	m  map[string]fairshare.Counters
}

// newSharedCounters connects to the configured Redis, if any. Redis that
// does not answer at start is logged, not fatal: each pool admits against
// this replica's slice (redisstate) until it answers.
func newSharedCounters(ctx context.Context, cfg *config.Config, log *slog.Logger) (*sharedCounters, error) {
	c := &sharedCounters{m: map[string]fairshare.Counters{}}
	rc := cfg.Redis
	if rc == nil {
		return c, nil
	}
	o := &redis.Options{Addr: rc.Address, DialTimeout: time.Second, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout}
	if rc.PasswordFile != "" {
		pw, err := config.ReadSecret(rc.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("redis password_file: %w", err)
		}
		o.Password = pw
	}
	if rc.TLS {
		host := rc.Address[:strings.LastIndexByte(rc.Address, ':')]
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	c.rdb = redis.NewClient(o)
	c.prefix, c.base, c.timeout = rc.KeyPrefix+"counters:", rc.KeyPrefix, rc.Timeout
	c.replica, c.replicas, c.log = replicaName(), max(rc.Replicas, 1), log
	redis.SetLogger(redisLogger{log})
	c.run, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	c.bus = redisstate.NewBus(c.rdb, rc.KeyPrefix+"invalidate", rc.Timeout, log)
	c.ledger = redisstate.NewLedger(c.rdb, redisstate.LedgerOptions{Prefix: rc.KeyPrefix + "ledger:", Timeout: rc.Timeout,
		InFlightTTL: cfg.Limits.MaxRequestDuration + time.Minute, Log: log, Replicas: c.liveReplicas})
	c.beating.Go(func() { c.ledger.Run(c.run, time.Second) })
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.rdb.Ping(pctx).Err(); err != nil {
		log.Error("redis does not answer: this replica admits against its own slice of each reservation until it does", "address", rc.Address, "err", err)
	} else {
		log.Info("fair-share counters shared through redis", "address", rc.Address, "prefix", c.prefix)
	}
	return c, nil
}

func (c *sharedCounters) PoolCounters(pool string, halfLife time.Duration) fairshare.Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.m[pool]; ok {
		return m
	}
	var m fairshare.Counters
	if c.rdb != nil {
		r := redisstate.New(c.rdb, pool, halfLife, redisstate.Options{Prefix: c.prefix, Timeout: c.timeout, Replica: c.replica, Log: c.log,
			Replicas: c.replicas})
		c.beating.Go(func() { r.Run(c.run) })
		m = r
	} else {
		m = fairshare.NewMemCounters(halfLife)
	}
	c.m[pool] = m
	return m
}

// liveReplicas is the number of live replicas the pools' counters last
// saw (the largest), or redis.replicas before any pool's counters: what
// budgets and key limits are divided by while the ledger's Redis is away.
func (c *sharedCounters) liveReplicas() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(0)
	for _, m := range c.m {
		if r, ok := m.(*redisstate.Counters); ok {
			n = max(n, r.Health().Replicas)
		}
	}
	if n == 0 {
		return c.replicas
	}
	return n
}

// holdsUsage reports whether the counters already hold every pool's
// usage: Redis kept by the other replicas. The gateway then does not load
// the (older) usage saved in the store over it.
func (c *sharedCounters) holdsUsage(ctx context.Context, cfg *config.Config) bool {
	if c.rdb == nil {
		return false
	}
	for _, p := range cfg.Pools {
		r, ok := c.PoolCounters(p.Name, cfg.FairShare.HalfLife).(*redisstate.Counters)
		if !ok || !r.HoldsUsage(ctx) {
			return false
		}
	}
	return true
}

// failures is the number of failed Redis calls of every pool's counters.
func (c *sharedCounters) failures() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, m := range c.m {
		if r, ok := m.(*redisstate.Counters); ok {
			_, f, _ := r.LastError()
			n += f
		}
	}
	return n
}

func (c *sharedCounters) close() {
	if c.rdb != nil {
		c.stop()
		c.beating.Wait()
		c.rdb.Close()
	}
}
