package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/server"
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
	return server.Run(ctx, cfg, o)
}
