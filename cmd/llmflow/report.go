package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/progress"
	"github.com/go-llmflow/llmflow/reports"
	"github.com/go-llmflow/llmflow/server"
	"github.com/go-llmflow/llmflow/writeback"
)

func reportCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report [-c FILE] [--as-cluster NAME] [--gpus N] [--service-user NAME] [--timezone TZ] SREPORT-ARGS…",
		Short: "GPU-hours as sreport prints them (cluster AccountUtilizationByUser, UserUtilizationByAccount, Utilization, user TopUsage)",
		Long: "report prints llmflow's GPU-hours exactly as Slurm 22.05's sreport prints usage, with sreport's\n" +
			"arguments, so its rows can be put next to sreport's. Requests count under the Slurm association\n" +
			"(the key's project or team account, the key's owner or --service-user), the same mapping the\n" +
			"write-back to slurmdbd uses (llmflow sync --to-slurmdbd): after a write-back, `sreport ...\n" +
			"cluster=llm` and `llmflow report ...` give the same rows. The cluster totals count --gpus (default:\n" +
			"the sum of the pools' gpus) for the hours served: from the hour of the store's oldest record to\n" +
			"the last ended hour. Against sreport on the write-back cluster the two agree exactly when the\n" +
			"period lies within hours the write-back has written (llmflow sync --to-slurmdbd, or writeback {}\n" +
			"in serve, which re-writes its lookback every run): slurmdbd holds no hour after the last\n" +
			"write-back's end, so a period reaching past it shows less there. The cluster, the service user and the time zone (sreport's TZ, which\n" +
			"the period and the day and month rows follow) are the configuration's writeback { cluster,\n" +
			"service_user, timezone } when it has that block (else llm, llmflow and UTC); the flags override\n" +
			"them. Reports read hourly rollups, never raw records.",
		Example: "  llmflow report -c gateway.hcl cluster AccountUtilizationByUser start=2026-10-01 end=2026-11-01 -T gres/gpu -t hours -P\n" +
			"  llmflow report -c gateway.hcl user TopUsage start=2026-10-01 end=2026-11-01 -T gres/gpu TopCount=5",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, rest, err := reportOptions(args)
			if err != nil {
				return err
			}
			if o.help {
				return cmd.Help()
			}
			if o.config == "" { // flags are not parsed by cobra here: LLMFLOW_CONFIG
				o.config = e.configPath()
			}
			if o.config == "" {
				return fmt.Errorf("no configuration: pass -c FILE or set LLMFLOW_CONFIG (the store it names holds the accounting)")
			}
			req, err := reports.ParseArgs(rest)
			if err != nil {
				return err
			}
			cfg, err := config.Load(o.config)
			if err != nil {
				return e.diagnostics(err)
			}
			cluster, serviceUser, loc, defaultTZ, err := o.slurmSide(cfg)
			if err != nil {
				return err
			}

			if o.gpus < 0 { // not given: the pools' GPUs
				o.gpus = 0
				for _, p := range cfg.Pools {
					o.gpus += p.GPUs
				}
			}
			if o.gpus == 0 && needsCapacity(req) {
				return fmt.Errorf("this report needs the cluster's capacity, and no pool says how many GPUs it has: " +
					"set pool { gpus = N } in the configuration or pass --gpus N")
			}
			db, err := server.OpenStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			now := time.Now()
			period, err := reports.Resolve(req, now, loc)
			if err != nil {
				return err
			}
			// Progress on a terminal, not for scripts (-p, -P).
			prog := progress.New(e.stderr, req.Output == reports.Table, "report", "hours", 0)
			rollups, err := readRollups(cmd.Context(), db, period.Start, period.End, llmflow.RollupFilter{GroupBy: []string{"team", "project", "owner"}}, prog)
			prog.Done()
			if err != nil {
				return err
			}
			tree, err := db.Accounts(cmd.Context())
			if err != nil {
				return err
			}
			if tree == nil {
				tree = cfg.Accounts().SlurmNames()
			}
			rows, _ := llmflow.AssocHours(rollups, serviceUser)
			// what the write-back could not write is not in slurmdbd:
			// left out, and said apart
			unwritten, err := db.Unwritten(cmd.Context(), cluster, period.Start, period.End)
			if err != nil {
				return err
			}
			rows, unwritten = reports.WithoutUnwritten(rows, unwritten)
			since, err := writeback.ServedSince(cmd.Context(), db, period.End)
			if err != nil {
				return err
			}
			data := reports.FromAssocHours(tree, rows, o.gpus, cluster, period, now, loc, since)
			// where the write-back's cluster has the associations, their
			// order is slurmdbd's (lft), as sreport lists them
			order, err := db.AssocOrder(cmd.Context(), cluster)
			if err != nil {
				return err
			}
			data.SortAssocs(order)
			data.ProperName = properName
			w := bufio.NewWriter(e.stdout)
			if err := reports.Run(w, req, data); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
			for _, u := range unwritten {
				fmt.Fprintf(e.stderr, "note: not counted, as slurmdbd does not hold it: %.4f GPU-hours of association (%s, %s) the write-back to cluster %s could not write: %s\n",
					float64(u.AllocSecs)/3600, u.Account, u.User, cluster, u.Reason)
			}
			if defaultTZ {
				fmt.Fprintf(e.stderr, "note: periods, days and months in %s, llmflow's default (slurmdbd's zone: writeback { timezone } or --timezone)\n", loc)
			}
			return reportNote(cmd.Context(), e.stderr, db, period, now, loc, len(rows) == 0)
		},
	}
	// Parsed by reportOptions (sreport's own arguments follow them);
	// declared here too so that --help lists them: one list, reportFlags.
	cmd.Flags().AddFlagSet(reportFlags())
	return cmd
}

