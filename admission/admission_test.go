package admission_test

import (
	"errors"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps admission pure: no network, database or process.
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/admission", deptest.Impure)
}

var (
	now      = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	orgScope = budgets.Scope{Kind: budgets.KindOrg, Name: "a"}
)

// memEnv is one pool over MemSource: organisation a (GrpTRES: 3 in flight
// of C 24 on 8 GPUs) with team a1, b with b1; a budget of limit GPU-hours
// on a.
type memEnv struct {
	pool   *fairshare.Pool
	shared admission.Shared
	ctr    fairshare.Counters
	led    *budgets.Mem
	tab    *budgets.Table
}

func newMemEnv(t *testing.T, limit float64) *memEnv {
	t.Helper()
	led := budgets.NewMem(time.Hour)
	tab := led.Apply([]budgets.Budget{{Scope: orgScope, Period: budgets.Day, MaxCost: limit}}, nil, now)
	led.Refresh(orgScope, budgets.Day.Start(now), budgets.StoredSpend{}, now)
	p := admission.NewMemSource().Pool("p", time.Hour, led)
	if p.Share != nil {
		t.Fatal("an in-memory pool has a share of its capacity")
	}
	root := &fairshare.Node{Children: []*fairshare.Node{
		{Name: "a", Shares: 3, GPULimit: 1, HasGPULimit: true, Children: []*fairshare.Node{{Name: "a1", Shares: 1}}},
		{Name: "b", Shares: 1, Children: []*fairshare.Node{{Name: "b1", Shares: 1}}},
	}}
	return &memEnv{pool: fairshare.NewPoolGPUs(24, 8, root, p.Counters, now), shared: p.Shared, ctr: p.Counters, led: led, tab: tab}
}

var pathA = fairshare.Path{Org: "a", Team: "a1"}

// request is an admission of pathA costing cost, under the key's
// max_inflight of 100.
func (e *memEnv) request(key string, cost float64) *admission.Admission {
	r := &budgets.Request{Limits: budgets.KeyLimits{MaxInFlight: 100}, Start: now, PromptCost: cost, Key: e.led.Key(key)}
	r.Slots = e.tab.Chain("a", "a1", "", key, "", nil).Select("m", nil)
	return &admission.Admission{Chain: e.pool.Locate(pathA).Chain, Budget: r}
}

func (e *memEnv) inFlight() int64 {
	in, _ := e.ctr.PoolCounts()
	return in
}

