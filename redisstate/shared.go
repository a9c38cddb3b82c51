package redisstate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
)

// Shared is what a gateway process shares with the other replicas through
// Redis, for the life of the process (configuration reloads keep it): the
// fair-share Counters of each pool, the budget Ledger, and this replica's
// name in the leases. It is the admission.Source of the gateways built on
// it: each pool's Admissions compose its Counters and the Ledger.
type Shared struct {
	rdb     redis.UniversalClient
	own     bool // rdb was dialled by Open: Close closes it
	ledger  *Ledger
	prefix  string // of the counters' keys
	base    string // the configured key prefix
	timeout time.Duration
	replica string
	// replicas is the divisor of each slice until Redis has answered a
	// beat (redis.replicas)
	replicas int64
	log      *slog.Logger

	// run is the context of the beats and the ledger's probes; Close
	// cancels it and waits for each to give up its lease.
	run     context.Context
	stop    context.CancelFunc
	beating sync.WaitGroup

	// p carries the pools' admissions and releases in order (nil:
	// each is a call of its own, waited for)
	p *pipe

	mu    sync.Mutex
	pools map[string]*Counters
}

var _ admission.Source = (*Shared)(nil)

// SharedOptions configure Shared.
type SharedOptions struct {
	// Prefix starts every key (default "llmflow:"): the counters' under
	// Prefix + "counters:", the ledger's under Prefix + "ledger:".
	Prefix string
	// Timeout bounds each Redis call on a request's path (default
	// config.DefaultRedisTimeout).
	Timeout time.Duration
	// Replicas is the number of replicas taken as live until Redis has
	// answered a beat (default 1); see Options.Replicas.
	Replicas int64
	// InFlightTTL is at least the longest a request may run (see
	// LedgerOptions.InFlightTTL).
	InFlightTTL time.Duration
	// Replica names this process among the replicas (default:
	// ReplicaName()).
	Replica string
	// Log receives the fallbacks' starts and ends (nil: none).
	Log *slog.Logger
	// Pipeline sends the admissions and releases of every pool in order
	// through one pipe (pipe.go): concurrent admissions share round
	// trips, and a release is not waited for (it reaches Redis before any
	// admission that begins after it). Open sets it; false: each is a
	// call of its own, waited for.
	Pipeline bool
}

// DefaultPrefix starts every key when the redis block names no prefix.
const DefaultPrefix = "llmflow:"

// NewShared returns the state shared through rdb, which stays the
// caller's. Its Ledger probes Redis while in fallback until Close; each
// pool's Counters beat from the first Pool call.
func NewShared(rdb redis.UniversalClient, o SharedOptions) *Shared {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Replica == "" {
		o.Replica = ReplicaName()
	}
	s := &Shared{rdb: rdb, prefix: o.Prefix + "counters:", base: o.Prefix, timeout: o.Timeout,
		replica: o.Replica, replicas: max(o.Replicas, 1), log: o.Log, pools: map[string]*Counters{}}
	s.run, s.stop = context.WithCancel(context.Background())
	s.ledger = NewLedger(rdb, LedgerOptions{Prefix: o.Prefix + "ledger:", Timeout: o.Timeout,
		InFlightTTL: o.InFlightTTL, Log: o.Log, Replicas: s.liveReplicas, Replica: o.Replica})
	if o.Pipeline {
		s.p = newPipe(rdb)
		s.ledger.usePipe(s.p)
	}
	s.beating.Go(func() { s.ledger.Run(s.run, time.Second) })
	return s
}

