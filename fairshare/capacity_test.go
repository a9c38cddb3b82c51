package fairshare

import "testing"

// SetCapacity apportions the reservations again over the same tree and
// keeps what was admitted: a ticket from before is released after.
func TestSetCapacity(t *testing.T) {
	p := NewPool(16, threeLevel(), 0, t0)
	chem := Path{"B", "chem", "", ""}
	tk := p.Admit(chem, 0)
	for _, tc := range []struct {
		c    int
		want map[string]int64
	}{
		{32, map[string]int64{"A": 26, "A/nlp": 16, "A/nlp/asr": 8, "A/vision": 10, "B": 6, "B/chem": 6, "C": 0}},
		{8, map[string]int64{"A": 7, "A/nlp": 4, "A/nlp/asr": 2, "A/vision": 3, "B": 1, "B/chem": 1, "C": 0}},
		{16, map[string]int64{"A": 13, "A/nlp": 8, "A/nlp/asr": 4, "A/vision": 5, "B": 3, "B/chem": 3, "C": 0}},
	} {
		p.SetCapacity(tc.c, t0)
		if p.Capacity() != tc.c {
			t.Fatalf("Capacity() = %d, want %d", p.Capacity(), tc.c)
		}
		got := reservations(p)
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("C = %d: reservation %s = %d, want %d", tc.c, k, got[k], v)
			}
		}
		if s := p.Snapshot(t0); s.Capacity != tc.c || s.InFlight != 1 || s.Reserved != tc.want["A"]+tc.want["B"] {
			t.Errorf("C = %d: snapshot capacity %d in flight %d reserved %d", tc.c, s.Capacity, s.InFlight, s.Reserved)
		}
	}
	p.Done(tk, 0.5, t0)
	if s := p.Snapshot(t0); s.InFlight != 0 || s.RawUsage != 0.5 {
		t.Fatalf("after Done: in flight %d usage %v, want 0 and 0.5", s.InFlight, s.RawUsage)
	}
}

// The GPU caps follow C: 2 of 8 GPUs is 4 requests at C 16, 8 at C 32.
func TestSetCapacityCaps(t *testing.T) {
	root := &Node{Children: []*Node{
		{Name: "A", Shares: 1, GPULimit: 2, HasGPULimit: true, Children: []*Node{{Name: "ta", Shares: 1}}},
	}}
	p := NewPoolGPUs(16, 8, root, NewMemCounters(0), t0)
	admitted := func() int {
		n := 0
		for range 20 {
			if tk := p.Admit(Path{Org: "A", Team: "ta"}, 0); tk.Capped == "" {
				n++
			}
		}
		return n
	}
	if n := admitted(); n != 4 {
		t.Fatalf("C 16: %d admitted, want 4", n)
	}
	p.SetCapacity(32, t0)
	if n := admitted(); n != 4 { // 4 more: 8 in flight
		t.Fatalf("C 32: %d more admitted, want 4", n)
	}
}
