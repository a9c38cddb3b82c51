package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/gateway"
)

// Runtime routing's persistence: the routing writes read the stored rows,
// check the change with the gateway's rules (gateway.CheckUpstream,
// gateway.CheckAlias: the ones ApplyRouting serves by), store it, read the
// rows back and apply them (gateway.ApplyRouting), under routingMu.

// errNoRouting answers the routing writes of a gateway whose store keeps
// no runtime routing.
var errNoRouting = llmflow.Errorf(llmflow.EUNAVAILABLE, "this gateway's store keeps no runtime upstreams or aliases: only the configuration routes")

// reloadRouting reads the stored rows and applies them (New; another
// gateway sharing the store changed them).
func (h *Handler) reloadRouting(ctx context.Context) error {
	if h.routing == nil {
		return nil
	}
	h.routingMu.Lock()
	defer h.routingMu.Unlock()
	ups, err := h.routing.Upstreams(ctx)
	if err != nil {
		return fmt.Errorf("read runtime upstreams: %w", err)
	}
	als, err := h.routing.Aliases(ctx)
	if err != nil {
		return fmt.Errorf("read model aliases: %w", err)
	}
	h.gw.ApplyRouting(ups, als)
	return nil
}

// putUpstream validates u against the configuration and the stored rows
// read now, stores it and publishes the new routes. It returns the stored
// row before (nil when new).
func (h *Handler) putUpstream(ctx context.Context, u llmflow.RuntimeUpstream, create bool) (before *llmflow.RuntimeUpstream, err error) {
	if h.routing == nil {
		return nil, errNoRouting
	}
	h.routingMu.Lock()
	defer h.routingMu.Unlock()
	ups, err := h.routing.Upstreams(ctx)
	if err != nil {
		return nil, err
	}
	others := make([]llmflow.RuntimeUpstream, 0, len(ups)+1)
	for i := range ups {
		if ups[i].Model == u.Model && ups[i].Name == u.Name {
			if create {
				return nil, llmflow.Errorf(llmflow.ECONFLICT, "model %s already has an upstream %s (PUT replaces it)", quote(u.Model), quote(u.Name))
			}
			b := ups[i]
			before = &b
			u.CreatedAt = b.CreatedAt
			continue
		}
		others = append(others, ups[i])
	}
	// check u after every other served row, as apply will
	base, err := h.gw.CheckUpstream(u, others)
	if err != nil {
		return nil, err
	}
	u.BaseURL = base
	if err := h.routing.PutUpstream(ctx, u); err != nil {
		return nil, err
	}
	return before, h.reapplyLocked(ctx)
}

// deleteUpstream removes a runtime upstream; a configured one answers 409.
func (h *Handler) deleteUpstream(ctx context.Context, model, name string) (llmflow.RuntimeUpstream, error) {
	if h.routing == nil {
		return llmflow.RuntimeUpstream{}, errNoRouting
	}
	if !h.gw.IsModel(model) {
		return llmflow.RuntimeUpstream{}, llmflow.Errorf(llmflow.ENOTFOUND, "no configured model %s", quote(model))
	}
	if slices.ContainsFunc(h.gw.Backends(model), func(b gateway.Backend) bool { return b.Configured && b.Name == name }) {
		return llmflow.RuntimeUpstream{}, llmflow.Errorf(llmflow.ECONFLICT, "upstream %s of model %s is declared in the configuration, which is authoritative: remove it there", quote(name), quote(model))
	}
	h.routingMu.Lock()
	defer h.routingMu.Unlock()
	ups, err := h.routing.Upstreams(ctx)
	if err != nil {
		return llmflow.RuntimeUpstream{}, err
	}
	i := slices.IndexFunc(ups, func(u llmflow.RuntimeUpstream) bool { return u.Model == model && u.Name == name })
	if i < 0 {
		return llmflow.RuntimeUpstream{}, llmflow.Errorf(llmflow.ENOTFOUND, "model %s has no upstream %s", quote(model), quote(name))
	}
	if err := h.routing.DeleteUpstream(ctx, model, name); err != nil {
		if errors.Is(err, llmflow.ErrNotFound) {
			return llmflow.RuntimeUpstream{}, llmflow.Errorf(llmflow.ENOTFOUND, "model %s has no upstream %s", quote(model), quote(name))
		}
		return llmflow.RuntimeUpstream{}, err
	}
	return ups[i], h.reapplyLocked(ctx)
}

// putAlias creates or switches an alias; it returns the row before.
func (h *Handler) putAlias(ctx context.Context, a llmflow.ModelAlias) (*llmflow.ModelAlias, error) {
	if h.routing == nil {
		return nil, errNoRouting
	}
	if err := h.gw.CheckAlias(a); err != nil {
		return nil, err
	}
	h.routingMu.Lock()
	defer h.routingMu.Unlock()
	als, err := h.routing.Aliases(ctx)
	if err != nil {
		return nil, err
	}
	var before *llmflow.ModelAlias
	if i := slices.IndexFunc(als, func(x llmflow.ModelAlias) bool { return x.Name == a.Name }); i >= 0 {
		before = &als[i]
	}
	if err := h.routing.PutAlias(ctx, a); err != nil {
		return nil, err
	}
	return before, h.reapplyLocked(ctx)
}

func (h *Handler) deleteAlias(ctx context.Context, name string) (llmflow.ModelAlias, error) {
	if h.routing == nil {
		return llmflow.ModelAlias{}, errNoRouting
	}
	if h.gw.IsModel(name) {
		return llmflow.ModelAlias{}, llmflow.Errorf(llmflow.ECONFLICT, "%s is a configured model, not an alias: remove it in the configuration", quote(name))
	}
	h.routingMu.Lock()
	defer h.routingMu.Unlock()
	als, err := h.routing.Aliases(ctx)
	if err != nil {
		return llmflow.ModelAlias{}, err
	}
	i := slices.IndexFunc(als, func(x llmflow.ModelAlias) bool { return x.Name == name })
	if i < 0 {
		return llmflow.ModelAlias{}, llmflow.Errorf(llmflow.ENOTFOUND, "no alias %s", quote(name))
	}
	if err := h.routing.DeleteAlias(ctx, name); err != nil && !errors.Is(err, llmflow.ErrNotFound) {
		return llmflow.ModelAlias{}, err
	}
	return als[i], h.reapplyLocked(ctx)
}

// reapplyLocked reads the rows back and applies them (routingMu held).
// The write is stored by then: a failed read leaves this gateway on its
// old routes until the next reload, and says so.
func (h *Handler) reapplyLocked(ctx context.Context) error {
	ups, err := h.routing.Upstreams(ctx)
	if err == nil {
		var als []llmflow.ModelAlias
		if als, err = h.routing.Aliases(ctx); err == nil {
			h.gw.ApplyRouting(ups, als)
			return nil
		}
	}
	return &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "stored, but not applied yet: the store could not be read back (the next reload applies it)", Err: err}
}
