package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// generation is a gateway built from one reading of the configuration,
// with what depends on that configuration (Slurm import, write-back).
type generation struct {
	cfg *config.Config
	gw  *gateway.Gateway
	adm *admin.Handler
	// handler serves the client listener: /admin/* with adm (404 with an
	// admin listener), every other path with gw
	handler http.Handler
	// admin serves the admin listener (nil without one): adm alone
	admin http.Handler
	// stopAdmin stops adm's reload loop (admin.Handler.Run) and waits for
	// it
	stopAdmin func()
	imp       *slurmImport
	stopWB    func()
	// stopAlerts stops the alert dispatcher started with this generation.
	stopAlerts func()
}

// start builds and starts a generation for cfg. keepUsage says the shared
// counters already hold the fair-share usage (a reload).
func (s *server) start(ctx context.Context, cfg *config.Config, keepUsage bool, capacities map[string]int) (*generation, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), certCollector{&s.certs})
	db := s.db
	var notify admin.Notifier // nil: one replica
	if s.counters.shared != nil {
		notify = busNotifier{s.counters.bus}
		s.counters.shared.Register(reg)
	}
	changes, err := db.AdminAccounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("read admin account changes: %w", err)
	}
	opts := gateway.Options{Config: cfg, Version: s.version, Keys: db, Records: db, Pinger: db, ClampCounter: db, Recorder: s.rec, ShareUsage: db,
		Registry: reg, Log: s.log, AccountChanges: changes, Admissions: s.counters.source(), KeepUsage: keepUsage, Budgets: db,
		Capacities: capacities}
	if s.counters.shared == nil { // replicas sharing the store see each other there
		opts.Replicas, opts.Replica = db, s.counters.replica
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
	defer func() { // a generation that does not start leaves nothing running
		if ok {
			return
		}
		if g.gw != nil {
			g.gw.Close(context.Background())
		}
		if g.imp != nil {
			g.imp.close()
		}
		stopAlerts()
	}()
	if cfg.Slurm != nil {
		if g.imp, err = newSlurmImport(ctx, cfg, db, s.log); err != nil {
			return nil, err
		}
		opts.Accounts = g.imp.accounts
		opts.SlurmBudgets = g.imp.budgets(cfg.Alerts.SoftLimitPercent)
	}
	if g.gw, err = gateway.New(opts); err != nil {
		return nil, err
	}
	// the admin API of this generation: every store capability, and the
	// bus with Redis (admin.Notifier)
	// and the console, signing in through it (adminlisten.go)
	late := &lateAdmin{}
	con, err := newConsole(cfg, late, s.sessions, s.log)
	if err != nil {
		return nil, err
	}
	g.adm, err = admin.New(admin.Options{Gateway: g.gw, Keys: db, KeyLimits: db, KeyRotation: db, Admin: db, Routing: db, Budgets: db,
		Spend: db, SyncHistory: db, Notifier: notify, Log: s.log, AllowedOrigins: allowedOrigins(cfg),
		Sessions: con, SelfService: selfService(cfg)})
	if err != nil {
		return nil, err
	}
	late.h = g.adm
	g.handler, g.admin = listenerHandlers(cfg.Admin, g.adm, con, g.gw, s.log)
	if cfg.Writeback != nil {
		if g.stopWB, err = startWriteback(ctx, cfg, db, reg, s.log); err != nil {
			return nil, err
		}
	}
	s.hook.gw.Store(g.gw)
	g.gw.Start(ctx)
	actx, stopAdmin := context.WithCancel(ctx)
	adminDone := make(chan struct{})
	go func() {
		defer close(adminDone)
		g.adm.Run(actx)
	}()
	g.stopAdmin = func() { stopAdmin(); <-adminDone }
	if g.imp != nil {
		if s.counters.shared != nil {
			g.imp.announce = s.counters.bus.TreeChanged
		}
		g.imp.start(ctx, g.gw)
	}
	s.imp.Store(g.imp)
	s.cur.Store(g)
	ok = true
	return g, nil
}

// stop ends the generation's background work and saves the fair-share
// usage. Its requests still in flight finish on their own; the accounting
// queue is the server's and stays open.
func (g *generation) stop(ctx context.Context) error {
	if g.stopAdmin != nil {
		g.stopAdmin()
	}
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
	if running, next := adminListen(old.cfg), adminListen(cfg); next != running {
		// the listeners stay: the admin API where it is served now
		s.log.Warn("reload: admin { listen } changes at the next restart; the admin API stays where it is", "listen", running)
		if cfg.Admin == nil {
			cfg.Admin = &config.Admin{}
		}
		cfg.Admin.Listen = running
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
	g, err := s.start(ctx, cfg, true, old.gw.Capacities()) // auto pools start where they were
	if err != nil {
		s.log.Error("reload refused, the running configuration stays", "err", err)
		s.cur.Store(old)
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

// allowedOrigins are the browser origins cfg lets send admin writes.
func allowedOrigins(cfg *config.Config) []string {
	if cfg.Admin == nil {
		return nil
	}
	return cfg.Admin.AllowedOrigins
}

// adminListen is the admin listener's address cfg names ("" for none).
func adminListen(cfg *config.Config) string {
	if cfg.Admin == nil {
		return ""
	}
	return cfg.Admin.Listen
}

func sameRedis(a, b *config.Redis) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	y.DefRange = x.DefRange // where it is written does not matter
	return x == y
}
