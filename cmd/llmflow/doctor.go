package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/doctor"
	"github.com/go-llmflow/llmflow/redisstate"
)

func doctorCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check what a configuration depends on: secret files, store, Redis, engines, Slurm, clock",
		Long: "doctor is the first command to run on a new gateway host. It loads the configuration (as\n" +
			"check-config), then checks every secret file (present, readable, mode 0600), the store\n" +
			"(reachable, its schema version; read only), Redis (answers, the password needed), each\n" +
			"upstream engine (reachable, the key accepted, the model served, priority scheduling on where\n" +
			"the pool sends priorities, /metrics readable), the Slurm source (sacctmgr present or slurmdbd's\n" +
			"database reachable, the cluster known), the write-back's database and the clock against the\n" +
			"database, Redis and the engines. Each problem is printed with its fix; the exit status is 1\n" +
			"when there is one. Run it as the service user (sudo -u llmflow llmflow doctor -c …).",
		Example: "  llmflow doctor -c /etc/llmflow/gateway.hcl",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := e.configPath()
			if path == "" {
				return fmt.Errorf("no configuration: pass -c FILE or set LLMFLOW_CONFIG")
			}
			cfg, err := config.Load(path)
			var ds config.Diagnostics
			if errors.As(err, &ds) {
				for _, d := range ds {
					printFinding(e.stdout, doctor.Finding{Check: "config", Status: doctor.Fail, Message: d.String()})
				}
				fmt.Fprintf(e.stdout, "the configuration does not load: fix it first (llmflow check-config -c %s)\n", path)
				return &exitError{code: 1}
			} else if err != nil {
				return err
			}
			printFinding(e.stdout, doctor.Finding{Check: "config", Status: doctor.OK,
				Message: fmt.Sprintf("%s: %d organisations, %d pools, %d models", cfg.Filename, len(cfg.Orgs), len(cfg.Pools), len(cfg.Models))})
			// go-redis's own dial messages would interleave with the report:
			// the redis finding says what failed.
			redisstate.SetClientLog(slog.New(slog.DiscardHandler))
			fs := doctor.Run(cmd.Context(), cfg, doctor.Options{})
			problems := 0
			for _, f := range fs {
				printFinding(e.stdout, f)
				if f.Status == doctor.Fail {
					problems++
				}
			}
			if problems > 0 {
				noun := "problems"
				if problems == 1 {
					noun = "problem"
				}
				fmt.Fprintf(e.stdout, "%d %s; run llmflow doctor again after fixing them\n", problems, noun)
				return &exitError{code: 1}
			}
			fmt.Fprintln(e.stdout, "no problem found")
			return nil
		},
	}
}

// printFinding prints one finding as "status  check  message", and its
// fix on the next line.
func printFinding(w io.Writer, f doctor.Finding) {
	fmt.Fprintf(w, "%-4s  %s: %s\n", f.Status, f.Check, strings.TrimSpace(f.Message))
	if f.Fix != "" && f.Status != doctor.OK {
		fmt.Fprintf(w, "      fix: %s\n", f.Fix)
	}
}
