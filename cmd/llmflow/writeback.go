package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/progress"
	"github.com/go-llmflow/llmflow/slurm"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/writeback"
)

// writebackStore is what the write-back reads from llmflow's store.
type writebackStore interface {
	Accounts(ctx context.Context) (llmflow.Accounts, error)
	Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	SaveUnwritten(ctx context.Context, cluster string, from, to time.Time, rows []llmflow.Unwritten) error
	SaveAssocOrder(ctx context.Context, cluster string, order []llmflow.AssocLFT) error
}

var _ writebackStore = (*store.SQLite)(nil)

// addWritebackFlags adds the flags of `llmflow sync --to-slurmdbd`.
func addWritebackFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.Bool("to-slurmdbd", false, "write llmflow's GPU-hours into slurmdbd's database as a Slurm cluster of their own (sreport shows them); needs --gpus")
	fl.String("from", "", "with --to-slurmdbd: first `HOUR` written (RFC 3339 or YYYY-MM-DD, UTC; default --to minus 24h)")
	fl.String("to", "", "with --to-slurmdbd: `HOUR` ending the hours written, exclusive (default, and at most, the start of the current hour)")
	fl.String("writeback-dsn-file", "", "`FILE` holding the MySQL DSN of slurmdbd's database for the write-back, with write grants (default slurm { dsn_file }); see go doc ./writeback")
	fl.String("writeback-cluster", llmflow.DefaultSlurmCluster, "the Slurm `CLUSTER` llmflow's usage is written as (from writeback { cluster } when set)")
	fl.Int("gpus", 0, "`N` GPUs of the pools written: capacity of the write-back cluster (count of its usage rows, idle = GPUs x 3600 - allocated; default the sum of the pools' gpus)")
	fl.String("service-user", llmflow.DefaultServiceUser, "the Slurm `USER` the requests of keys without an owner count under (from writeback { service_user } when set)")
	fl.String("writeback-tz", "", "slurmdbd's time `ZONE`, which its day and month rows follow (IANA name; default writeback { timezone }, else UTC, as report)")
}

