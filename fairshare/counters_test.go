package fairshare

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func chainOf(res []int64, level []bool) *Chain {
	c := &Chain{N: len(res), Slots: make([]Slot, len(res)), Res: append([]int64(nil), res...), Level: append([]bool(nil), level...)}
	for i := range res {
		c.Slots[i] = Slot(i + 1)
	}
	return c
}

func TestPlace(t *testing.T) {
	all := []bool{true, true, true}
	for _, tc := range []struct {
		name   string
		res    []int64
		level  []bool
		within []int64
		want   Placement
	}{
		{"unknown organisation", nil, nil, nil, Placement{Borrow: -1}},
		{"leaf within", []int64{4, 2, 1}, all, []int64{4, 2, 0}, Placement{Within: 0b111, Room: 0b100, Top: true, Borrow: -1}},
		{"organisation alone within", []int64{4}, all[:1], []int64{3}, Placement{Within: 0b1, Room: 0b1, Top: true, Borrow: -1}},
		{"organisation alone full", []int64{4}, all[:1], []int64{4}, Placement{Borrow: -1}},
		{"team over, organisation has room: borrows at the team", []int64{4, 2}, all[:2], []int64{3, 2}, Placement{Within: 0b01, Room: 0b01, Top: true, Borrow: 1}},
		{"project over, team has room: borrows at the project", []int64{4, 2, 1}, all, []int64{1, 1, 1}, Placement{Within: 0b011, Room: 0b011, Top: true, Borrow: 2}},
		{"project and team over: borrows at the team", []int64{4, 2, 1}, all, []int64{2, 2, 1}, Placement{Within: 0b001, Room: 0b001, Top: true, Borrow: 1}},
		{"organisation full", []int64{4, 2, 1}, all, []int64{4, 1, 1}, Placement{Borrow: -1}},
		{"no reservation anywhere", []int64{0, 0}, all[:2], []int64{0, 0}, Placement{Borrow: -1}},
		{"team is Fairshare=parent: the project is the level below the organisation", []int64{4, 0, 2}, []bool{true, false, true}, []int64{1, 0, 2},
			Placement{Within: 0b001, Room: 0b001, Top: true, Borrow: 2}},
		{"parent team, project within", []int64{4, 0, 2}, []bool{true, false, true}, []int64{4, 0, 1},
			Placement{Within: 0b101, Room: 0b100, Top: true, Borrow: -1}},
		{"only Fairshare=parent accounts", []int64{0}, []bool{false}, []int64{0}, Placement{Borrow: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chainOf(tc.res, tc.level)
			if got := Place(c, tc.within); got != tc.want {
				t.Errorf("Place = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestMemCounters_Concurrent admits and releases from many goroutines on
// overlapping chains: a relied-on account never counts more within-share
// requests than its reservation, and everything returns to zero.
func TestMemCounters_Concurrent(t *testing.T) {
	m := NewMemCounters(time.Hour)
	org, teamA, teamB := m.Bind("o"), m.Bind("o\x00a"), m.Bind("o\x00b")
	a := &Chain{N: 2, Slots: []Slot{org, teamA}, Res: []int64{6, 3}, Level: []bool{true, true}}
	b := &Chain{N: 2, Slots: []Slot{org, teamB}, Res: []int64{6, 3}, Level: []bool{true, true}}
	orgOnly := &Chain{N: 1, Slots: []Slot{org}, Res: []int64{6}, Level: []bool{true}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	now := time.Unix(0, 0)
	for g := 0; g < 8; g++ {
		c := [...]*Chain{a, b, orgOnly}[g%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				p := m.Admit(c)
				if _, w := m.Counts(teamA); w > 3 {
					mu.Lock()
					bad = append(bad, "team a within over its reservation")
					mu.Unlock()
				}
				// Only a leaf-within admission of a team may take the
				// organisation past its reservation: 6 + 3 + 3 at most.
				if _, w := m.Counts(org); w > 12 {
					mu.Lock()
					bad = append(bad, "organisation within beyond 12")
					mu.Unlock()
				}
				m.Release(c, p, 0.001, now)
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d violations, first: %s", len(bad), bad[0])
	}
	for _, s := range []Slot{org, teamA, teamB} {
		if in, w := m.Counts(s); in != 0 || w != 0 {
			t.Errorf("slot %d: in flight %d, within %d after every release", s, in, w)
		}
	}
	if in, b := m.PoolCounts(); in != 0 || b != 0 {
		t.Errorf("pool: in flight %d, borrowing %d", in, b)
	}
	if u := m.Usage(PoolSlot, now); u < 8*2000*0.001-1e-6 || u > 8*2000*0.001+1e-6 {
		t.Errorf("pool usage %g, want %g", u, 8*2000*0.001)
	}
	if m.Bind("o") != org || m.Bind("") != PoolSlot {
		t.Error("Bind is not stable")
	}
}

// BenchmarkSetTree installs a large Slurm-like tree (50 organisations ×
// 20 teams × 5 projects, 5,050 accounts) into fresh counters: every
// account is bound once.
func BenchmarkSetTree(b *testing.B) {
	root := &Node{}
	for o := range 50 {
		on := &Node{Name: fmt.Sprintf("org%d", o), Shares: 1}
		for t := range 20 {
			tn := &Node{Name: fmt.Sprintf("o%dt%d", o, t), Shares: 1}
			for p := range 5 {
				tn.Children = append(tn.Children, &Node{Name: fmt.Sprintf("o%dt%dp%d", o, t, p), Shares: 1})
			}
			on.Children = append(on.Children, tn)
		}
		root.Children = append(root.Children, on)
	}
	now := time.Unix(0, 0)
	b.ReportAllocs()
	for b.Loop() {
		NewPool(1024, root, time.Hour, now)
	}
}