// TestMemAllOrNothing: a request refused by its budget is counted nowhere
// in the fair-share counters; one over its organisation's cap holds
// nothing on the budget and no key slot; the releases give everything
// back and charge the cost to both sides.
func TestMemAllOrNothing(t *testing.T) {
	e := newMemEnv(t, 0.025) // two requests of 0.01
	ctx := t.Context()
	var held []*admission.Admission
	for range 2 {
		a := e.request("k", 0.01)
		if err := e.shared.Admit(ctx, a); err != nil || a.Capped != -1 {
			t.Fatalf("admission: %v, capped %d", err, a.Capped)
		}
		held = append(held, a)
	}
	err := e.shared.Admit(ctx, e.request("k", 0.01))
	var rf *budgets.Refusal
	if !errors.As(err, &rf) || rf.Reason != "budget" {
		t.Fatalf("third request: %v, want a budget refusal", err)
	}
	if n := e.inFlight(); n != 2 {
		t.Fatalf("after a budget refusal the pool counts %d in flight, want 2", n)
	}
	// the cap: a holds 2; one more passes, the next is capped and holds
	// nothing (a budget that pays for all)
	e2 := newMemEnv(t, 100)
	for range 3 {
		if err := e2.shared.Admit(ctx, e2.request("k", 0.01)); err != nil {
			t.Fatal(err)
		}
	}
	a := e2.request("k", 0.01)
	if err := e2.shared.Admit(ctx, a); !errors.Is(err, admission.ErrCapped) || e2.pool.Locate(pathA).Account(a.Capped) != "a" {
		t.Fatalf("fourth request of a: %v, capped %d; want capped at a", err, a.Capped)
	}
	if h := e2.tab.Status()[0].Held; h > 3*0.01+1e-9 {
		t.Fatalf("the capped request left a hold: %v held", h)
	}
	if n := e2.led.Key("k").InFlight(); n != 3 {
		t.Fatalf("key in flight %d, want 3", n)
	}
	if n := e2.inFlight(); n != 3 {
		t.Fatalf("pool in flight %d, want 3", n)
	}
	// nor a count in its key's rate window: with an RPM of 4, three in
	// flight, one capped, one released, the next one is the fourth
	e3 := newMemEnv(t, 100)
	rpm := func() *admission.Admission {
		a := e3.request("r", 0.01)
		a.Budget.Limits.RPM = 4
		return a
	}
	var in []*admission.Admission
	for range 3 {
		a := rpm()
		if err := e3.shared.Admit(ctx, a); err != nil {
			t.Fatal(err)
		}
		in = append(in, a)
	}
	if err := e3.shared.Admit(ctx, rpm()); !errors.Is(err, admission.ErrCapped) {
		t.Fatalf("over the cap: %v", err)
	}
	e3.shared.Release(ctx, in[0], admission.End{At: now})
	if err := e3.shared.Admit(ctx, rpm()); err != nil {
		t.Fatalf("the fourth request of the minute (the capped one counts nowhere): %v", err)
	}
	// releases
	for _, a := range held {
		e.shared.Release(ctx, a, admission.End{At: now, GPUHours: 0.01, Tokens: 10})
	}
	st := e.tab.Status()[0]
	if e.inFlight() != 0 || e.led.Key("k").InFlight() != 0 || st.Held != 0 || st.Spent < 0.02-1e-9 {
		t.Fatalf("after the releases: %d in flight, key %d, budget %+v", e.inFlight(), e.led.Key("k").InFlight(), st)
	}
	if u := e.ctr.Usage(fairshare.PoolSlot, now); u < 0.02-1e-9 {
		t.Fatalf("fair-share usage %v, want 0.02", u)
	}
}

// TestMemNoBudget: an admission without a budget request only counts the
// fair share, and its priority comes from the seat's rule.
func TestMemNoBudget(t *testing.T) {
	e := newMemEnv(t, 1)
	seat := e.pool.Locate(fairshare.Path{Org: "b", Team: "b1"})
	a := &admission.Admission{Chain: seat.Chain}
	if err := e.shared.Admit(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if p := seat.Priority(a.Placement, 1); p != 1 {
		t.Fatalf("priority %d, want 1 (batch, within its reservation)", p)
	}
	e.shared.Release(t.Context(), a, admission.End{At: now})
	if n := e.inFlight(); n != 0 {
		t.Fatalf("%d in flight", n)
	}
}

// TestMemAllocs: Mem's admission and release allocate nothing.
func TestMemAllocs(t *testing.T) {
	e := newMemEnv(t, 1e6)
	a := e.request("k", 1e-9)
	r := *a.Budget
	n := testing.AllocsPerRun(1000, func() {
		*a.Budget = r
		if err := e.shared.Admit(t.Context(), a); err != nil {
			t.Fatal(err)
		}
		e.shared.Release(t.Context(), a, admission.End{At: now, GPUHours: 1e-9, Tokens: 1})
	})
	if n != 0 {
		t.Fatalf("%v allocations per admission and release", n)
	}
}

// TestMemSourceKeepsCounters: the same pool name gives the same counters
// (a reload keeps what is in flight and the usage).
func TestMemSourceKeepsCounters(t *testing.T) {
	src := admission.NewMemSource()
	a := src.Pool("p", time.Hour, budgets.NewMem(time.Hour))
	b := src.Pool("p", time.Hour, budgets.NewMem(time.Hour))
	if a.Counters != b.Counters || src.Pool("q", time.Hour, nil).Counters == a.Counters {
		t.Fatal("counters not kept by pool name")
	}
	if src.Health() != nil {
		t.Fatal("an in-memory source reports shared health")
	}
}
