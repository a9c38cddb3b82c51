package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/redisstate"
	"github.com/go-llmflow/llmflow/spool"
	"github.com/go-llmflow/llmflow/store"
)

// Interface guards: the store satisfies what the gateway declares.
var (
	_ gateway.KeyStore        = (*store.SQLite)(nil)
	_ gateway.RecordWriter    = (*store.SQLite)(nil)
	_ gateway.Pinger          = (*store.SQLite)(nil)
	_ gateway.ShareUsageStore = (*store.SQLite)(nil)
	_ gateway.ClampCounter    = (*store.SQLite)(nil)
	_ gateway.ClampCounter    = (*store.Postgres)(nil)
)

func serveCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := e.logger(cmd)
			if err != nil {
				return err
			}
			cfg, err := e.loadConfig(cmd, " (or run `llmflow quickstart`)")
			if err != nil {
				return err
			}
			if dir := e.str(cmd, "spool-dir"); dir != "" {
				cfg.Store.SpoolDir = dir
			}
			return serve(cmd.Context(), cfg, e.str(cmd, "listen"), log, nil)
		},
	}
	cmd.Flags().String("listen", "127.0.0.1:8080", "address to listen on (LLMFLOW_LISTEN)")
	e.bind(cmd, "listen")
	cmd.Flags().String("spool-dir", "", "accounting spool directory, overriding store.spool_dir: one per process, so replicas on one host can share a configuration file (LLMFLOW_SPOOL_DIR)")
	e.bind(cmd, "spool-dir")
	e.logFlags(cmd, "info")
	return cmd
}

// startPurge deletes raw records older than the retention every day at
// 03:17 (rollups stay, so reports are unaffected).
func startPurge(ctx context.Context, db appStore, retention time.Duration, log *slog.Logger) *cron.Cron {
	c := cron.New()
	c.AddFunc("17 3 * * *", func() {
		before := time.Now().Add(-retention)
		n, err := db.PurgeRecords(ctx, before)
		if err != nil {
			log.Error("purge of old accounting records failed", "before", before, "err", err)
			return
		}
		log.Info("old accounting records purged (rollups kept)", "before", before.Format(time.RFC3339), "records", n)
	})
	c.Start()
	return c
}

