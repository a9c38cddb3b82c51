package main

import (
	"bufio"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/reports"
	"github.com/go-llmflow/llmflow/writeback"
)

func reportCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "report [-c FILE] [--as-cluster NAME] [--gpus N] [--service-user NAME] SREPORT-ARGS…",
		Short: "GPU-hours as sreport prints them (cluster AccountUtilizationByUser, UserUtilizationByAccount, Utilization, user TopUsage)",
		Long: "report prints llmflow's GPU-hours exactly as Slurm 22.05's sreport prints usage, with sreport's\n" +
			"arguments, so its rows can be put next to sreport's. Requests count under the Slurm association\n" +
			"(the key's project or team account, the key's owner or --service-user), the same mapping the\n" +
			"write-back to slurmdbd uses (llmflow sync --to-slurmdbd): after a write-back, `sreport ...\n" +
			"cluster=llm` and `llmflow report ...` give the same rows. The cluster totals count --gpus (default:\n" +
			"the sum of the pools' gpus). Reports read hourly rollups, never raw records.",
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
			if o.config == "" {
				o.config = e.str(cmd, "config")
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
				return err
			}
			if o.gpus < 0 { // not given: the pools' GPUs
				o.gpus = 0
				for _, p := range cfg.Pools {
					o.gpus += p.GPUs
				}
			}
			db, err := openStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			now := time.Now()
			period, err := reports.Resolve(req, now, time.UTC)
			if err != nil {
				return err
			}
			rollups, err := db.Rollups(cmd.Context(), period.Start, period.End, llmflow.RollupFilter{GroupBy: []string{"team", "project", "owner"}})
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
			rows, _ := writeback.Usage(rollups, o.serviceUser)
			data := reportData(tree, rows, o.gpus, o.cluster, period, now)
			w := bufio.NewWriter(e.stdout)
			if err := reports.Run(w, req, data); err != nil {
				return err
			}
			return w.Flush()
		},
	}
}

type reportOpts struct {
	config, cluster, serviceUser string
	gpus                         int
	help                         bool
}

// reportOptions takes llmflow's own options out of the arguments; the rest
// are sreport's.
func reportOptions(args []string) (reportOpts, []string, error) {
	o := reportOpts{cluster: writeback.DefaultCluster, serviceUser: writeback.DefaultServiceUser, gpus: -1}
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
		switch name {
		case "-c", "--config":
			o.config, err = take()
		case "--as-cluster":
			o.cluster, err = take()
		case "--service-user":
			o.serviceUser, err = take()
		case "--gpus":
			var s string
			if s, err = take(); err == nil {
				if o.gpus, err = strconv.Atoi(s); err != nil || o.gpus < 0 {
					err = fmt.Errorf("--gpus: %q is not a GPU count", s)
				}
			}
		case "-h", "--help":
			o.help = true
		default:
			rest = append(rest, a)
		}
		if err != nil {
			return o, nil, err
		}
	}
	return o, rest, nil
}

// reportData is llmflow's usage in sreport's model, as the write-back puts
// it in slurmdbd: the account tree under root, one user association per
// (account, user) with usage, the hourly GPU-seconds of writeback.Usage as
// gres/gpu rows and the same seconds as cpu rows (sreport sorts user lists
// by cpu), days and months summed from them as slurmdbd does, and cluster
// rows of gpus GPUs for every hour of the period that has ended.
func reportData(tree llmflow.Accounts, rows []writeback.AssocHour, gpus int, cluster string, p reports.Period, now time.Time) reports.Data {
	tresNames := []string{"gres/gpu", "cpu"}
	d := reports.Data{Cluster: cluster, Now: now, Location: time.UTC, ProperName: properName}
	d.Accounts = append(d.Accounts, reports.Account{Name: "root"})
	known := map[string]bool{"root": true}
	for _, a := range tree {
		parent := strings.ToLower(a.Parent)
		if parent == "" {
			parent = "root"
		}
		name := strings.ToLower(a.Name)
		d.Accounts = append(d.Accounts, reports.Account{Name: name, Parent: parent, Deleted: a.Disabled})
		known[name] = true
	}
	assoc := map[[2]string]int{}
	for _, r := range rows {
		k := [2]string{r.Account, r.User}
		if _, ok := assoc[k]; !ok {
			if !known[r.Account] { // usage of an account no longer in the tree: under root
				d.Accounts = append(d.Accounts, reports.Account{Name: r.Account, Parent: "root", Deleted: true})
				known[r.Account] = true
			}
			assoc[k] = len(d.Assocs)
			d.Assocs = append(d.Assocs, reports.Assoc{Account: r.Account, User: r.User})
		}
	}
	day := func(t time.Time) time.Time { y, m, dd := t.Date(); return time.Date(y, m, dd, 0, 0, 0, 0, time.UTC) }
	month := func(t time.Time) time.Time { y, m, _ := t.Date(); return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC) }
	type gk struct {
		assoc int
		start int64
	}
	sums := [3]map[gk]uint64{{}, {}, {}}
	alloc := map[int64]uint64{}
	for _, r := range rows {
		i := assoc[[2]string{r.Account, r.User}]
		secs := uint64(r.AllocSecs)
		for g, start := range [3]time.Time{r.Hour, day(r.Hour), month(r.Hour)} {
			sums[g][gk{i, start.Unix()}] += secs
		}
		alloc[r.Hour.Unix()] += secs
	}
	for g := range sums {
		for k, s := range sums[g] {
			for _, tres := range tresNames {
				d.Usage[g] = append(d.Usage[g], reports.UsageRow{Assoc: k.assoc, TRES: tres, Start: time.Unix(k.start, 0).UTC(), Secs: s})
			}
		}
		slices.SortFunc(d.Usage[g], func(a, b reports.UsageRow) int {
			if c := a.Start.Compare(b.Start); c != 0 {
				return c
			}
			if a.Assoc != b.Assoc {
				return a.Assoc - b.Assoc
			}
			return strings.Compare(a.TRES, b.TRES)
		})
	}
	// cluster rows: every hour of the period that has ended
	capacity := uint64(gpus) * 3600
	crow := [3]map[int64]*reports.ClusterRow{{}, {}, {}}
	var order [3][]int64
	end := p.End
	if now.Before(end) {
		end = now.Truncate(time.Hour)
	}
	for h := p.Start.Truncate(time.Hour); h.Before(end); h = h.Add(time.Hour) {
		a := alloc[h.Unix()]
		idle := uint64(0)
		if a < capacity {
			idle = capacity - a
		}
		for g, start := range [3]time.Time{h, day(h), month(h)} {
			c := crow[g][start.Unix()]
			if c == nil {
				c = &reports.ClusterRow{Start: start, Count: uint64(gpus)}
				crow[g][start.Unix()] = c
				order[g] = append(order[g], start.Unix())
			}
			c.Alloc += a
			c.Idle += idle
		}
	}
	for g := range crow {
		for _, s := range order[g] {
			for _, tres := range tresNames {
				c := *crow[g][s]
				c.TRES = tres
				d.ClusterUsage[g] = append(d.ClusterUsage[g], c)
			}
		}
	}
	return d
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
