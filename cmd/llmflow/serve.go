package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/gctune"
	"github.com/go-llmflow/llmflow/server"
)

func serveCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `serve runs the gateway of the configuration given with -c (or LLMFLOW_CONFIG): the
OpenAI-compatible API (/v1/*), /healthz, /metrics and the admin API (/admin/*, on its own
listener with an admin { listen } block), in front of the configuration's upstream engines.
It opens the store (SQLite by default), replays the accounting spool, and runs the Slurm
import, the write-back and the alerts when the configuration has their blocks.

Signals:
  SIGTERM, SIGINT  drain: stop accepting, let requests in flight finish (up to 30 s),
                   write the accounting queue, save the fair-share usage, exit 0
  SIGHUP           reload the configuration and TLS certificate; a configuration that
                   does not load leaves the running one in place (the store block, the
                   listen addresses and the connection caps change only at a restart)

Environment (a flag given wins):
  LLMFLOW_CONFIG      the configuration file (-c)
  LLMFLOW_LISTEN      the client listener's address (--listen)
  LLMFLOW_SPOOL_DIR   the accounting spool directory (--spool-dir)
  LLMFLOW_LOG_LEVEL   debug, info, warn or error (--log-level)
  LLMFLOW_LOG_FORMAT  text or json (--log-format)
Secrets never come from the environment or flags: the configuration names files
(master_key_file, key_file, …), each readable by the service user alone (mode 0600).

Configuration: HCL2, checked with llmflow check-config -c FILE; llmflow doctor -c FILE
checks what the gateway will talk to. Every block and default is documented in
config/config.go; examples/gateway.hcl is a full example.`,
		Example: "  llmflow serve -c /etc/llmflow/gateway.hcl --listen 0.0.0.0:8080\n" +
			"  LLMFLOW_LOG_FORMAT=json llmflow serve -c gateway.hcl\n" +
			"  kill -HUP $(pidof llmflow)   # reload",
		Args: cobra.NoArgs,
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
			if path := os.Getenv("LLMFLOW_CPU_PROFILE"); path != "" {
				// a CPU profile of the whole run, for `go tool pprof` (Development)
				f, err := os.Create(path)
				if err != nil {
					return fmt.Errorf("LLMFLOW_CPU_PROFILE: %w", err)
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("LLMFLOW_CPU_PROFILE: %w", err)
				}
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
			return runServe(cmd.Context(), cfg, server.Options{Listen: e.str(cmd, "listen"), Log: log})
		},
	}
	cmd.Flags().String("listen", "127.0.0.1:8080", "address to listen on (LLMFLOW_LISTEN)")
	e.bind(cmd, "listen")
	cmd.Flags().String("spool-dir", "", "accounting spool directory, overriding store.spool_dir: one per process, so replicas on one host can share a configuration file (LLMFLOW_SPOOL_DIR)")
	e.bind(cmd, "spool-dir")
	e.logFlags(cmd, "info")
	return cmd
}

// runServe runs server.Run with this build's version and SIGHUP as the
// reload signal.
// gcBudget is the heap the garbage collector may let grow before it
// collects as often as Go's default (internal/gctune; GOGC overrides).
const gcBudget = 128 << 20

func runServe(ctx context.Context, cfg *config.Config, o server.Options) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-hup:
				select {
				case reload <- struct{}{}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	o.Version, o.Reload = buildVersion(), reload
	gctune.Tune(ctx, gcBudget, time.Second)
	return server.Run(ctx, cfg, o)
}