// runWriteback is `llmflow sync --to-slurmdbd`: the hours [--from, --to)
// of the store's rollups written into slurmdbd (package writeback).
func runWriteback(cmd *cobra.Command, e *env, cfg *config.Config, db writebackStore) error {
	fl := cmd.Flags()
	str := func(n string) string { s, _ := fl.GetString(n); return strings.TrimSpace(s) }
	gpus, _ := fl.GetInt("gpus")
	dryRun, _ := fl.GetBool("dry-run")
	if gpus <= 0 && cfg != nil { // not given: the pools' GPUs, as llmflow report counts them
		for _, p := range cfg.Pools {
			gpus += p.GPUs
		}
	}
	if gpus <= 0 {
		return fmt.Errorf("--to-slurmdbd needs the GPUs of the pools whose usage is written (the cluster's capacity in sreport): --gpus N or pool { gpus }")
	}
	now := time.Now()
	to := now
	if s := str("to"); s != "" {
		t, err := parseHour(s)
		if err != nil {
			return fmt.Errorf("--to: %w", err)
		}
		to = t
	}
	from := to.Add(-24 * time.Hour)
	if s := str("from"); s != "" {
		t, err := parseHour(s)
		if err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		from = t
	}
	from, to = writeback.Hours(from, to, now)
	if !from.Before(to) {
		return fmt.Errorf("--from %s, --to %s: no ended hour to write", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	// As report and serve's write-back: the flags, else writeback { }.
	given := func(n string) string {
		if !fl.Changed(n) {
			return ""
		}
		return str(n)
	}
	wcfg := cfg
	if wcfg == nil {
		wcfg = &config.Config{}
	}
	cluster, serviceUser, loc, _, err := slurmSide(wcfg, given("writeback-cluster"), given("service-user"), given("writeback-tz"), "--writeback-tz")
	if err != nil {
		return err
	}

	s := config.Slurm{SacctmgrPath: "sacctmgr", Timeout: 2 * time.Minute}
	if cfg != nil && cfg.Slurm != nil {
		s = *cfg.Slurm
	}
	dsnFile := cmp.Or(str("writeback-dsn-file"), s.DSNFile)
	if dsnFile == "" {
		return fmt.Errorf("--to-slurmdbd needs the MySQL DSN of slurmdbd's database (with write grants) in a file: --writeback-dsn-file or slurm { dsn_file }")
	}
	dsn, err := config.ReadSecret(dsnFile)
	if err != nil {
		return fmt.Errorf("write-back DSN: %w", err)
	}
	sm := slurm.Sacctmgr{Path: cmp.Or(str("sacctmgr"), s.SacctmgrPath, "sacctmgr"), Timeout: s.Timeout}
	if d, _ := fl.GetDuration("timeout"); d > 0 {
		sm.Timeout = d
	}
	since, err := writeback.ServedSince(cmd.Context(), db, to)
	if err != nil {
		return err
	}
	prog := progress.New(e.stderr, true, "write-back", "rows", 0)
	w, err := writeback.Open(dsn, writeback.Config{
		Since:       since,
		Cluster:     cluster,
		ServiceUser: serviceUser,
		GPUs:        gpus,
		Location:    loc,
		Sacctmgr:    sm,
		Progress: func(stage string, done, total int) {
			prog.Total("write-back "+stage, int64(total))
			prog.Set(int64(done))
		},
	})
	if err != nil {
		return err
	}
	defer w.Close()

	ctx := cmd.Context()
	tree, err := db.Accounts(ctx)
	if err != nil {
		return fmt.Errorf("reading the account tree: %w", err)
	}
	if tree == nil && cfg != nil { // never imported from Slurm: the configuration's, as llmflow report does
		tree = cfg.Accounts().SlurmNames()
	}
	rollups, err := readRollups(ctx, db, from, to, llmflow.RollupFilter{GroupBy: []string{"org", "team", "project", "owner"}}, prog)
	if err != nil {
		return fmt.Errorf("reading the rollups: %w", err)
	}
	res, err := w.Write(ctx, from, to, tree, rollups, dryRun)
	if err == nil && !dryRun {
		// what was not written, for llmflow report to say apart
		err = db.SaveUnwritten(ctx, res.Cluster, res.From, res.To, res.Unwritten)
		if err == nil {
			err = db.SaveAssocOrder(ctx, res.Cluster, res.AssocOrder)
		}
	}
	prog.Done()
	writeWriteback(e.stdout, res, gpus, loc, err)
	return err
}

// parseHour reads RFC 3339, "YYYY-MM-DDTHH:MM[:SS]" (UTC) or "YYYY-MM-DD"
// (UTC midnight).
func parseHour(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2026-11-01T00:00:00Z) or YYYY-MM-DD", s)
}

// writeWriteback prints what a write-back did. When it failed (err), it
// prints only what did happen before the failure (sacctmgr changes to the
// association tree, which are not undone) and no line that reads like
// success: the usage rows are written in one transaction, rolled back.
func writeWriteback(w io.Writer, r writeback.Result, gpus int, loc *time.Location, err error) {
	if r.Cluster == "" {
		return
	}
	if err != nil {
		if r.ClusterCreated || len(r.Tree) > 0 {
			fmt.Fprintf(w, "write-back failed; before it failed, these changes were made to cluster %s's association tree (they stay):\n", r.Cluster)
			if r.ClusterCreated {
				fmt.Fprintf(w, "sacctmgr -i add cluster %s\n", r.Cluster)
			}
			for _, c := range r.Tree {
				fmt.Fprintln(w, c)
			}
		}
		return
	}
	verb := "wrote"
	if r.DryRun {
		verb = "dry run: would write"
	}
	if r.ClusterCreated {
		fmt.Fprintf(w, "sacctmgr -i add cluster %s\n", r.Cluster)
	}
	for _, c := range r.Tree {
		fmt.Fprintln(w, c)
	}
	if r.TRESCreated {
		fmt.Fprintln(w, "tres_table: gres/gpu registered (no slurmctld had)")
	}
	fmt.Fprintf(w, "%s cluster %s, %s → %s (%d hours; days and months in %s): %.4f GPU-hours (%d GPU-seconds) for %d hour rows of associations",
		verb, r.Cluster, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), int(r.To.Sub(r.From)/time.Hour), loc,
		r.GPUHours(), r.GPUSeconds, r.AssocHours)
	if !r.DryRun {
		fmt.Fprintf(w, ", %d day rows, %d month rows; cluster rows (%d GPUs): %d hours, %d days, %d months; gres/gpu TRES id %d; slurmdbd's hourly rollup resumes at %s",
			r.AssocDays, r.AssocMonths, gpus, r.ClusterHours, r.ClusterDays, r.ClusterMonths, r.TRESID, r.LastRanHourly.Format(time.RFC3339))
	}
	fmt.Fprintln(w)
	if r.Unattributed.Rollups > 0 {
		fmt.Fprintf(w, "not written: %.4f GPU-hours of requests with neither project nor team (%d rollups)\n", r.Unattributed.GPUHours, r.Unattributed.Rollups)
	}
	for _, x := range r.NotWritten {
		fmt.Fprintf(w, "not written: %.4f GPU-hours of association (%s, %s): %s (the write-back never creates or revives a Slurm account or user)\n",
			float64(x.GPUSeconds)/3600, x.Account, x.User, x.Reason)
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "left out of cluster %s's tree (deleted in or missing from slurmdbd; run llmflow sync): %s\n", r.Cluster, strings.Join(r.Skipped, ", "))
	}
	if r.OverCapacity > 0 {
		fmt.Fprintf(w, "warning: %d hours used more than %d GPUs × 3600 s (idle written as 0): is --gpus the pool's GPU count?\n", r.OverCapacity, gpus)
	}
}