// reportNote tells, on stderr, what a report of period (resolved at now)
// leaves out: the hour running now is never shown (sreport's rows come
// from slurmdbd's rollup of ended hours, and so do ours: without the
// hour's cluster row sreport prints none of its usage), so a period that
// takes it in says so; and an empty report (the first hour after install:
// sreport's default period is yesterday) says where the store's usage is
// and when it shows.
func reportNote(ctx context.Context, w io.Writer, db writeback.RollupReader, period reports.Period, now time.Time, loc *time.Location, empty bool) error {
	const layout = "2006-01-02T15:04:05"
	running := now.Truncate(time.Hour)
	if period.End.After(now) {
		fmt.Fprintf(w, "note: the hour from %s is still running and is not shown: reports count ended hours, as slurmdbd's rollup does (it shows from %s)\n",
			running.In(loc).Format("15:04"), running.Add(time.Hour).In(loc).Format("15:04"))
		return nil
	}
	if !empty {
		return nil
	}
	after, err := db.Rollups(ctx, period.End, running.Add(time.Hour), llmflow.RollupFilter{GroupBy: []string{llmflow.DimPool}})
	if err != nil {
		return fmt.Errorf("reading usage after the period: %w", err)
	}
	var first time.Time
	for _, r := range after {
		if first.IsZero() || r.Hour.Before(first) {
			first = r.Hour
		}
	}
	if first.IsZero() {
		return nil
	}
	when := ""
	if !first.Before(running) {
		when = " once its hour has ended, from " + running.Add(time.Hour).In(loc).Format("15:04")
	}
	fmt.Fprintf(w, "note: nothing was served from %s to %s; usage from %s on is after this period (start=%s shows it%s)\n",
		period.Start.In(loc).Format(layout), period.End.In(loc).Format(layout), first.In(loc).Format(layout), first.In(loc).Format(layout), when)
	return nil
}

// needsCapacity reports whether req shows the cluster's capacity (GPUs ×
// hours): Utilization, and percentages of the total.
func needsCapacity(req reports.Request) bool {
	switch req.Time {
	case reports.Percent, reports.SecPer, reports.MinPer, reports.HourPer:
		return true
	}
	return req.Report == reports.Utilization
}

type reportOpts struct {
	config, cluster, serviceUser, timezone string // "": not given
	gpus                                   int    // -1: not given
	help                                   bool
}

