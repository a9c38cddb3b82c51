package server

import (
	"context"
	"time"

	"github.com/go-llmflow/llmflow"
)

// receiver applies the other replicas' announcements (redisstate.Bus) to
// the generation serving now.
type receiver struct{ s *server }

func (r receiver) ForgetKey(hash [32]byte) { r.s.cur.Load().ForgetKey(hash) }

func (r receiver) AdminChanged(ctx context.Context) error { return r.s.cur.Load().AdminChanged(ctx) }

func (r receiver) TreeChanged(ctx context.Context) error {
	if imp := r.s.imp.Load(); imp != nil {
		return imp.reload(ctx, r.s.cur.Load())
	}
	return nil
}

func (r receiver) Resync(ctx context.Context) error {
	gw := r.s.cur.Load()
	gw.ForgetAllKeys()
	return gw.AdminChanged(ctx)
}

// revokeBroadcast is the store of a replica with Redis: a change of a key
// that its cached copy must not outlive (a revocation, a deactivation, new
// limits) and every audited admin write are announced on the bus once
// stored, and every replica (this one too) applies it (receiver).
type revokeBroadcast struct {
	Store
	s *server
}

func (r *revokeBroadcast) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if err := r.Store.RevokeKey(ctx, id, at); err != nil {
		return err
	}
	return r.announce(ctx, id)
}

func (r *revokeBroadcast) SetKeyLimits(ctx context.Context, id string, rpm, tpm, maxInFlight int) error {
	if err := r.Store.SetKeyLimits(ctx, id, rpm, tpm, maxInFlight); err != nil {
		return err
	}
	return r.announce(ctx, id)
}

func (r *revokeBroadcast) SetKeyDisabled(ctx context.Context, id string, disabled bool) error {
	if err := r.Store.SetKeyDisabled(ctx, id, disabled); err != nil {
		return err
	}
	return r.announce(ctx, id)
}

// AppendAudit records an admin write (every admin write is audited once
// it is done) and announces it.
func (r *revokeBroadcast) AppendAudit(ctx context.Context, e llmflow.AuditEntry) error {
	err := r.Store.AppendAudit(ctx, e)
	r.s.counters.bus.AdminChanged(ctx)
	return err
}

// announce publishes key id's hash, the change being stored already.
func (r *revokeBroadcast) announce(ctx context.Context, id string) error {
	k, err := r.Store.KeyByID(ctx, id)
	if err != nil {
		return err
	}
	r.s.counters.bus.KeyChanged(ctx, k.Hash)
	return nil
}