// Open connects to the Redis of rc (a password file, TLS) and returns the
// state shared there; requests may run maxRequest at most. A Redis that
// does not answer at start is logged, not fatal: each pool admits against
// this replica's slice until it answers.
func Open(ctx context.Context, rc config.Redis, maxRequest time.Duration, log *slog.Logger) (*Shared, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rdb, err := dial(rc)
	if err != nil {
		return nil, err
	}
	redis.SetLogger(redisLogger{log})
	s := NewShared(rdb, SharedOptions{Prefix: rc.KeyPrefix, Timeout: rc.Timeout, Replicas: rc.Replicas,
		InFlightTTL: maxRequest + time.Minute, Log: log, Pipeline: true})
	s.own = true
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		log.Error("redis does not answer: this replica admits against its own slice of each reservation until it does", "address", rc.Address, "err", err)
	} else {
		log.Info("fair-share counters shared through redis", "address", rc.Address, "prefix", s.prefix)
		if o := rdb.Options(); o.Password != "" && AnswersWithoutPassword(pctx, o) {
			log.Error(ErrNoPasswordNeeded.Error(), "address", rc.Address)
		}
	}
	return s, nil
}

// dial returns a client of the Redis of rc (a password file, TLS); it
// connects at its first command.
func dial(rc config.Redis) (*redis.Client, error) {
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
	return redis.NewClient(o), nil
}

// ErrNoPasswordNeeded is what Open logs, and `llmflow doctor` reports, when
// the configuration names a password_file and Redis answers without one:
// go-redis accepts Redis's refusal of AUTH silently, so the password
// protects nothing and the admin believes it does.
var ErrNoPasswordNeeded = errors.New("redis answers without a password: password_file protects nothing; " +
	"set requirepass (or an ACL user) in redis.conf, or remove password_file from the redis block")

// AnswersWithoutPassword reports whether the Redis of o answers a PING on
// a connection that sends no password (o's other options kept).
func AnswersWithoutPassword(ctx context.Context, o *redis.Options) bool {
	bare := *o
	bare.Username, bare.Password = "", ""
	c := redis.NewClient(&bare)
	defer c.Close()
	return c.Ping(ctx).Err() == nil
}

// Client is the Redis client of the shared state (for the invalidation
// bus).
func (s *Shared) Client() redis.UniversalClient { return s.rdb }

// KeyPrefix is the configured key prefix every key of the replicas
// starts with.
func (s *Shared) KeyPrefix() string { return s.base }

// BusChannel is the channel of the replicas' Bus.
func (s *Shared) BusChannel() string { return s.base + "invalidate" }

// Replica is this process's name among the replicas.
func (s *Shared) Replica() string { return s.replica }

// Ledger is the budget ledger shared by the replicas.
func (s *Shared) Ledger() *Ledger { return s.ledger }

// Pool implements admission.Source: the pool's Counters (made, and
// beating, at the first call for its name), its Admissions with the
// Ledger, its part of a capacity (Counters.Share) and of the borrowers'
// room (Counters.Room, room.go). ledger, the
// serving gateway's, becomes the Ledger's fallback and keeps this
// gateway's figures.
func (s *Shared) Pool(name string, halfLife time.Duration, ledger *budgets.Mem) admission.Pool {
	c := s.counters(name, halfLife)
	s.ledger.setLocal(ledger)
	return admission.Pool{Counters: c, Shared: NewAdmissions(c, s.ledger), Share: c, Capacity: c, Room: c}
}

// counters returns the named pool's Counters, made at the first call.
func (s *Shared) counters(name string, halfLife time.Duration) *Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.pools[name]; ok {
		return c
	}
	c := New(s.rdb, name, halfLife, Options{Prefix: s.prefix, Timeout: s.timeout, Replica: s.replica, Log: s.log,
		Replicas: s.replicas})
	if s.p != nil {
		c.usePipe(s.p)
	}
	s.beating.Go(func() { c.Run(s.run) })
	s.pools[name] = c
	return c
}

