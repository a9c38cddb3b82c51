package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/go-llmflow/llmflow/slurmsync"
)

// accountStore is what the Slurm import needs of a store.
type accountStore interface {
	slurmsync.Sink
	gateway.SyncHistory
}

// slurmFlags override the configuration's slurm block on the command line.
type slurmFlags struct {
	fromDBD, fromSacctmgr bool
	dsnFile, cluster      string
	file, sacctmgrPath    string
	timeout               time.Duration
}

// slurmSource builds the import source from the configuration's slurm
// block and the command line; close releases it.
func slurmSource(cfg *config.Config, f slurmFlags) (src slurmsync.Source, name string, close func() error, err error) {
	s := config.Slurm{Timeout: 2 * time.Minute, SacctmgrPath: "sacctmgr"}
	if cfg != nil && cfg.Slurm != nil {
		s = *cfg.Slurm
	}
	switch {
	case f.fromDBD && f.fromSacctmgr:
		return nil, "", nil, fmt.Errorf("--from-slurmdbd and --from-sacctmgr exclude each other")
	case f.fromDBD:
		s.Source = "slurmdbd"
	case f.fromSacctmgr:
		s.Source = "sacctmgr"
	}
	if f.cluster != "" {
		s.Cluster = f.cluster
	}
	if f.dsnFile != "" {
		s.DSNFile = f.dsnFile
	}
	if f.sacctmgrPath != "" {
		s.SacctmgrPath = f.sacctmgrPath
	}
	if f.timeout > 0 {
		s.Timeout = f.timeout
	}
	if s.Cluster == "" {
		return nil, "", nil, fmt.Errorf("no Slurm cluster: pass --cluster or set slurm { cluster } in the configuration")
	}
	noop := func() error { return nil }
	switch s.Source {
	case "slurmdbd":
		if s.DSNFile == "" {
			return nil, "", nil, fmt.Errorf("slurmdbd needs the MySQL DSN of its database in a file: --dsn-file or slurm { dsn_file }")
		}
		dsn, err := config.ReadSecret(s.DSNFile)
		if err != nil {
			return nil, "", nil, fmt.Errorf("slurmdbd DSN: %w", err)
		}
		db, err := slurmsync.NewSlurmDBD(dsn, s.Cluster)
		if err != nil {
			return nil, "", nil, err
		}
		return timeoutSource{db, s.Timeout}, "slurmdbd:" + s.Cluster, db.Close, nil
	case "sacctmgr":
		sm := &slurmsync.Sacctmgr{Cluster: s.Cluster, Path: s.SacctmgrPath, Timeout: s.Timeout}
		name := "sacctmgr:" + s.Cluster
		if f.file != "" {
			sm.Files = map[slurmsync.Listing]string{slurmsync.Assocs: f.file}
			name = "file:" + f.file
		}
		return sm, name, noop, nil
	default:
		return nil, "", nil, fmt.Errorf("no Slurm source: pass --from-slurmdbd or --from-sacctmgr, or set slurm { source } in the configuration")
	}
}

// timeoutSource bounds one import.
type timeoutSource struct {
	slurmsync.Source
	timeout time.Duration
}

func (t timeoutSource) Tree(ctx context.Context) (*sacctmgr.Tree, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.Source.Tree(ctx)
}

