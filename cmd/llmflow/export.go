package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/reports"
	"github.com/go-llmflow/llmflow/server"
)

func exportCmd(e *env) *cobra.Command {
	var from, to, groupBy, format, output string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Spend per organisation, team, project, key, model, pool or tag, as CSV, JSON or parsable2",
		Long: "export sums the accounting rollups of [--from, --to) per group: requests, prompt, completion\n" +
			"and cached tokens, GPU-hours and estimated requests. Bounds are dates (UTC midnight) or RFC 3339\n" +
			"times, truncated to the hour. A request with several tags counts once under each tag.\n" +
			"parsable2 is pipe-delimited like sreport --parsable2, to put next to its output.",
		Example: "  llmflow export -c gateway.hcl --from 2026-10-01 --to 2026-11-01 > october.csv\n" +
			"  llmflow export -c gateway.hcl --from 2026-10-01 --to 2026-11-01 --group-by org,team,project --format parsable2",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := reports.ParseSpendTime(from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			t, err := reports.ParseSpendTime(to)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			if !f.Before(t) {
				return fmt.Errorf("--to must be after --from")
			}
			dims, err := reports.ParseGroupBy(groupBy)
			if err != nil {
				return fmt.Errorf("--group-by: %w", err)
			}
			cfg, err := e.loadConfig(cmd, " (the store it names holds the accounting)")
			if err != nil {
				return err
			}
			db, err := server.OpenStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			rows, err := db.Spend(cmd.Context(), f, t, llmflow.RollupFilter{GroupBy: dims, Total: true})
			if err != nil {
				return err
			}
			if output == "" {
				w := bufio.NewWriter(e.stdout)
				if err := reports.WriteSpend(w, rows, dims, format, f, t); err != nil {
					return err
				}
				return w.Flush()
			}
			return writeFileAtomic(output, func(w *bufio.Writer) error { return reports.WriteSpend(w, rows, dims, format, f, t) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", "", "start (inclusive): 2026-10-01 or an RFC 3339 time")
	fl.StringVar(&to, "to", "", "end (exclusive)")
	fl.StringVar(&groupBy, "group-by", "org,team", "comma-separated: "+strings.Join(llmflow.RollupDimensions(), ", "))
	fl.StringVar(&format, "format", "csv", "csv, json or parsable2")
	fl.StringVarP(&output, "output", "o", "", "write to this file (atomically) instead of stdout")
	cmd.MarkFlagRequired("from")
	cmd.MarkFlagRequired("to")
	return cmd
}

// writeFileAtomic writes path through a temporary file renamed into place,
// so a reader never sees half a report.
func writeFileAtomic(path string, write func(*bufio.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	if err := write(w); err != nil {
		tmp.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
