package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/progress"
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
			// On a terminal, the time the query takes (see readSpend).
			prog := progress.New(e.stderr, true, exportWhat(f, t), "hours", 0)
			rows, err := readSpend(cmd.Context(), db, f, t, llmflow.RollupFilter{GroupBy: dims, Total: true}, prog)
			prog.Done()
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

type spendReader interface {
	Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
}

// readSpend is db.Spend, the one query of an export, with m (nil: none)
// drawing the time it takes. Its progress cannot be counted: read in
// chunks, the GPU-hours would be summed in another order than the
// database's single sum (SQLite's compensated sum in the order of its
// plan, PostgreSQL's plain float8 sum, in parallel workers' order), and
// differ in the last digits from what a pipe gets; so the line shows the
// time elapsed, never a made-up count or time left.
func readSpend(ctx context.Context, db spendReader, from, to time.Time, f llmflow.RollupFilter, m *progress.Meter) ([]llmflow.Rollup, error) {
	stop := m.Wait()
	defer stop()
	return db.Spend(ctx, from, to, f)
}

// exportWhat names an export's query on the progress line.
func exportWhat(from, to time.Time) string {
	return fmt.Sprintf("export, one query over %d hours of rollups (%s to %s)", to.Sub(from)/time.Hour,
		from.Format(time.RFC3339), to.Format(time.RFC3339))
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
