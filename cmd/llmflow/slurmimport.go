package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/slurmsync"
)

// slurmImport runs the Slurm import inside serve: once at start, then on
// the configured cron schedule. A failed import keeps the last good tree
// and shows in the log, /healthz and llmflow_slurm_sync_failing.
type slurmImport struct {
	cfg      *config.Config
	syncer   *slurmsync.Syncer
	closeSrc func() error
	log      *slog.Logger
	cfgAccts llmflow.Accounts
	accounts llmflow.Accounts                 // the tree to serve at start
	current  atomic.Pointer[llmflow.Accounts] // the tree served now (budgets from Slurm read it)
	cron     *cron.Cron
	mu       sync.Mutex // one import at a time
}

func newSlurmImport(ctx context.Context, cfg *config.Config, as accountStore, log *slog.Logger) (*slurmImport, error) {
	src, name, closeSrc, err := slurmSource(cfg, slurmFlags{})
	if err != nil {
		return nil, err
	}
	// Slurm is the source of who administers (coordinators, members).
	syncer := &slurmsync.Syncer{Source: src, Name: name, Sink: as, Roles: as}
	imp := &slurmImport{cfg: cfg, syncer: syncer,
		closeSrc: closeSrc, log: log, cfgAccts: cfg.Accounts()}
	stored, err := as.Accounts(ctx)
	if err != nil {
		closeSrc()
		return nil, err
	}
	if imp.accounts, err = imp.combine(stored); err != nil {
		closeSrc()
		return nil, err
	}
	imp.current.Store(&imp.accounts)
	return imp, nil
}

// combine is the tree to serve: Slurm's, then the configuration's others.
func (imp *slurmImport) combine(slurm llmflow.Accounts) (llmflow.Accounts, error) {
	where := map[string]string{}
	for _, o := range imp.cfg.Orgs {
		where[o.Name] = pos(o.DefRange.Filename, o.DefRange.Start.Line, o.DefRange.Start.Column)
		for _, t := range o.Teams {
			where[t.Name] = pos(t.DefRange.Filename, t.DefRange.Start.Line, t.DefRange.Start.Column)
		}
	}
	return slurmsync.Combine(slurm, imp.cfgAccts, func(name string) string { return where[name] })
}

func pos(file string, line, col int) string { return fmt.Sprintf("%s:%d:%d", file, line, col) }

// budgets are the budgets Slurm sets (GrpTRESMins) on the tree served
// now, for gateway.Options.SlurmBudgets: read at each budget refresh, so
// a limit changed in sacctmgr applies after the next import and refresh.
func (imp *slurmImport) budgets(softPercent float64) func() []budgets.Budget {
	return func() []budgets.Budget {
		return budgets.FromSlurm(*imp.current.Load(), budgets.Period(imp.cfg.Slurm.BudgetPeriod), softPercent)
	}
}

// start runs an import now and then on the schedule, until ctx ends.
func (imp *slurmImport) start(ctx context.Context, gw *gateway.Gateway) {
	imp.cron = cron.New()
	if _, err := imp.cron.AddFunc(imp.cfg.Slurm.Schedule, func() { imp.run(ctx, gw) }); err != nil {
		imp.log.Error("slurm import schedule", "err", err) // checked by config: cannot happen
	}
	imp.cron.Start()
	go imp.run(ctx, gw)
}

// run imports once and hands a changed tree to the gateway.
func (imp *slurmImport) run(ctx context.Context, gw *gateway.Gateway) {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	res, err := imp.syncer.Run(ctx, false)
	if err == nil && res.Run.Outcome == "applied" {
		var accts llmflow.Accounts
		if accts, err = imp.combine(res.Accounts); err == nil {
			imp.current.Store(&accts)
			gw.SetAccounts(accts)
		} else {
			res.Run.Outcome, res.Run.Error = "failed", err.Error()
		}
	}
	gw.ReportSync(res.Run)
	if err != nil {
		imp.log.Error("slurm import failed: serving the last good tree", "source", res.Run.Source, "err", err)
		return
	}
	imp.log.Info("slurm import", "source", res.Run.Source, "outcome", res.Run.Outcome, "created", res.Run.Created,
		"shares", res.Run.SharesChanged, "reparented", res.Run.Reparented, "disabled", res.Run.Disabled,
		"reenabled", res.Run.Reenabled, "took", time.Since(start).Round(time.Millisecond))
	for _, c := range res.Changes {
		imp.log.Info("slurm change", "change", c.String())
	}
	for _, c := range res.RoleChanges {
		imp.log.Info("slurm role change", "change", slurmsync.RoleChangeString(c))
	}
	for _, n := range res.RoleNotes {
		imp.log.Info("slurm role note", "note", n)
	}
}

func (imp *slurmImport) close() {
	if imp.cron != nil {
		<-imp.cron.Stop().Done()
	}
	imp.mu.Lock() // wait for a running import
	imp.closeSrc()
	imp.mu.Unlock()
}
