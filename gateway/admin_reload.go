package gateway

import (
	"context"
	"time"
)

// adminReloadEvery is how often a gateway checks the store's admin
// generation for changes made through another gateway.
const adminReloadEvery = 5 * time.Second

// adminReloadLoop keeps the admin account changes and the team model
// lists of this gateway in step with the store, for gateways sharing one
// (PostgreSQL): every adminReloadEvery it reads the admin generation and
// reloads both when it moved. Principals need no loop: every admin
// request checks the generation (principalCache).
func (g *Gateway) adminReloadLoop(ctx context.Context) {
	t := time.NewTicker(adminReloadEvery)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			gen, err := g.reloadAdmin(ctx, last)
			if err != nil {
				g.log.Warn("admin state not reloaded from the store", "err", err)
				continue
			}
			last = gen
		}
	}
}

// reloadAdmin reloads the admin account changes and team model lists when
// the store's generation is not seen; it returns the generation read.
func (g *Gateway) reloadAdmin(ctx context.Context, seen int64) (int64, error) {
	gen, err := g.admins.AdminGeneration(ctx)
	if err != nil || gen == seen {
		return seen, err
	}
	cs, err := g.admins.AdminAccounts(ctx)
	if err != nil {
		return seen, err
	}
	lists, err := g.admins.TeamModels(ctx)
	if err != nil {
		return seen, err
	}
	g.tree.mu.Lock()
	g.tree.changes = cs
	g.setAccountsLocked(g.tree.base)
	g.tree.mu.Unlock()
	g.modelsMu.Lock()
	g.modelLists.Store(g.newTeamModels(lists))
	g.modelsMu.Unlock()
	if err := g.reloadRouting(ctx); err != nil { // routing.go
		return seen, err
	}
	return gen, nil
}