// serve runs a gateway for cfg on addr until ctx ends, then shuts down
// gracefully: the listener closes, in-flight requests and streams finish
// (up to shutdownGrace), fair-share usage is saved, the accounting queue is
// written (what the store does not take stays in the spool for the next
// start), the store closed. SIGHUP reloads the configuration file (see
// reload) without closing the listener or any connection. ready, when set,
// is called once the listener is open.
func serve(ctx context.Context, cfg *config.Config, addr string, log *slog.Logger, ready func(addr string, gw *gateway.Gateway)) error {
	if err := config.CheckSecrets(cfg); err != nil {
		return fmt.Errorf("configuration secrets:\n%w", err)
	}
	db, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	rec, hook, err := openAccounting(cfg, db, log)
	if err != nil {
		return err
	}
	counters, err := newSharedCounters(ctx, cfg, log)
	if err != nil {
		closeAccounting(rec, log)
		return err
	}
	defer counters.close()
	s := &server{db: db, rec: rec, hook: hook, log: log, counters: counters}
	cur, err := s.start(ctx, cfg, counters.holdsUsage(ctx, cfg))
	if err != nil {
		closeAccounting(rec, log)
		return err
	}
	s.listenInvalidations(ctx)
	lim := cfg.Limits
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnState:         s.connState,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cur.stop(context.Background())
		closeAccounting(rec, log)
		return fmt.Errorf("listen: %w", err)
	}
	ln = cur.gw.LimitListener(ln) // limits.max_connections, max_connections_per_network
	var tlsCerts *certs
	if cfg.TLS != nil {
		if tlsCerts, err = newCerts(cfg.TLS); err != nil {
			ln.Close()
			cur.stop(context.Background())
			closeAccounting(rec, log)
			return err
		}
		srv.TLSConfig = tlsCerts.config()
	}
	purge := startPurge(ctx, db, cfg.Store.Retention, log)
	defer func() { <-purge.Stop().Done() }()
	log.Info("llmflow gateway listening", "addr", ln.Addr().String(), "tls", tlsCerts != nil, "version", buildVersion(),
		"models", len(cfg.Models), "store", cfg.Store.Kind, "spool", cfg.Store.SpoolDir, "pid", os.Getpid())
	if ready != nil {
		ready(ln.Addr().String(), cur.gw)
	}
	errc := make(chan error, 1)
	go func() {
		if tlsCerts != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificate from TLSConfig
			return
		}
		errc <- srv.Serve(ln)
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	for err == nil {
		select {
		case err = <-errc:
			err = fmt.Errorf("serve: %w", err)
		case <-hup:
			cur = s.reload(ctx, cur)
			switch {
			case tlsCerts != nil:
				tlsCerts.reload(cur.cfg.TLS, log)
			case cur.cfg.TLS != nil:
				log.Warn("reload: the tls block was added; the gateway serves TLS from the next restart")
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	if err == nil {
		log.Info("shutting down: no new connections, in-flight requests finish", "grace", shutdownGrace)
		s.drain(ln)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		if serr := srv.Shutdown(sctx); serr != nil {
			log.Warn("requests still running at shutdown were cut", "err", serr)
			srv.Close()
		}
		cancel()
	}
	dctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if cerr := cur.stop(dctx); cerr != nil {
		log.Error("shutdown", "err", cerr)
	}
	if cerr := rec.Close(dctx); cerr != nil {
		log.Error("accounting not fully written", "err", cerr)
	}
	w, f, d := rec.Counts()
	h := rec.Health()
	log.Info("accounting", "written", w, "failed", f, "dropped", d, "left_in_spool", h.SpoolRecords)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// shutdownGrace bounds how long a shutdown waits for in-flight requests
// and streams, then for the accounting queue.
const shutdownGrace = 30 * time.Second

// openAccounting opens the spool (cfg.Store.SpoolDir, replaying what a
// previous run left) and starts the accounting queue over it.
func openAccounting(cfg *config.Config, db appStore, log *slog.Logger) (*accounting.Queue, *writeHook, error) {
	policy, err := spool.ParseSyncPolicy(cfg.Store.SpoolSync)
	if err != nil {
		return nil, nil, err
	}
	sp, rc, err := spool.Open(cfg.Store.SpoolDir, spool.Options{Sync: policy, Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("accounting spool: %w", err)
	}
	if rc.Records > 0 || len(rc.Corrupted) > 0 {
		log.Warn("accounting spool: records of a previous run are written to the store now",
			"dir", cfg.Store.SpoolDir, "records", rc.Records, "bytes", rc.Bytes, "bad_tails", len(rc.Corrupted), "bad_bytes", rc.CutBytes)
	}
	hook := &writeHook{}
	q := accounting.New(db, accounting.Options{
		QueueSize: cfg.Store.QueueSize, BatchSize: cfg.Store.BatchSize, FlushInterval: cfg.Store.FlushInterval,
		Spool: sp, Log: log, OnWrite: hook.call,
	})
	return q, hook, nil
}

// writeHook forwards the queue's OnWrite to the gateway serving now (its
// metrics).
type writeHook struct {
	gw atomic.Pointer[gateway.Gateway]
}

func (h *writeHook) call(written, failed int) {
	if gw := h.gw.Load(); gw != nil {
		gw.AccountingWritten(written, failed)
	}
}

func closeAccounting(q *accounting.Queue, log *slog.Logger) {
	if err := q.Close(context.Background()); err != nil {
		log.Error("accounting not fully written", "err", err)
	}
}

// server holds what lives as long as the process: the store, the
// accounting queue and the fair-share counters. The gateway built from the
// configuration is a generation, replaced by a reload.
type server struct {
	db       appStore
	rec      *accounting.Queue
	hook     *writeHook
	log      *slog.Logger
	counters *sharedCounters
	cur      atomic.Pointer[gateway.Gateway]
	imp      atomic.Pointer[slurmImport] // the current generation's; nil without a slurm block
	draining atomic.Bool
	open     atomic.Int64 // client connections
}

// ServeHTTP hands the request to the gateway of the current generation.
// While draining, every answer closes its connection.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		w.Header().Set("Connection", "close")
	}
	s.cur.Load().ServeHTTP(w, r)
}

// connState counts the open client connections.
func (s *server) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.open.Add(-1)
	}
}

// drainDelay is how long a shutdown keeps serving the connections already
// open after closing the listener, answering each request with
// "Connection: close", before closing the idle ones. A load balancer
// (nginx) holds kept-alive connections: closing one while it sends a
// request on it fails that request (a reset, which nginx does not retry
// for a POST); during the delay its requests are answered and it moves
// to the other replicas.
const drainDelay = 2 * time.Second

