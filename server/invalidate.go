package server

import (
	"context"

	"github.com/go-llmflow/llmflow/redisstate"
)

// receiver applies the other replicas' announcements (redisstate.Bus) to
// the generation serving now.
type receiver struct{ s *server }

func (r receiver) ForgetKey(hash [32]byte) { r.s.cur.Load().gw.ForgetKey(hash) }

func (r receiver) AdminChanged(ctx context.Context) error {
	return r.s.cur.Load().adm.AdminChanged(ctx)
}

func (r receiver) TreeChanged(ctx context.Context) error {
	if imp := r.s.imp.Load(); imp != nil {
		return imp.reload(ctx, r.s.cur.Load().gw)
	}
	return nil
}

func (r receiver) Resync(ctx context.Context) error {
	g := r.s.cur.Load()
	g.gw.ForgetAllKeys()
	return g.adm.AdminChanged(ctx)
}

// busNotifier is the admin API's Notifier on a replica with Redis: each
// change is announced on the bus once stored, and every replica (this one
// too) applies it (receiver). An admin change of the account tree is an
// admin change for the bus (the receivers reload their admin state);
// the bus's own TreeChanged is a Slurm import's.
type busNotifier struct{ bus *redisstate.Bus }

func (n busNotifier) KeyChanged(ctx context.Context, hash [32]byte) { n.bus.KeyChanged(ctx, hash) }

func (n busNotifier) AdminChanged(ctx context.Context) { n.bus.AdminChanged(ctx) }

func (n busNotifier) TreeChanged(ctx context.Context) { n.bus.AdminChanged(ctx) }
