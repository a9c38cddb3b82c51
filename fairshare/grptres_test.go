package fairshare

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestInFlightCap(t *testing.T) {
	for _, c := range []struct {
		has            bool
		gpus           int64
		poolGPUs, capa int
		want           int64
	}{
		{false, 4, 8, 16, -1}, // no limit
		{true, 4, 0, 16, -1},  // pool GPUs unknown
		{true, 2, 8, 16, 4},   // 2/8 of 16
		{true, 3, 8, 10, 3},   // floor(3.75)
		{true, 1, 64, 8, 1},   // at least 1 when allowed a GPU
		{true, 0, 8, 16, 0},   // GrpTRES=gres/gpu=0: nothing
		{true, 99, 8, 16, 16}, // at most C
	} {
		if got := inFlightCap(c.has, c.gpus, c.poolGPUs, c.capa); got != c.want {
			t.Errorf("inFlightCap(%v, %d, %d, %d) = %d, want %d", c.has, c.gpus, c.poolGPUs, c.capa, got, c.want)
		}
	}
}

// TestGrpTRESCap: an account with a GPU limit has at most its cap of
// requests in flight (its subtree's, users and projects included); the
// one over is refused having taken nothing, and a place given back is
// taken again. Its siblings are not capped.
func TestGrpTRESCap(t *testing.T) {
	root := &Node{Children: []*Node{
		{Name: "A", Shares: 1, GPULimit: 2, HasGPULimit: true, Children: []*Node{ // 2 of 8 GPUs × C 16 = 4
			{Name: "ta", Shares: 1, Children: []*Node{{Name: "pa", Shares: 1}, {Name: "alice", User: true, Shares: 1}}},
		}},
		{Name: "B", Shares: 1, Children: []*Node{{Name: "tb", Shares: 1}}},
	}}
	p := NewPoolGPUs(16, 8, root, NewMemCounters(0), t0)
	paths := []Path{{Org: "A", Team: "ta"}, {Org: "A", Team: "ta", Project: "pa"}, {Org: "A", Team: "ta", User: "alice"}, {Org: "A", Team: "ta"}}
	var held []Ticket
	for _, path := range paths {
		tk := p.Admit(path, 0)
		if tk.Capped != "" {
			t.Fatalf("%+v refused under the cap: %q", path, tk.Capped)
		}
		held = append(held, tk)
	}
	slot := p.st.Load().tree.accts["A"].slot
	if in, _ := p.ctr.Counts(slot); in != 4 {
		t.Fatalf("A in flight %d, want 4", in)
	}
	over := p.Admit(Path{Org: "A", Team: "ta", Project: "pa"}, 0)
	if over.Capped != "A" {
		t.Fatalf("5th request of A: capped %q, want A", over.Capped)
	}
	p.Done(over, 1, t0) // a no-op: nothing was taken
	if in, _ := p.ctr.Counts(slot); in != 4 {
		t.Fatalf("after a refusal A has %d in flight, want 4", in)
	}
	if pin, _ := p.ctr.PoolCounts(); pin != 4 {
		t.Fatalf("pool in flight %d, want 4", pin)
	}
	for range 8 { // B has no limit
		if tk := p.Admit(Path{Org: "B", Team: "tb"}, 0); tk.Capped != "" {
			t.Fatalf("B capped: %q", tk.Capped)
		}
	}
	p.Done(held[0], 0.5, t0)
	if tk := p.Admit(Path{Org: "A", Team: "ta"}, 0); tk.Capped != "" {
		t.Fatalf("after a Done A is still capped")
	}

	// without the pool's GPUs the limit cannot be computed: no cap
	q := NewPoolGPUs(16, 0, root, NewMemCounters(0), t0)
	for range 10 {
		if tk := q.Admit(Path{Org: "A", Team: "ta"}, 0); tk.Capped != "" {
			t.Fatal("capped in a pool of unknown GPUs")
		}
	}
}

// TestGrpTRESCapConcurrent: racing admissions never hold more than the
// cap at once, and leave nothing in flight once done.
func TestGrpTRESCapConcurrent(t *testing.T) {
	root := &Node{Children: []*Node{{Name: "A", Shares: 1, GPULimit: 1, HasGPULimit: true, Children: []*Node{{Name: "ta", Shares: 1}}}}}
	p := NewPoolGPUs(12, 4, root, NewMemCounters(0), t0) // cap 3
	slot := p.st.Load().tree.accts["A"].slot
	var wg sync.WaitGroup
	var held, maxHeld, admitted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 500 {
				tk := p.Admit(Path{Org: "A", Team: "ta"}, 0)
				if tk.Capped == "" {
					admitted.Add(1)
					n := held.Add(1)
					for m := maxHeld.Load(); n > m && !maxHeld.CompareAndSwap(m, n); m = maxHeld.Load() {
					}
					runtime.Gosched()
					held.Add(-1)
				}
				p.Done(tk, 0, t0)
			}
		})
	}
	wg.Wait()
	if m := maxHeld.Load(); m > 3 {
		t.Errorf("A had %d requests admitted at once, cap 3", m)
	}
	if admitted.Load() == 0 {
		t.Error("nothing admitted")
	}
	if in, _ := p.ctr.Counts(slot); in != 0 {
		t.Errorf("%d left in flight", in)
	}
}