// slurmSide returns the cluster, service user and time zone of the report:
// the flags', else the configuration's writeback block's (as the
// write-back to slurmdbd uses them), else llmflow's defaults and UTC.
func (o reportOpts) slurmSide(cfg *config.Config) (cluster, serviceUser string, loc *time.Location, defaultTZ bool, err error) {
	return slurmSide(cfg, o.cluster, o.serviceUser, o.timezone, "--timezone")
}

// slurmSide returns the Slurm cluster, service user and slurmdbd time zone
// llmflow's usage is reported under, by report and by the write-back: each
// given value ("" for not given; tzFlag names the time zone's flag in
// errors), else the configuration's writeback block's, else llmflow's
// defaults: one time zone for both, config.DefaultWritebackTimezone (UTC),
// never the process's local zone. defaultTZ says the zone is that default
// (for the output to name it).
func slurmSide(cfg *config.Config, cluster, serviceUser, tz, tzFlag string) (_, _ string, _ *time.Location, defaultTZ bool, _ error) {
	defCluster, defUser, defTZ := llmflow.DefaultSlurmCluster, llmflow.DefaultServiceUser, ""
	if wc := cfg.Writeback; wc != nil {
		defCluster = cmp.Or(wc.Cluster, defCluster)
		defUser = cmp.Or(wc.ServiceUser, defUser)
		defTZ = wc.Timezone
	}
	what := "writeback timezone"
	if tz != "" {
		what = tzFlag
	}
	name := cmp.Or(tz, defTZ, config.DefaultWritebackTimezone)
	loc, err := time.LoadLocation(name)
	if err != nil {
		return "", "", nil, false, fmt.Errorf("%s: %w", what, err)
	}
	return cmp.Or(cluster, defCluster), cmp.Or(serviceUser, defUser), loc, tz == "" && defTZ == "", nil
}

// reportFlags declares report's own options, for reportOptions to parse
// and for --help to list.
func reportFlags() *pflag.FlagSet {
	fl := pflag.NewFlagSet("report", pflag.ContinueOnError)
	fl.String("as-cluster", "", "the Slurm cluster the usage is reported as (default writeback { cluster }, else llm)")
	fl.Int("gpus", 0, "the cluster's GPUs: its capacity in Utilization and percentages (default the sum of the pools' gpus)")
	fl.String("service-user", "", "the Slurm user of keys without an owner (default writeback { service_user }, else llmflow)")
	fl.String("timezone", "", "sreport's time zone, which the period and the day and month rows follow (default writeback { timezone }, else UTC)")
	return fl
}

// reportOptions takes llmflow's own options (reportFlags, and the root's
// -c/--config and -h/--help) out of the arguments; the rest are sreport's.
func reportOptions(args []string) (reportOpts, []string, error) {
	o := reportOpts{gpus: -1}
	fl := reportFlags()
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		take := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch f := fl.Lookup(strings.TrimPrefix(name, "--")); {
		case name == "-c" || name == "--config":
			o.config, err = take()
		case name == "-h" || name == "--help":
			o.help = true
		case strings.HasPrefix(name, "--") && f != nil:
			var v string
			if v, err = take(); err == nil {
				if err = fl.Set(f.Name, v); err != nil || (f.Name == "gpus" && strings.HasPrefix(v, "-")) {
					err = fmt.Errorf("%s: %q is not a GPU count", name, v) // --gpus is the only flag Set can refuse
				}
			}
		default:
			rest = append(rest, a)
		}
		if err != nil {
			return o, nil, err
		}
	}
	o.cluster, _ = fl.GetString("as-cluster")
	o.serviceUser, _ = fl.GetString("service-user")
	o.timezone, _ = fl.GetString("timezone")
	if fl.Changed("gpus") {
		o.gpus, _ = fl.GetInt("gpus")
	}
	return o, rest, nil
}

// properName is sreport's Proper Name: the GECOS of the login on this
// host, up to the first comma.
func properName(login string) string {
	u, err := user.Lookup(login)
	if err != nil {
		return ""
	}
	return reports.GECOSName(u.Name)
}
