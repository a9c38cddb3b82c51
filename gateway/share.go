package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/fairshare"
)

// shareLoop refreshes the fair-share ranks every second and saves the
// usage every minute, until ctx ends.
func (g *Gateway) shareLoop(ctx context.Context) {
	refresh := time.NewTicker(time.Second)
	defer refresh.Stop()
	lastSave := g.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-refresh.C:
		}
		now := g.now()
		for _, pl := range g.pools {
			pl.fs.Refresh(now)
		}
		if now.Sub(lastSave) >= time.Minute {
			g.saveUsage(ctx)
			lastSave = now
		}
	}
}

// restoreUsage loads a pool's saved usage, decayed across the downtime.
func (g *Gateway) restoreUsage(pl *pool) error {
	if g.usage == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	saved, at, err := g.usage.ShareUsage(ctx, pl.name)
	if err != nil {
		return fmt.Errorf("pool %q: load fair-share usage: %w", pl.name, err)
	}
	if at.IsZero() {
		return nil
	}
	entries := make([]fairshare.UsageEntry, len(saved))
	for i, u := range saved {
		entries[i] = fairshare.UsageEntry{Path: u.Path, GPUHours: u.GPUHours}
	}
	pl.fs.RestoreUsage(entries, at, g.now())
	g.log.Info("fair-share usage restored", "pool", pl.name, "accounts", len(entries), "saved", at)
	return nil
}

// saveUsage stores every pool's decayed usage; failures are logged (the
// next save retries).
func (g *Gateway) saveUsage(ctx context.Context) error {
	if g.usage == nil {
		return nil
	}
	now := g.now()
	var errs []error
	for _, pl := range g.pools {
		entries := pl.fs.Usage(now)
		usage := make([]llmflow.ShareUsage, len(entries))
		for i, e := range entries {
			usage[i] = llmflow.ShareUsage{Path: e.Path, GPUHours: e.GPUHours}
		}
		if err := g.usage.SaveShareUsage(ctx, pl.name, now, usage); err != nil {
			g.log.Error("save fair-share usage", "pool", pl.name, "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setView publishes a new organisation tree, with the changes made
// through the admin API on top (control.go: SetAccountChanges).
func (g *Gateway) setView(accts llmflow.Accounts) *accountView {
	accts = g.withAdminAccounts(accts)
	v := newAccountView(accts, g.saltKey)
	g.accts.Store(v)
	g.sync.accounts.Set(float64(len(accts)))
	return v
}

// SetAccounts replaces the organisation tree while serving (after a Slurm
// sync): keys of disabled teams stop working at once, reservations are
// recomputed, usage of the accounts that remain is kept.
func (g *Gateway) SetAccounts(accts llmflow.Accounts) {
	g.tree.mu.Lock()
	defer g.tree.mu.Unlock()
	g.setAccountsLocked(accts)
}

// setAccountsLocked is SetAccounts with g.tree.mu held.
func (g *Gateway) setAccountsLocked(accts llmflow.Accounts) {
	v := g.setView(accts)
	now := g.now()
	for _, pl := range g.pools {
		pl.fs.SetTree(v.tree(), now)
	}
}
