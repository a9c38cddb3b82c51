package server

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/redisstate"
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
	// stop cancels the imports of this generation (close); runs tracks
	// the goroutines that run them, so that none runs against a stopped
	// generation or a closed source.
	stop context.CancelFunc
	runs sync.WaitGroup
	// closed is set by close (under mu): the source is released, nothing
	// more is imported or served
	closed bool
	// announce tells the other replicas that an import changed the
	// stored tree (serve: a message on the Redis channel); nil: alone.
	announce func(ctx context.Context)
	// history reads the latest sync runs: a run recorded by another
	// process (`llmflow sync`, a replica without Redis) makes this one
	// serve the stored tree within treeWatchEvery. nil: no watch.
	history admin.SyncHistory
}

// treeWatchEvery is how often serve looks for a sync run recorded by
// another process on its store (one indexed row read).
const treeWatchEvery = 5 * time.Second

func newSlurmImport(ctx context.Context, cfg *config.Config, as AccountStore, log *slog.Logger) (*slurmImport, error) {
	src, name, closeSrc, err := slurmsync.Open(*cfg.Slurm, nil)
	if err != nil {
		return nil, err
	}
	// Slurm is the source of who administers (coordinators, members).
	syncer := &slurmsync.Syncer{Source: src, Name: name, Sink: as, Roles: as}
	imp := &slurmImport{cfg: cfg, syncer: syncer,
		closeSrc: closeSrc, log: log, cfgAccts: cfg.Accounts(), history: as}
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

// treeServer is what the import hands its results to: the generation's
// gateway (its control surface).
type treeServer interface {
	SetAccounts(llmflow.Accounts)
	ReportSync(llmflow.SyncRun)
}

var _ treeServer = (*gateway.Gateway)(nil)

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

// start runs an import now and then on the schedule, until ctx ends or
// close.
func (imp *slurmImport) start(ctx context.Context, gw treeServer) {
	ctx, imp.stop = context.WithCancel(ctx)
	imp.cron = cron.New()
	if _, err := imp.cron.AddFunc(imp.cfg.Slurm.Schedule, func() { imp.run(ctx, gw) }); err != nil {
		imp.log.Error("slurm import schedule", "err", err) // checked by config: cannot happen
	}
	imp.cron.Start()
	imp.runs.Go(func() { imp.run(ctx, gw) })
	if imp.history != nil {
		last := imp.lastRun(ctx)
		imp.runs.Go(func() { imp.watch(ctx, gw, last) })
	}
}

// lastRun is the ID of the latest sync run recorded in the store (0: none
// or unreadable).
func (imp *slurmImport) lastRun(ctx context.Context) int64 {
	runs, err := imp.history.SyncRuns(ctx, 1)
	if err != nil || len(runs) == 0 {
		return 0
	}
	return runs[0].ID
}

// watch serves the stored tree whenever a sync run newer than last is
// recorded, until ctx ends: `llmflow sync` run by an admin, or a replica
// sharing the store without Redis, reaches this gateway within
// treeWatchEvery rather than at its next scheduled import. (With Redis,
// their announcement makes it at once: receiver.TreeChanged.)
func (imp *slurmImport) watch(ctx context.Context, gw treeServer, last int64) {
	t := time.NewTicker(treeWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id := imp.lastRun(ctx)
		if id == last || id == 0 {
			continue
		}
		if err := imp.reload(ctx, gw); err != nil {
			imp.log.Warn("account tree not reloaded after a sync run recorded in the store", "err", err)
			continue
		}
		last = id
	}
}

// run imports once and hands a changed tree to the gateway.
func (imp *slurmImport) run(ctx context.Context, gw treeServer) {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if ctx.Err() != nil || imp.closed {
		return
	}
	start := time.Now()
	res, err := imp.syncer.Run(ctx, false)
	if ctx.Err() != nil {
		return // the generation stops (a reload, a shutdown): the next one serves what is stored
	}
	if err == nil && (res.Run.Outcome == "applied" || res.Run.Outcome == "unchanged") {
		// unchanged: Slurm equals the stored tree, which another replica
		// may have applied since this one last served it
		if err = imp.serve(gw, res.Accounts); err != nil {
			res.Run.Outcome, res.Run.Error = "failed", err.Error()
		} else if res.Run.Outcome == "applied" && imp.announce != nil {
			imp.announce(ctx)
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
	for _, n := range res.Notes {
		imp.log.Info("slurm import note", "note", n)
	}
}

// serve hands gw the tree combined from stored (the Slurm tree in the
// store), when it differs from the one served now. imp.mu is held.
func (imp *slurmImport) serve(gw treeServer, stored llmflow.Accounts) error {
	accts, err := imp.combine(stored)
	if err != nil {
		return err
	}
	if reflect.DeepEqual(accts, *imp.current.Load()) {
		return nil
	}
	imp.current.Store(&accts)
	gw.SetAccounts(accts)
	return nil
}

// reload serves the tree in the store now: another replica's import
// changed it (its announcement), so this one follows at once rather than
// at its next import.
func (imp *slurmImport) reload(ctx context.Context, gw treeServer) error {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if imp.closed {
		return nil // a stopped generation: the serving one reloads
	}
	stored, err := imp.syncer.Sink.Accounts(ctx)
	if err != nil {
		return fmt.Errorf("read the account tree: %w", err)
	}
	return imp.serve(gw, stored)
}

// close stops the schedule, cancels a running import and waits for it:
// after close no import of this generation runs or starts, and the
// source is released.
func (imp *slurmImport) close() {
	if imp.stop != nil {
		imp.stop()
	}
	if imp.cron != nil {
		<-imp.cron.Stop().Done()
	}
	imp.runs.Wait()
	imp.mu.Lock() // a reload from another replica's announcement
	imp.closeSrc()
	imp.closed = true
	imp.mu.Unlock()
}

// AnnounceTree tells the running gateways of cfg's store that `llmflow
// sync` changed the stored tree, and returns what to tell the admin: with
// a redis block, the announcement the replicas' own imports make (they
// serve the tree at once); without one, or when Redis does not take it,
// each gateway finds the run in the store within treeWatchEvery.
func AnnounceTree(ctx context.Context, cfg *config.Config) string {
	poll := fmt.Sprintf("running gateways of this store serve it within %s (they check the store's sync runs)", treeWatchEvery)
	if cfg.Redis == nil {
		return poll
	}
	n, err := redisstate.AnnounceTree(ctx, *cfg.Redis)
	if err != nil {
		return "not announced on redis (" + err.Error() + "): " + poll
	}
	return fmt.Sprintf("announced on redis %s to %d running gateway(s): they serve it now", cfg.Redis.Address, n)
}
