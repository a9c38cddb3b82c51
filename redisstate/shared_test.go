package redisstate

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// TestSharedSource: Shared is an admission.Source over Redis: a pool's
// counters are kept by name across gateways (a reload), each gateway's
// Mem becomes the ledger's fallback, a pool's Admissions take the budget
// and the fair share in Redis, Health and the metrics
// report the shared state, and Close gives the lease up.
func TestSharedSource(t *testing.T) {
	base, prefix := testRedis(t)
	s := NewShared(base, SharedOptions{Prefix: prefix, Replica: "r1"})
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	rep := newReplica(t, base, prefix+"ledger:", now, 1, 0)
	p := s.Pool("p", time.Hour, rep.mem)
	if q := s.Pool("p", time.Hour, budgets.NewMem(time.Hour)); q.Counters != p.Counters {
		t.Fatal("the pool's counters were not kept")
	}
	s.Pool("p", time.Hour, rep.mem) // the serving gateway's Mem again
	if p.Share == nil || s.ledger.local.Load() != rep.mem {
		t.Fatal("no capacity share, or the gateway's Mem is not the ledger's")
	}
	c := s.pools["p"]
	c.Beat()
	pool := fairshare.NewPoolWith(24, &fairshare.Node{Children: []*fairshare.Node{{Name: "o", Shares: 1}}}, p.Counters, now)
	r := rep.request(now, "k", budgets.KeyLimits{MaxInFlight: 10}, 0.01)
	a := &admission.Admission{Chain: pool.Locate(fairshare.Path{Org: "o"}).Chain, Budget: r}
	for range 2 {
		if err := p.Shared.Admit(context.Background(), a); err != nil || a.BudgetLocal {
			t.Fatalf("admission: %v, local %v", err, a.BudgetLocal)
		}
		p.Shared.Release(context.Background(), a, admission.End{At: now, GPUHours: 0.01, Tokens: 1})
	}
	if h, ch := slotHash(t, base, prefix+"ledger:", now); h != 0 || ch != 2*budgets.Units(0.01) {
		t.Fatalf("budget in redis: held %d, charged %d", h, ch)
	}
	if h := s.Health(); h == nil || h.Status != "ok" || h.Replicas != 1 || h.LedgerFallback {
		t.Fatalf("health %+v", h)
	}
	reg := prometheus.NewRegistry()
	s.Register(reg)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 3 {
		t.Fatalf("metrics: %d families, %v", len(mfs), err)
	}
	if !s.HoldsUsage(context.Background(), time.Hour, "p") {
		t.Fatal("redis holds the pool's usage after a charge")
	}
	s.Close()
	if n, _ := base.ZCard(context.Background(), c.live).Result(); n != 0 {
		_, f, err := c.LastError()
		t.Fatalf("%d leases left after Close: %v (%d failures, %v)", n, base.ZRangeWithScores(context.Background(), c.live, 0, -1).Val(), f, err)
	}
}