// Health implements admission.Source: "fallback" while any pool's
// counters, or the ledger, fall back to this replica's slice.
func (s *Shared) Health() *admission.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &admission.Health{Status: "ok", Replicas: 1}
	for _, c := range s.pools {
		x := c.Health()
		h.Replicas = max(h.Replicas, x.Replicas)
		if x.Fallback {
			h.Status, h.Error = "fallback", x.Err
			if h.Since == nil || x.Since.Before(*h.Since) {
				since := x.Since.UTC()
				h.Since = &since
			}
		}
	}
	if x := s.ledger.Health(); x.Fallback {
		h.LedgerFallback = true
		if h.Status == "ok" {
			since := x.Since.UTC()
			h.Status, h.Error, h.Since = "fallback", "budgets ledger: "+x.Err, &since
		}
	}
	return h
}

// Register exports the state of the shared counters in reg:
// llmflow_redis_fallback, llmflow_redis_replicas and
// llmflow_redis_failures_total.
func (s *Shared) Register(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "llmflow_redis_failures_total",
		Help: "Redis calls of the shared fair-share counters that failed (the replica then admits against its own slice until Redis answers).",
	}, func() float64 { return float64(s.failures()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_redis_fallback",
			Help: "1 while Redis is away and this replica admits against its own slice of each reservation (reservation / llmflow_redis_replicas).",
		}, func() float64 {
			if s.Health().Status != "ok" {
				return 1
			}
			return 0
		}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_redis_replicas",
			Help: "Live gateway replicas last seen in Redis (leases).",
		}, func() float64 { return float64(s.Health().Replicas) }))
	if s.p != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "llmflow_redis_quota_admissions_total",
			Help: "Requests this replica admitted from the quotas it holds (places within reservations, key limits, budget units), with no Redis round trip.",
		}, func() float64 { return float64(s.admits(true)) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "llmflow_redis_round_trip_admissions_total",
				Help: "Requests this replica admitted with a Redis round trip (its quotas could not serve them, or the limit is near).",
			}, func() float64 { return float64(s.admits(false)) }))
	}
}

// admits is the number of requests every pool admitted from its quotas
// (local) or in Redis.
func (s *Shared) admits(local bool) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.pools {
		if local {
			n += c.admitsLocal.Load()
		} else {
			n += c.admitsRedis.Load()
		}
	}
	return n
}

// liveReplicas is the number of live replicas the pools' counters last
// saw (the largest), or redis.replicas before any pool's counters: what
// budgets and key limits are divided by while the ledger's Redis is away.
func (s *Shared) liveReplicas() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int64(0)
	for _, c := range s.pools {
		n = max(n, c.Health().Replicas)
	}
	if n == 0 {
		return s.replicas
	}
	return n
}

// HoldsUsage reports whether Redis already holds the usage of every pool
// named (their usage decaying with halfLife): the other replicas, or an
// earlier run, keep it. A gateway then does not load the (older) usage
// saved in its store over it.
func (s *Shared) HoldsUsage(ctx context.Context, halfLife time.Duration, pools ...string) bool {
	for _, p := range pools {
		if !s.counters(p, halfLife).HoldsUsage(ctx) {
			return false
		}
	}
	return true
}

// failures is the number of failed Redis calls of every pool's counters.
func (s *Shared) failures() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.pools {
		_, f, _ := c.LastError()
		n += f
	}
	return n
}

// Close stops the beats (each pool's counters give up their lease and
// their part) and the ledger's probes, and closes the client Open
// dialled.
func (s *Shared) Close() {
	s.stop()
	s.beating.Wait()
	if s.p != nil {
		s.p.close() // the releases handed over reach Redis
	}
	if s.own {
		s.rdb.Close()
	}
}

// ReplicaName names this process among the replicas (host, pid and a
// random part: a restarted process is a new replica).
func ReplicaName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), NewReplicaID()[:8])
}

// redisLogger sends go-redis's own messages (a failed dial, each retry)
// to the log at debug level: the fallback's start and end are logged
// once, at warn and info.
// SetClientLog sends go-redis's own messages (dial failures, pool
// retries) to log at debug level: one setting for the whole process, as
// go-redis has. Open does it with its logger.
func SetClientLog(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "go-redis")
}