// drain closes the listener and waits until every connection has closed
// or drainDelay has passed.
func (s *server) drain(ln net.Listener) {
	s.draining.Store(true)
	ln.Close()
	deadline := time.Now().Add(drainDelay)
	for s.open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// generation is a gateway built from one reading of the configuration,
// with what depends on that configuration (Slurm import, write-back).
type generation struct {
	cfg    *config.Config
	gw     *gateway.Gateway
	imp    *slurmImport
	stopWB func()
	// stopAlerts stops the alert dispatcher started with this generation.
	stopAlerts func()
}

// start builds and starts a generation for cfg. keepUsage says the shared
// counters already hold the fair-share usage (a reload).
func (s *server) start(ctx context.Context, cfg *config.Config, keepUsage bool) (*generation, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	db := s.db
	var keys gateway.KeyStore = db
	var admin gateway.AdminStore = db
	if s.counters.rdb != nil {
		b := &revokeBroadcast{appStore: db, s: s}
		keys, admin = b, b
		s.counters.shared.Register(reg)
	}
	opts := gateway.Options{Config: cfg, Version: buildVersion(), Keys: keys, Records: db, Pinger: db, ClampCounter: db, Recorder: s.rec, ShareUsage: db,
		Registry: reg, Log: s.log, SyncHistory: db, Spend: db, Admin: admin, Admissions: s.counters.source(), KeepUsage: keepUsage}
	if bs, ok := db.(gateway.BudgetStore); ok { // both stores: cmd/llmflow/budgets.go
		opts.Budgets = bs
	}
	g := &generation{cfg: cfg}
	// Soft budget limits enqueue alerts into alertOutbox (nil without an
	// alerts block); the dispatcher delivers them.
	alertOutbox, stopAlerts, err := startAlerts(ctx, cfg, db, reg, s.log)
	if err != nil {
		return nil, err
	}
	if alertOutbox != nil {
		opts.Alerts = outboxSink{alertOutbox, s.log}
	}
	g.stopAlerts = stopAlerts
	ok := false
	defer func() {
		if !ok {
			stopAlerts()
		}
	}()
	if cfg.Slurm != nil {
		if g.imp, err = newSlurmImport(ctx, cfg, db, s.log); err != nil {
			return nil, err
		}
		opts.Accounts = g.imp.accounts
		opts.SlurmBudgets = g.imp.budgets(cfg.Alerts.SoftLimitPercent)
	}
	if g.gw, err = gateway.New(opts); err != nil {
		if g.imp != nil {
			g.imp.close()
		}
		return nil, err
	}
	if cfg.Writeback != nil {
		if g.stopWB, err = startWriteback(ctx, cfg, db, s.log); err != nil {
			g.gw.Close(context.Background())
			if g.imp != nil {
				g.imp.close()
			}
			return nil, err
		}
	}
	s.hook.gw.Store(g.gw)
	g.gw.Start(ctx)
	if g.imp != nil {
		if s.counters.rdb != nil {
			g.imp.announce = s.announceTree
		}
		g.imp.start(ctx, g.gw)
	}
	s.imp.Store(g.imp)
	s.cur.Store(g.gw)
	ok = true
	return g, nil
}

// stop ends the generation's background work and saves the fair-share
// usage. Its requests still in flight finish on their own; the accounting
// queue is the server's and stays open.
func (g *generation) stop(ctx context.Context) error {
	if g.stopWB != nil {
		g.stopWB()
	}
	if g.imp != nil {
		g.imp.close()
	}
	if g.stopAlerts != nil {
		g.stopAlerts()
	}
	return g.gw.Close(ctx)
}

// reload reads the configuration file again and, when it is valid,
// serves it: a new gateway takes the new requests while the old one's
// finish, on the same listener and connections, with the same store,
// accounting queue and fair-share counters (in flight and usage). What
// cannot change without a restart (the store block, the listen address,
// the connection caps, the half-life) is kept and logged. A configuration
// that does not load leaves the running one in place.
func (s *server) reload(ctx context.Context, old *generation) *generation {
	s.log.Info("SIGHUP: reloading the configuration", "file", old.cfg.Filename)
	cfg, err := config.Load(old.cfg.Filename)
	if err == nil {
		err = config.CheckSecrets(cfg)
	}
	if err != nil {
		s.log.Error("reload refused, the running configuration stays", "err", err)
		return old
	}
	// The spool in use stays (it may come from --spool-dir); a changed
	// store.spool_dir applies at the next start.
	cfg.Store.SpoolDir = old.cfg.Store.SpoolDir
	if cfg.Store != old.cfg.Store {
		s.log.Error("reload refused: the store block changed; restart to apply it (the running configuration stays)")
		return old
	}
	if !sameRedis(cfg.Redis, old.cfg.Redis) {
		s.log.Warn("reload: the redis block changes at the next restart")
	}
	if cfg.FairShare != old.cfg.FairShare {
		s.log.Warn("reload: fairshare.half_life changes at the next restart")
	}
	if cfg.Limits.MaxConnections != old.cfg.Limits.MaxConnections || cfg.Limits.MaxConnectionsPerNetwork != old.cfg.Limits.MaxConnectionsPerNetwork {
		s.log.Warn("reload: limits.max_connections and max_connections_per_network change at the next restart")
	}
	g, err := s.start(ctx, cfg, true)
	if err != nil {
		s.log.Error("reload refused, the running configuration stays", "err", err)
		s.cur.Store(old.gw)
		s.hook.gw.Store(old.gw)
		return old
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.stop(sctx); err != nil {
		s.log.Warn("reload: the previous configuration's shutdown", "err", err)
	}
	s.log.Info("configuration reloaded", "file", cfg.Filename, "models", len(cfg.Models), "pools", len(cfg.Pools), "orgs", len(cfg.Orgs))
	return g
}

// revokeBroadcast is the key store of a replica with Redis: a change of a
// key that its cached copy must not outlive (a revocation, a
// deactivation, new limits) is published on the invalidation channel,
// and every replica (this one too) drops the key from its caches when it
// hears it (listenInvalidations).
type revokeBroadcast struct {
	appStore
	s *server
}

func (r *revokeBroadcast) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if err := r.appStore.RevokeKey(ctx, id, at); err != nil {
		return err
	}
	return r.announce(ctx, id, "revoked")
}

func (r *revokeBroadcast) SetKeyLimits(ctx context.Context, id string, rpm, tpm, maxInFlight int) error {
	if err := r.appStore.SetKeyLimits(ctx, id, rpm, tpm, maxInFlight); err != nil {
		return err
	}
	return r.announce(ctx, id, "limits changed")
}

func (r *revokeBroadcast) SetKeyDisabled(ctx context.Context, id string, disabled bool) error {
	if err := r.appStore.SetKeyDisabled(ctx, id, disabled); err != nil {
		return err
	}
	return r.announce(ctx, id, "activation changed")
}

// announce publishes key id's hash, the change being stored already.
func (r *revokeBroadcast) announce(ctx context.Context, id, what string) error {
	k, err := r.appStore.KeyByID(ctx, id)
	if err != nil {
		return err
	}
	if err := r.s.counters.rdb.Publish(ctx, r.s.counters.channel(), hex.EncodeToString(k.Hash[:])).Err(); err != nil {
		// The change is stored; other replicas see it when their cache
		// entry expires (a minute at most).
		r.s.log.Error("key "+what+" but not announced to the other replicas (redis)", "id", id, "err", err)
	}
	return nil
}

func sameRedis(a, b *config.Redis) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	y.DefRange = x.DefRange // where it is written does not matter
	return x == y
}

