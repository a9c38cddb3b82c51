package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/go-llmflow/llmflow/internal/h1"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/console"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/spool"
)

// Options configure Run.
type Options struct {
	// Listen is the client listener's address (host:port).
	Listen string
	// Log receives the process's log; nil = discard.
	Log *slog.Logger
	// Version is reported by /healthz and in the upstream User-Agent.
	Version string
	// Reload, when it receives, reloads the configuration file (the
	// command sends SIGHUP here). nil = never.
	Reload <-chan struct{}
	// Ready, when set, is called once the listener is open.
	Ready func(Started)
}

// Started is what Options.Ready is told: where the gateway listens and the
// gateway of the first generation.
type Started struct {
	Addr string
	// AdminAddr is the admin listener's address ("" without one: the
	// admin API is on Addr).
	AdminAddr string
	Gateway   *gateway.Gateway
	// Admin is the generation's admin API (quickstart creates its key
	// through it).
	Admin *admin.Handler
}

// Run serves the gateway for cfg on o.Listen until ctx ends, then shuts
// down gracefully: the listener closes, in-flight requests and streams
// finish (up to shutdownGrace), fair-share usage is saved, the accounting
// queue is written (what the store does not take stays in the spool for
// the next start), the store closed. A receive on o.Reload reloads the
// configuration file (see reload) without closing the listener or any
// connection.
func Run(ctx context.Context, cfg *config.Config, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := config.CheckSecrets(cfg); err != nil {
		return fmt.Errorf("configuration secrets:\n%w", err)
	}
	db, err := OpenStore(ctx, cfg)
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
	if counters.replica != "" { // a clean stop: the other replicas' slices grow at once
		defer func() {
			lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			db.Leave(lctx, counters.replica)
		}()
	}
	s := &server{db: db, rec: rec, hook: hook, log: log, counters: counters, version: o.Version, sessions: newSessionStore(cfg)}
	cur, err := s.start(ctx, cfg, counters.holdsUsage(ctx, cfg), nil)
	if err != nil {
		closeAccounting(rec, log)
		return err
	}
	if s.counters.bus != nil {
		lctx, stop := context.WithCancel(ctx)
		done := s.counters.bus.Listen(lctx, receiver{s})
		defer func() { stop(); <-done }() // before the counters close Redis
	}
	lim := cfg.Limits
	std := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnState:         s.connState,
	}
	var srv httpServer = std
	if cfg.TLS == nil && lim.HTTPStack == config.HTTPStackLlmflow && h1.Supported() {
		srv = &h1.Server{
			Handler:           s,
			ReadHeaderTimeout: lim.ReadHeaderTimeout,
			ReadTimeout:       lim.ReadTimeout,
			IdleTimeout:       lim.IdleTimeout,
			MaxHeaderBytes:    lim.MaxHeaderBytes,
			ErrorLog:          std.ErrorLog,
			BaseContext:       std.BaseContext,
			ConnState:         s.connState,
		}
	}
	ln, err := net.Listen("tcp", o.Listen)
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
		std.TLSConfig = tlsCerts.config()
		s.certs.Store(tlsCerts)
	}
	adminSrv, adminLn, err := s.listenAdmin(ctx, cfg)
	if err != nil {
		ln.Close()
		cur.stop(context.Background())
		closeAccounting(rec, log)
		return err
	}
	purge := startPurge(ctx, db, cfg.Store.Retention, log)
	defer func() { <-purge.Stop().Done() }()
	stack := config.HTTPStackNetHTTP
	if _, ok := srv.(*h1.Server); ok {
		stack = config.HTTPStackLlmflow
	}
	log.Info("llmflow gateway listening", "addr", ln.Addr().String(), "tls", tlsCerts != nil, "http_stack", stack, "version", o.Version,
		"models", len(cfg.Models), "store", cfg.Store.Kind, "spool", cfg.Store.SpoolDir, "pid", os.Getpid())
	if o.Ready != nil {
		st := Started{Addr: ln.Addr().String(), Gateway: cur.gw, Admin: cur.adm}
		if adminLn != nil {
			st.AdminAddr = adminLn.Addr().String()
		}
		o.Ready(st)
	}
	errc := make(chan error, 2)
	if adminSrv != nil {
		log.Info("admin API listening (and not on the client listener)", "addr", adminLn.Addr().String())
		go func() { errc <- adminSrv.Serve(adminLn) }()
	}
	go func() {
		if tlsCerts != nil {
			errc <- std.ServeTLS(ln, "", "") // the certificate from TLSConfig
			return
		}
		errc <- srv.Serve(ln)
	}()
	for err == nil {
		select {
		case err = <-errc:
			err = fmt.Errorf("serve: %w", err)
		case <-o.Reload:
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
		if adminSrv != nil {
			if serr := adminSrv.Shutdown(sctx); serr != nil {
				adminSrv.Close()
			}
		}
		if serr := srv.Shutdown(sctx); serr != nil {
			log.Warn("requests still running at shutdown were cut", "err", serr)
			srv.Close()
		}
		cancel()
	} else if adminSrv != nil {
		adminSrv.Close()
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

// httpServer is the client listener's server: net/http's, or
// internal/h1's (limits.http_stack).
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// listenAdmin opens the admin listener of cfg's admin block, when it
// names one: plain HTTP, serving the current generation's admin handler
// alone (nil, nil without one).
func (s *server) listenAdmin(ctx context.Context, cfg *config.Config) (*http.Server, net.Listener, error) {
	if cfg.Admin == nil || cfg.Admin.Listen == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		a := cfg.Admin.DefRange
		return nil, nil, fmt.Errorf("%s:%d:%d: admin listen: %w", a.Filename, a.Start.Line, a.Start.Column, err)
	}
	lim := cfg.Limits
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.draining.Load() {
				w.Header().Set("Connection", "close")
			}
			s.cur.Load().admin.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	return srv, ln, nil
}

// shutdownGrace bounds how long a shutdown waits for in-flight requests
// and streams, then for the accounting queue.
const shutdownGrace = 30 * time.Second

// openAccounting opens the spool (cfg.Store.SpoolDir, replaying what a
// previous run left) and starts the accounting queue over it.
func openAccounting(cfg *config.Config, db Store, log *slog.Logger) (*accounting.Queue, *writeHook, error) {
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
	db       Store
	version  string
	rec      *accounting.Queue
	hook     *writeHook
	log      *slog.Logger
	counters *sharedCounters
	certs    atomic.Pointer[certs]       // the TLS certificate served; nil without a tls block
	cur      atomic.Pointer[generation]  // serving
	imp      atomic.Pointer[slurmImport] // the current generation's; nil without a slurm block
	draining atomic.Bool
	sessions *console.Store // the console's, across reloads (adminlisten.go)
	open     atomic.Int64   // client connections
}

// ServeHTTP hands the request to the gateway of the current generation.
// While draining, every answer closes its connection.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		w.Header().Set("Connection", "close")
	}
	s.cur.Load().handler.ServeHTTP(w, r)
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
