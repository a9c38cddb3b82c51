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
