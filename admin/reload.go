package admin

import (
	"context"
	"fmt"
	"time"
)

// adminReloadEvery is how often a gateway checks the store's admin
// generation for changes made through another gateway.
const adminReloadEvery = 5 * time.Second

// Run keeps the control plane's state of this gateway (the admin account
// changes, the team model lists, the runtime upstreams and aliases) in
// step with the store, for gateways sharing one (PostgreSQL): every
// adminReloadEvery it reads the admin generation and reloads when it
// moved, until ctx ends. Without an admin store it returns at once.
// Principals need no loop: every admin request checks the generation
// (principalCache).
func (h *Handler) Run(ctx context.Context) {
	if h.store == nil {
		return
	}
	t := time.NewTicker(adminReloadEvery)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			gen, err := h.reloadAdmin(ctx, last)
			if err != nil {
				h.log.Warn("admin state not reloaded from the store", "err", err)
				continue
			}
			last = gen
		}
	}
}

// AdminChanged reloads the control plane's state now, after another
// replica announced an admin write (Notifier), rather than at the next
// Run tick (5 s).
func (h *Handler) AdminChanged(ctx context.Context) error {
	if h.store == nil {
		return h.reloadRouting(ctx)
	}
	_, err := h.reloadAdmin(ctx, -1) // generations start at 0: -1 is never current
	return err
}

// reloadAdmin reloads the admin account changes, the team model lists and
// the runtime routing when the store's generation is not seen; it returns
// the generation read.
func (h *Handler) reloadAdmin(ctx context.Context, seen int64) (int64, error) {
	gen, err := h.store.AdminGeneration(ctx)
	if err != nil {
		return seen, err
	}
	h.sawGeneration(gen) // a cached principal of an older one is not served stale
	if gen == seen {
		return seen, nil
	}
	if err := h.load(ctx); err != nil {
		return seen, err
	}
	return gen, nil
}

// load reads the control plane's state from the store and puts it in
// force (New, reloads).
func (h *Handler) load(ctx context.Context) error {
	if h.store != nil {
		h.treeMu.Lock()
		cs, err := h.store.AdminAccounts(ctx)
		if err != nil {
			h.treeMu.Unlock()
			return fmt.Errorf("read admin account changes: %w", err)
		}
		h.gw.SetAccountChanges(cs)
		h.treeMu.Unlock()
		h.modelsMu.Lock()
		lists, err := h.store.TeamModels(ctx)
		if err != nil {
			h.modelsMu.Unlock()
			return fmt.Errorf("read team model lists: %w", err)
		}
		h.gw.SetTeamModels(lists)
		h.modelsMu.Unlock()
	}
	return h.reloadRouting(ctx)
}
