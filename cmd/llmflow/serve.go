package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/robfig/cron/v3"
	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
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
			return serve(cmd.Context(), cfg, e.str(cmd, "listen"), log, nil)
		},
	}
	cmd.Flags().String("listen", "127.0.0.1:8080", "address to listen on (LLMFLOW_LISTEN)")
	e.bind(cmd, "listen")
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
// gracefully: in-flight requests finish (up to 30 s), the accounting queue
// is written, the store closed. ready, when set, is called once the
// listener is open.
func serve(ctx context.Context, cfg *config.Config, addr string, log *slog.Logger, ready func(addr string, gw *gateway.Gateway)) error {
	if err := config.CheckSecrets(cfg); err != nil {
		return fmt.Errorf("configuration secrets:\n%w", err)
	}
	db, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := gateway.Options{Config: cfg, Version: buildVersion(), Keys: db, Records: db, ShareUsage: db, Registry: reg, Log: log, SyncHistory: db,
		Spend: db, Admin: db}
	if bs, ok := db.(gateway.BudgetStore); ok { // both stores: cmd/llmflow/budgets.go
		opts.Budgets = bs
	}
	var imp *slurmImport
	if cfg.Slurm != nil {
		if imp, err = newSlurmImport(ctx, cfg, db, log); err != nil {
			return err
		}
		defer imp.close()
		opts.Accounts = imp.accounts
		opts.SlurmBudgets = imp.budgets(cfg.Alerts.SoftLimitPercent)
	}
	// Soft budget limits enqueue alerts into alertOutbox (nil without an
	// alerts block); the dispatcher delivers them.
	alertOutbox, stopAlerts, err := startAlerts(ctx, cfg, db, reg, log)
	if err != nil {
		return err
	}
	defer stopAlerts()
	if alertOutbox != nil {
		opts.Alerts = outboxSink{alertOutbox, log}
	}
	gw, err := gateway.New(opts)
	if err != nil {
		return err
	}
	if cfg.Writeback != nil {
		stopWB, err := startWriteback(ctx, cfg, db, log)
		if err != nil {
			gw.Close(context.Background())
			return err
		}
		defer stopWB()
	}
	lim := cfg.Limits
	srv := &http.Server{
		Handler:           gw,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		gw.Close(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	ln = gw.LimitListener(ln) // limits.max_connections, max_connections_per_network
	gw.Start(ctx)
	if imp != nil {
		imp.start(ctx, gw)
	}
	purge := startPurge(ctx, db, cfg.Store.Retention, log)
	defer func() { <-purge.Stop().Done() }()
	log.Info("llmflow gateway listening", "addr", ln.Addr().String(), "version", buildVersion(),
		"models", len(cfg.Models), "store", cfg.Store.Kind)
	if ready != nil {
		ready(ln.Addr().String(), gw)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err = <-errc:
		err = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		log.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if serr := srv.Shutdown(sctx); serr != nil {
			log.Warn("requests still running at shutdown were cut", "err", serr)
			srv.Close()
		}
		cancel()
		err = nil
	}
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cerr := gw.Close(dctx); cerr != nil {
		log.Error("accounting not fully written", "err", cerr)
	}
	w, f, d := gw.Recorder().Counts()
	log.Info("accounting", "written", w, "failed", f, "dropped", d)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
