package redisstate

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// callCounter counts the commands a client sends (each a round trip: the
// gateway's client does not pipeline them).
type callCounter struct{ n atomic.Int64 }

func (h *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// cappedTree: organisation a (GrpTRES 1 of the pool's 8 GPUs × C 24: at
// most 3 in flight) with team a1; b with b1.
func cappedTree() *fairshare.Node {
	return &fairshare.Node{Children: []*fairshare.Node{
		{Name: "a", Shares: 3, GPULimit: 1, HasGPULimit: true, Children: []*fairshare.Node{{Name: "a1", Shares: 1}}},
		{Name: "b", Shares: 1, Children: []*fairshare.Node{{Name: "b1", Shares: 1}}},
	}}
}

// rideReplica is one gateway over a shared Redis: a pool over Counters
// and a ledger replica, both on the same client, admitted through
// Admissions.
type rideReplica struct {
	*replica
	pool *fairshare.Pool
	ctr  *Counters
	adm  *Admissions
}

func newRideReplica(t *testing.T, rdb redis.UniversalClient, prefix string, now time.Time, limit, stored float64) *rideReplica {
	r := newReplica(t, rdb, prefix, now, limit, stored)
	c := started(New(rdb, "p", time.Hour, Options{Prefix: prefix}))
	return &rideReplica{replica: r, ctr: c, pool: fairshare.NewPoolGPUs(24, 8, cappedTree(), c, now), adm: NewAdmissions(c, r.l)}
}

// ride is an admission of path with a budget request of key.
func (p *rideReplica) ride(now time.Time, path fairshare.Path, key string, cost float64) *admission.Admission {
	return &admission.Admission{Chain: p.pool.Locate(path).Chain,
		Budget: p.request(now, key, budgets.KeyLimits{MaxInFlight: 100}, cost)}
}

// admit admits a through p's Admissions: the capped account's name, or
// the refusal of a budget or key limit.
func (p *rideReplica) admit(a *admission.Admission, path fairshare.Path) (capped string, err error) {
	err = p.adm.Admit(context.Background(), a)
	if errors.Is(err, admission.ErrCapped) {
		return p.pool.Locate(path).Account(a.Capped), nil
	}
	return "", err
}

func (p *rideReplica) done(a *admission.Admission, gpuHours float64, now time.Time, tokens int64) {
	p.adm.Release(context.Background(), a, admission.End{At: now, GPUHours: gpuHours, Tokens: tokens})
}

// TestRideOneRoundTrip: with a budget, a key limit, a GrpTRES cap and the
// fair-share counters all in Redis, a request's admission is one command
// and its end one more; apart (the ledger, then the counters with their
// cap check) they were at least two each.
func TestRideOneRoundTrip(t *testing.T) {
	base, prefix := testRedis(t)
	var calls callCounter
	rdb := redis.NewClient(&redis.Options{Addr: base.Options().Addr})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(&calls)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	p := newRideReplica(t, rdb, prefix, now, 100, 0)
	path := fairshare.Path{Org: "a", Team: "a1"}
	run := func() (admit, done int64) {
		rd := p.ride(now, path, "k1", 0.01)
		before := calls.n.Load()
		if capped, err := p.admit(rd, path); err != nil || capped != "" {
			t.Fatalf("admission: %v, capped %q", err, capped)
		}
		mid := calls.n.Load()
		p.done(rd, 0.01, now, 10)
		return mid - before, calls.n.Load() - mid
	}
	run() // loads the scripts (EVALSHA, then EVAL once)
	for range 10 {
		if a, d := run(); a != 1 || d != 1 {
			t.Fatalf("round trips: %d at admission, %d at the end; want 1 and 1", a, d)
		}
	}
	if p.ctr.Health().Fallback || p.l.Health().Fallback {
		t.Fatal("fell back")
	}
	if in, _ := p.ctr.PoolCounts(); in != 0 {
		t.Fatalf("%d left in flight", in)
	}
	if h, c := slotHash(t, rdb, prefix, now); h != 0 || c != 11*budgets.Units(0.01) {
		t.Fatalf("budget: held %d, charged %d; want 0 and %d", h, c, 11*budgets.Units(0.01))
	}
	// apart: the same request as two calls plus the cap's count check
	before := calls.n.Load()
	rd := p.ride(now, path, "k1", 0.01)
	if _, err := p.l.Reserve(now, rd.Budget); err != nil {
		t.Fatal(err)
	}
	tk := p.pool.Admit(path, 0)
	if n := calls.n.Load() - before; n < 2 {
		t.Fatalf("apart: %d round trips, want at least 2 (the comparison is wrong)", n)
	}
	p.pool.Done(tk, 0, now)
	p.l.Settle(now, rd.Budget, false, 0, 0)
	// without budgets or key limits: the counters' script alone, caps
	// included, one round trip each side too
	for range 3 {
		a := &admission.Admission{Chain: p.pool.Locate(path).Chain}
		before := calls.n.Load()
		if capped, err := p.admit(a, path); err != nil || capped != "" {
			t.Fatalf("admission without a budget: %v, capped %q", err, capped)
		}
		mid := calls.n.Load()
		p.done(a, 0.01, now, 0)
		if x, y := mid-before, calls.n.Load()-mid; x != 1 || y != 1 {
			t.Fatalf("without a budget: %d round trips at admission, %d at the end; want 1 and 1", x, y)
		}
	}
}

// TestRideAllOrNothing: a request refused by its budget counts nowhere in
// the fair-share counters; one over its organisation's GrpTRES cap holds
// nothing on the budget and no key slot.
func TestRideAllOrNothing(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	p := newRideReplica(t, rdb, prefix, now, 1, 0.98) // 0.02 left: two requests of 0.01
	path := fairshare.Path{Org: "a", Team: "a1"}
	var held []*admission.Admission
	for range 2 {
		rd := p.ride(now, path, "k1", 0.01)
		if capped, err := p.admit(rd, path); err != nil || capped != "" {
			t.Fatalf("admission: %v %q", err, capped)
		}
		held = append(held, rd)
	}
	_, err := p.admit(p.ride(now, path, "k1", 0.01), path)
	var rf *budgets.Refusal
	if !errors.As(err, &rf) || rf.Reason != "budget" {
		t.Fatalf("third request: %v, want a budget refusal", err)
	}
	if in, _ := p.ctr.PoolCounts(); in != 2 {
		t.Fatalf("after a budget refusal the pool counts %d in flight, want 2", in)
	}
	// the cap: 3 in flight for a; the fourth is capped and holds nothing
	rich := newRideReplica(t, rdb, prefix+"rich:", now, 100, 0)
	for range 3 {
		rd := rich.ride(now, path, "k2", 0.01)
		if capped, err := rich.admit(rd, path); err != nil || capped != "" {
			t.Fatalf("admission under the cap: %v %q", err, capped)
		}
	}
	rd := rich.ride(now, path, "k2", 0.01)
	capped, err := rich.admit(rd, path)
	if err != nil || capped != "a" {
		t.Fatalf("fourth request of a: %v, capped %q; want capped at a", err, capped)
	}
	if h, _ := slotHash(t, rdb, prefix+"rich:", now); h != 3*budgets.Units(0.01) {
		t.Fatalf("the capped request left a hold: %d held, want %d", h, 3*budgets.Units(0.01))
	}
	if n := rdb.HGetAll(context.Background(), prefix+"rich:k:k2").Val(); sumFields(n) != 3 {
		t.Fatalf("key in flight %v, want 3", n)
	}
	for _, rd := range held {
		p.done(rd, 0.01, now, 0)
	}
	if h, c := slotHash(t, rdb, prefix, now); h != 0 || c != budgets.Units(0.98)+2*budgets.Units(0.01) {
		t.Fatalf("after the ends: held %d charged %d", h, c)
	}
}

func sumFields(m map[string]string) int64 {
	var n int64
	for _, v := range m {
		n += toInt(v)
	}
	return n
}

// TestRideCapAcrossReplicas: three replicas race 30 admissions of an
// organisation capped at 3 in flight: exactly 3 pass in all.
func TestRideCapAcrossReplicas(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	var reps []*rideReplica
	for range 3 {
		reps = append(reps, newRideReplica(t, rdb, prefix, now, 100, 0))
	}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			p := reps[i%3]
			path := fairshare.Path{Org: "a", Team: "a1"}
			capped, err := p.admit(p.ride(now, path, "", 0.01), path)
			if err != nil {
				t.Error(err)
			}
			if capped == "" {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if n := ok.Load(); n != 3 {
		t.Fatalf("%d admitted across three replicas, want 3 (the cap)", n)
	}
}

// TestRideWhileRedisAway: Redis is away: the admission reserves in
// the replica's own ledger and admits against its own counts, and the end
// gives both back there.
func TestRideWhileRedisAway(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	p := newRideReplica(t, rdb, "away:", now, 1, 0.98)
	path := fairshare.Path{Org: "b", Team: "b1"}
	rd := p.ride(now, path, "k1", 0.01)
	if capped, err := p.admit(rd, path); err != nil || capped != "" || !rd.BudgetLocal {
		t.Fatalf("admission with Redis away: %v %q, budget local %v", err, capped, rd.BudgetLocal)
	}
	if !p.ctr.Health().Fallback || !p.l.Health().Fallback {
		t.Fatalf("not in fallback: counters %+v, ledger %+v", p.ctr.Health(), p.l.Health())
	}
	if in, _ := p.ctr.PoolCounts(); in != 1 {
		t.Fatalf("counted %d here, want 1", in)
	}
	if p.mem.Key("k1").InFlight() != 1 {
		t.Fatal("the key's in-flight slot was not taken here")
	}
	p.done(rd, 0.01, now, 5)
	if in, _ := p.ctr.PoolCounts(); in != 0 || p.mem.Key("k1").InFlight() != 0 {
		t.Fatalf("after the end: %d in flight, key %d", in, p.mem.Key("k1").InFlight())
	}
}
