package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/progress"
	"github.com/go-llmflow/llmflow/server"
	"github.com/go-llmflow/llmflow/slurmsync"
)

// slurmFlags override the configuration's slurm block on the command line.
type slurmFlags struct {
	fromDBD, fromSacctmgr bool
	dsnFile, cluster      string
	files                 []string // --file: one listing or dump, or the plain and the withdeleted listing
	columns               string   // --columns: the columns of -n listings
	listing               string   // --listing: what a single --file is (plain, withdeleted)
	sacctmgrPath          string
	timeout               time.Duration
	warn                  io.Writer // warnings about the files (nil: none)
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
	if s.Cluster == "" || s.Source != "sacctmgr" {
		return slurmsync.Open(s, nil) // its errors come first, as they name what is missing
	}
	if f.listing != "" && len(f.files) == 0 {
		return nil, "", nil, fmt.Errorf("--listing says what a --file listing is: pass --file too")
	}
	if f.columns != "" && len(f.files) == 0 {
		return nil, "", nil, fmt.Errorf("--columns names the columns of --file listings printed with -n: pass --file too")
	}
	if len(f.files) == 0 {
		return slurmsync.Open(s, nil)
	}
	kind, err := slurmsync.ParseListingKind(f.listing)
	if err != nil {
		return nil, "", nil, err
	}
	files, err := slurmsync.ListingFiles(f.files, kind, f.warn)
	if err != nil {
		return nil, "", nil, err
	}
	ls := &slurmsync.Listings{Files: files, Names: f.files}
	if f.columns != "" {
		for _, c := range strings.Split(f.columns, ",") {
			ls.Columns = append(ls.Columns, strings.TrimSpace(c))
		}
	}
	return slurmsync.Open(s, ls)
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
			"an association are the members, and each user association (root's own too) with its shares is\n" +
			"a leaf of the fair-share tree, as in sshare -a. With the slurm block, Slurm also says who\n" +
			"administers: a coordinator (sacctmgr add coordinator) of an organisation account is its org_admin,\n" +
			"of a team account its team_admin, and users with an association are members of their teams;\n" +
			"these roles go at the next sync once Slurm drops them (roles granted by hand stay), and a user\n" +
			"removed from Slurm with no hand-granted role is disabled. Accounts removed in Slurm are disabled, never\n" +
			"deleted; one deleted before llmflow saw it is not imported. The\n" +
			"changes are printed and applied in one transaction (--dry-run only prints them). Every run is\n" +
			"recorded: --history lists them. Running gateways of the store serve an applied tree at once\n" +
			"(announced on the redis block's Redis), or within 5 s without Redis (they check the store).",
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
			db, err := server.OpenStore(ctx, cfg)
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
			f.warn = e.stderr
			src, name, closeSrc, err := slurmSource(cfg, f)
			if err != nil {
				return err
			}
			defer closeSrc()
			syncer := &slurmsync.Syncer{Source: src, Name: name, Sink: db}
			if cfg.Slurm != nil {
				// Slurm is the source of who administers only where the
				// gateway serves Slurm's tree.
				syncer.Roles = db
			}
			// On a terminal, the associations read and the changes
			// applied (or, while the source is read, the time it takes).
			sm := &syncMeter{m: progress.New(e.stderr, true, "sync", "associations", 0)}
			if sm.m != nil {
				syncer.Progress = sm.tell
			}
			res, err := syncer.Run(ctx, dryRun)
			sm.done()
			if err != nil && len(f.files) > 0 && f.columns == "" && strings.Contains(err.Error(), "--noheader (-n)") {
				err = fmt.Errorf("%w; name them with --columns, e.g. --columns Cluster,Account,User,Partition,Share,ParentName", err)
			}
			writeChanges(e.stdout, res)
			if err == nil && cfg.Slurm != nil && res.Run.Outcome == "applied" && len(res.Changes) > 0 {
				fmt.Fprintln(e.stdout, server.AnnounceTree(ctx, cfg))
			}
			for _, n := range append(res.Notes, res.RoleNotes...) {
				fmt.Fprintln(e.stderr, "note: "+n)
			}
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
	fl.StringVar(&f.dsnFile, "dsn-file", "", "`FILE` holding slurmdbd's MySQL DSN (overrides slurm { dsn_file })")
	fl.StringVar(&f.cluster, "cluster", "", "Slurm `CLUSTER` (overrides slurm { cluster })")
	fl.StringArrayVar(&f.files, "file", nil, "with --from-sacctmgr: read `FILE` instead of running sacctmgr: the output of\n"+
		"sacctmgr -P show assoc where cluster=C format=Cluster,Account,User,Partition,Share,ParentName[,GrpTRESMins,GrpTRES,MaxTRES]\n"+
		"(any columns with Account, User, Share and the parents; -p and -n too, see --columns), or the file\n"+
		"sacctmgr dump C file=F writes; twice: that listing and the same with withdeleted, so that\n"+
		"deleted associations are known as such; and the coordinators, the output of\n"+
		"sacctmgr -P show user withcoord format=User,Coord (or show account withcoord), recognised by its\n"+
		"Coord Accounts column: without it no role changes")
	fl.StringVar(&f.listing, "listing", "", "what a single association --file is, when its content cannot tell: `plain` (sacctmgr show assoc);\n"+
		"withdeleted is refused alone (its deleted associations would be imported as live). Told by content where it can\n"+
		"(with LFT,RGT a plain listing shows its deleted rows missing), never by the file's name")
	fl.StringVar(&f.columns, "columns", "", "the `COLUMNS` of --file listings printed with -n (--noheader), comma-separated as in format=")
	fl.StringVar(&f.sacctmgrPath, "sacctmgr", "", "the sacctmgr `COMMAND` (overrides slurm { sacctmgr_path })")
	fl.DurationVar(&f.timeout, "timeout", 0, "bound on the import (default slurm { timeout }, 2m)")
	fl.BoolVar(&dryRun, "dry-run", false, "print the changes, apply nothing")
	fl.BoolVar(&history, "history", false, "list the recorded runs")
	fl.IntVar(&limit, "limit", 20, "with --history: how many runs")
	addWritebackFlags(cmd)
	return cmd
}

// syncMeter draws what slurmsync.Syncer.Progress tells on a meter.
type syncMeter struct {
	m     *progress.Meter
	stage string
	stop  func() // ends the Wait of a stage with nothing to count yet
}

func (s *syncMeter) tell(stage, unit string, done, total int) {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	if stage != s.stage {
		s.m.Stage("sync "+stage, unit, int64(total))
		s.stage = stage
	} else {
		s.m.Total("", int64(total))
	}
	if done == 0 && total == 0 { // reading the source: nothing counted until it answers
		s.stop = s.m.Wait()
		return
	}
	s.m.Set(int64(done))
}

// done clears the line, before the changes are printed.
func (s *syncMeter) done() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	s.m.Done()
}

func writeChanges(w io.Writer, res slurmsync.Result) {
	for _, c := range res.Changes {
		fmt.Fprintln(w, c)
	}
	var counts [llmflow.OpDisableUser + 1]int
	for _, c := range res.RoleChanges {
		fmt.Fprintln(w, slurmsync.RoleChangeString(c))
		counts[c.Op]++
	}
	if len(res.RoleChanges) > 0 {
		fmt.Fprintf(w, "roles: %d granted, %d revoked; users: %d created, %d disabled, %d re-enabled\n",
			counts[llmflow.OpGrant], counts[llmflow.OpRevoke], counts[llmflow.OpCreateUser], counts[llmflow.OpDisableUser], counts[llmflow.OpEnableUser])
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