func syncCmd(e *env) *cobra.Command {
	var f slurmFlags
	var dryRun, history bool
	var limit int
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Import the account tree and shares from Slurm (slurmdbd or sacctmgr)",
		Long: "sync reads Slurm's association tree (slurmdbd's MySQL database, or sacctmgr) and brings\n" +
			"llmflow's organisation tree in line: accounts under root become organisations, their\n" +
			"children teams, deeper accounts projects; Slurm's Fairshare values are the shares; users with\n" +
			"an association are the members. Accounts removed in Slurm are disabled, never deleted. The\n" +
			"changes are printed and applied in one transaction (--dry-run only prints them). Every run is\n" +
			"recorded: --history lists them. A running gateway picks the tree up at its next scheduled\n" +
			"import (slurm { schedule }).",
		Example: "  llmflow sync -c gateway.hcl --dry-run\n" +
			"  llmflow sync -c gateway.hcl --from-slurmdbd --dsn-file /etc/llmflow/slurmdbd.dsn --cluster hgx\n" +
			"  llmflow sync -c gateway.hcl --from-sacctmgr --cluster hgx\n" +
			"  llmflow sync -c gateway.hcl --history",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadConfig(cmd, " (the store it names keeps the tree)")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			db, err := openStore(ctx, cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			if history {
				runs, err := db.SyncRuns(ctx, limit)
				if err != nil {
					return err
				}
				return writeHistory(e.stdout, runs)
			}
			if wb, _ := cmd.Flags().GetBool("to-slurmdbd"); wb {
				return runWriteback(cmd, e, cfg, db)
			}
			src, name, closeSrc, err := slurmSource(cfg, f)
			if err != nil {
				return err
			}
			defer closeSrc()
			res, err := (&slurmsync.Syncer{Source: src, Name: name, Sink: db}).Run(ctx, dryRun)
			writeChanges(e.stdout, res)
			if err == nil && cfg.Slurm == nil {
				fmt.Fprintln(e.stderr, "note: the configuration has no slurm { } block: `llmflow serve` serves the tree the "+
					"configuration declares and ignores this import; add slurm { source, cluster, … } to serve the imported tree")
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.fromDBD, "from-slurmdbd", false, "read slurmdbd's MySQL database")
	fl.BoolVar(&f.fromSacctmgr, "from-sacctmgr", false, "run sacctmgr (or read --file)")
	fl.StringVar(&f.dsnFile, "dsn-file", "", "file holding slurmdbd's MySQL DSN (overrides slurm { dsn_file })")
	fl.StringVar(&f.cluster, "cluster", "", "Slurm cluster (overrides slurm { cluster })")
	fl.StringVar(&f.file, "file", "", "read `FILE`, the output of sacctmgr show assoc withdeleted --parsable2 format=Cluster,Account,User,Partition,Share,ParentName[,GrpTRESMins,GrpTRES], instead of running sacctmgr")
	fl.StringVar(&f.sacctmgrPath, "sacctmgr", "", "the sacctmgr command (overrides slurm { sacctmgr_path })")
	fl.DurationVar(&f.timeout, "timeout", 0, "bound on the import (default slurm { timeout }, 2m)")
	fl.BoolVar(&dryRun, "dry-run", false, "print the changes, apply nothing")
	fl.BoolVar(&history, "history", false, "list the recorded runs")
	fl.IntVar(&limit, "limit", 20, "with --history: how many runs")
	addWritebackFlags(cmd)
	return cmd
}

func writeChanges(w io.Writer, res slurmsync.Result) {
	for _, c := range res.Changes {
		fmt.Fprintln(w, c)
	}
	r := res.Run
	fmt.Fprintf(w, "%s from %s: %d created, %d shares changed, %d re-parented, %d disabled, %d re-enabled, %d members changed, %d limits changed, %d unchanged\n",
		r.Outcome, r.Source, r.Created, r.SharesChanged, r.Reparented, r.Disabled, r.Reenabled, r.Members, r.LimitsChanged, r.Unchanged)
}

func writeHistory(w io.Writer, runs []llmflow.SyncRun) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTARTED\tDURATION\tSOURCE\tOUTCOME\tCREATED\tSHARES\tREPARENTED\tDISABLED\tRE-ENABLED\tMEMBERS\tLIMITS\tUNCHANGED\tERROR")
	for _, r := range runs {
		outcome := r.Outcome
		if r.DryRun {
			outcome += " (dry run)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.ID, r.Started.Format(time.RFC3339),
			r.Finished.Sub(r.Started).Round(time.Millisecond), r.Source, outcome, r.Created, r.SharesChanged, r.Reparented,
			r.Disabled, r.Reenabled, r.Members, r.LimitsChanged, r.Unchanged, strings.ReplaceAll(r.Error, "\n", " "))
	}
	return tw.Flush()
}