// sharedCounters keeps the state the gateways' admissions share for the
// life of the process (admission.Source), so a reload keeps the requests
// in flight and the usage: in this process, or with a redis block in
// Redis, shared by every replica (redisstate.Shared).
type sharedCounters struct {
	rdb    redis.UniversalClient // nil: in memory
	shared *redisstate.Shared    // nil without a redis block
	mem    *admission.MemSource
	base   string // the configured key prefix
}

// newSharedCounters connects to the configured Redis, if any. Redis that
// does not answer at start is logged, not fatal: each pool admits against
// this replica's slice (redisstate) until it answers.
func newSharedCounters(ctx context.Context, cfg *config.Config, log *slog.Logger) (*sharedCounters, error) {
	if cfg.Redis == nil {
		return &sharedCounters{mem: admission.NewMemSource()}, nil
	}
	sh, err := redisstate.Open(ctx, *cfg.Redis, cfg.Limits.MaxRequestDuration, log)
	if err != nil {
		return nil, err
	}
	return &sharedCounters{rdb: sh.Client(), shared: sh, base: sh.KeyPrefix()}, nil
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

// channel is the Redis channel of key invalidations.
func (c *sharedCounters) channel() string { return c.base + "invalidate" }

func (c *sharedCounters) close() {
	if c.shared != nil {
		c.shared.Close()
	}
}
