package fairshare

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// TestDeps keeps fairshare pure: no network, database or process.
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/fairshare", deptest.Impure)
}

func TestApportionExamples(t *testing.T) {
	for _, c := range []struct {
		total  int
		shares []float64
		want   []int
	}{
		{256, []float64{0.8125, 0.1875}, []int{208, 48}},
		{10, []float64{0.8125, 0.1875}, []int{8, 2}},
		{16, []float64{0.8125, 0.1875}, []int{13, 3}},
		{13, []float64{0.6, 0.4}, []int{8, 5}},
		{10, []float64{0.5, 0.3}, []int{5, 3}},                    // sum < 1: 2 unreserved
		{10, []float64{0.25, 0.25}, []int{3, 2}},                  // floor(5)=5: tie, lower index first
		{3, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, []int{1, 1, 1}}, // float rounding does not lose a seat
		{10, []float64{13, 3}, []int{8, 2}},                       // sum > 1: normalised
		{10, []float64{0, 1}, []int{0, 10}},
		{0, []float64{1}, []int{0}},
		{5, []float64{math.NaN(), -1, math.Inf(1)}, []int{0, 0, 0}},
	} {
		got := Apportion(c.total, c.shares)
		if !equalInts(got, c.want) {
			t.Errorf("Apportion(%d, %v) = %v, want %v", c.total, c.shares, got, c.want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// naiveApportion hands seats one at a time: first every whole quota, then one
// seat per round to the largest remainder not yet served.
func naiveApportion(total int, shares []float64) []int {
	out := make([]int, len(shares))
	if total <= 0 {
		return out
	}
	s := normalise(shares)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	target := int(math.Floor(sum*float64(total) + apportionEps*float64(len(s)+1)))
	target = min(target, total)
	rem := make([]float64, len(s))
	for i, v := range s {
		q := v * float64(total)
		for float64(out[i]+1) <= q+apportionEps {
			out[i]++
		}
		rem[i] = q - float64(out[i])
	}
	given := 0
	for _, v := range out {
		given += v
	}
	served := make([]bool, len(s))
	for ; given < target; given++ {
		best := -1
		for i := range s {
			if !served[i] && s[i] > 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		served[best] = true
		out[best]++
	}
	return out
}

func FuzzApportion(f *testing.F) {
	f.Add(256, 0.8125, 0.1875, 0.0)
	f.Add(10, 13.0, 3.0, 0.0)
	f.Add(7, 0.2, 0.3, 0.4)
	f.Fuzz(func(t *testing.T, total int, a, b, c float64) {
		if total < 0 || total > 1<<20 {
			return
		}
		shares := []float64{a, b, c}
		got := Apportion(total, shares)
		sum := 0
		for _, v := range got {
			if v < 0 {
				t.Fatalf("negative seat count %v", got)
			}
			sum += v
		}
		if sum > total {
			t.Fatalf("Apportion(%d, %v) = %v sums to %d > total", total, shares, got, sum)
		}
		if want := naiveApportion(total, shares); !equalInts(got, want) {
			t.Fatalf("Apportion(%d, %v) = %v, naive %v", total, shares, got, want)
		}
		// Quota rule: each within one seat of its exact quota.
		n := normalise(shares)
		for i, v := range got {
			q := n[i] * float64(total)
			if float64(v) < math.Floor(q+apportionEps)-0 || float64(v) > math.Floor(q+apportionEps)+1 {
				t.Fatalf("seat %d = %d, quota %v", i, v, q)
			}
		}
	})
}

func TestApportionProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 20000 {
		k := 1 + rng.IntN(6)
		shares := make([]float64, k)
		for i := range shares {
			switch rng.IntN(3) {
			case 0:
				shares[i] = float64(rng.IntN(100))
			case 1:
				shares[i] = rng.Float64() / float64(k)
			default:
				shares[i] = float64(rng.IntN(16)) / 16 / float64(k)
			}
		}
		total := rng.IntN(300)
		got, want := Apportion(total, shares), naiveApportion(total, shares)
		if !equalInts(got, want) {
			t.Fatalf("Apportion(%d, %v) = %v, naive %v", total, shares, got, want)
		}
	}
}

func TestDecayFactor(t *testing.T) {
	hl := 168 * time.Hour
	if got := DecayFactor(hl, hl); math.Abs(got-0.5) > 1e-15 {
		t.Errorf("one half-life: %v", got)
	}
	if got := DecayFactor(3*hl, hl); math.Abs(got-0.125) > 1e-15 {
		t.Errorf("three half-lives: %v", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		a := time.Duration(rng.Int64N(int64(1000 * time.Hour)))
		b := time.Duration(rng.Int64N(int64(1000 * time.Hour)))
		f := DecayFactor(a, hl)
		if f < 0 || f > 1 {
			t.Fatalf("factor %v out of [0,1]", f)
		}
		if d := DecayFactor(a+b, hl) - f*DecayFactor(b, hl); math.Abs(d) > 1e-12 {
			t.Fatalf("d(a+b) != d(a)d(b): %v", d)
		}
		// Decay of a sum = sum of decays, through the pool's cells.
		x, y := rng.Float64()*100, rng.Float64()*100
		var c1, c2, c3 cell
		c1.charge(x, t0, hl)
		c1.charge(y, t0, hl)
		c2.charge(x, t0, hl)
		c3.charge(y, t0, hl)
		now := t0.Add(a)
		if d := c1.read(now, hl) - (c2.read(now, hl) + c3.read(now, hl)); math.Abs(d) > 1e-9 {
			t.Fatalf("decay of a sum: %v", d)
		}
	}
	if DecayFactor(-time.Hour, hl) != 1 || DecayFactor(time.Hour, 0) != 1 {
		t.Error("no decay for dt ≤ 0 or half-life ≤ 0")
	}
}

func threeLevel() *Node {
	return &Node{Children: []*Node{
		{Name: "A", Shares: 0.8125, Children: []*Node{
			{Name: "nlp", Shares: 0.6, Children: []*Node{{Name: "asr", Shares: 0.5}, {Name: "llm", Shares: 0.5}}},
			{Name: "vision", Shares: 0.4},
		}},
		{Name: "B", Shares: 0.1875, Children: []*Node{{Name: "chem", Shares: 1}}},
		{Name: "C", Shares: 0, Children: []*Node{{Name: "guest", Shares: 1}}},
	}}
}

func reservations(p *Pool) map[string]int64 {
	m := map[string]int64{}
	for _, r := range p.Snapshot(t0).Rows {
		m[strings.Join(r.Path, "/")] = r.Reserved
	}
	return m
}

func TestReservations(t *testing.T) {
	p := NewPool(16, threeLevel(), 0, t0)
	want := map[string]int64{"A": 13, "A/nlp": 8, "A/nlp/asr": 4, "A/nlp/llm": 4, "A/vision": 5, "B": 3, "B/chem": 3, "C": 0, "C/guest": 0}
	got := reservations(p)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("reservation %s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	// Slurm integers are normalised; Fairshare=parent lifts the children.
	slurm := &Node{Children: []*Node{
		{Name: "etaba", Shares: 13, Children: []*Node{
			{Name: "lab-nlp", Shares: 60, Children: []*Node{{Name: "nlp-asr", UseParent: true}, {Name: "nlp-llm", Shares: 70}}},
			{Name: "lab-vision", Shares: 40},
		}},
		{Name: "etabb", Shares: 3, Children: []*Node{{Name: "lab-chem", Shares: 100}}},
	}}
	got = reservations(NewPool(256, slurm, 0, t0))
	for k, v := range map[string]int64{"etaba": 208, "etabb": 48, "etaba/lab-nlp": 125, "etaba/lab-vision": 83, "etaba/lab-nlp/nlp-llm": 125, "etaba/lab-nlp/nlp-asr": 0} {
		if got[k] != v {
			t.Errorf("slurm reservation %s = %d, want %d", k, got[k], v)
		}
	}
}

// TestPriorities walks the priority table: within, sibling band, borrowing.
func TestPriorities(t *testing.T) {
	p := NewPool(16, threeLevel(), 0, t0) // A 13 (nlp 8 = asr 4 + llm 4, vision 5), B 3, C 0
	asr := Path{"A", "nlp", "asr", ""}
	llm := Path{"A", "nlp", "llm", ""}
	vision := Path{"A", "vision", "", ""}
	chem := Path{"B", "chem", "", ""}
	var tickets []Ticket
	admit := func(path Path, class, want int) Ticket {
		t.Helper()
		if peek := p.Peek(path, class); peek != want {
			t.Errorf("Peek(%v, %d) = %d, want %d", path, class, peek, want)
		}
		tk := p.Admit(path, class)
		if tk.Priority != want {
			t.Errorf("Admit(%v, %d) = %d, want %d", path, class, tk.Priority, want)
		}
		tickets = append(tickets, tk)
		return tk
	}
	for i := range 4 {
		admit(asr, i%2, i%2) // asr within: 0/1
	}
	// asr over its 4, nlp (4/8) and A within: borrowing from sibling llm.
	// Fresh usage: every LF is +Inf, all tied: band rank 0 → 2 + class.
	admit(asr, 0, 2)
	admit(asr, 1, 3)
	// Two more fill nlp to 8 (4 within + 2 band... + 2 band).
	admit(asr, 0, 2)
	admit(asr, 0, 2)
	// nlp is full (8): now asr overflows at the team level: still a band.
	admit(asr, 0, 2)
	// llm returns while nlp is at 8 (full of asr's borrowers): llm is under
	// its own reservation, so it is within (0), and nlp counts it past its
	// reservation: asr's borrowers become the victims.
	admit(llm, 0, 0)
	snap := p.Snapshot(t0)
	for _, r := range snap.Rows {
		switch strings.Join(r.Path, "/") {
		case "A/nlp":
			if r.WithinShare != 9 || r.InFlight != 10 || r.Borrowing != 1 {
				t.Errorf("nlp within %d inflight %d borrowing %d, want 9 10 1", r.WithinShare, r.InFlight, r.Borrowing)
			}
		case "A":
			if r.WithinShare != 10 {
				t.Errorf("A within %d, want 10", r.WithinShare)
			}
		}
	}
	// Fill A to 13 with vision (within its 5 → counts for A too).
	admit(vision, 0, 0)
	admit(vision, 0, 0)
	admit(vision, 0, 0)
	// A at 13: a vision request within its team still gets 0 (leaf rule).
	admit(vision, 1, 1)
	// asr over, A over (14 ≥ 13): borrowing from another organisation, rank 0 (all +Inf).
	admit(asr, 0, 10)
	admit(asr, 1, 11)
	// B within its 3, then borrowing; C has no share: always borrows.
	admit(chem, 0, 0)
	admit(chem, 0, 0)
	admit(chem, 0, 0)
	admit(chem, 0, 10)
	// C has no share: LF 0, last in Fair Tree order (5 leaves: position 4).
	admit(Path{"C", "guest", "", ""}, 1, 51)
	admit(Path{"nobody", "x", "", ""}, 0, PriorityUnknown)
	// Usage makes ranks: A heavily used, B a little, C never → C rank 0, B 1, A 2.
	for _, tk := range tickets {
		p.Done(tk, 0, t0)
	}
	tickets = nil
	p.Done(p.Admit(asr, 0), 100, t0)
	p.Done(p.Admit(chem, 0), 1, t0)
	p.Refresh(t0)
	// Over-reservation ranks: fill B then borrow.
	for range 3 {
		admit(chem, 0, 0)
	}
	// Fair Tree order: B (LF 18.9) chem; A (0.82): vision (+Inf), nlp (0.6):
	// llm (+Inf), asr; C (S = 0): guest. So chem ranks 0, asr 3, guest 4.
	admit(chem, 0, 10)
	admit(Path{"C", "guest", "", ""}, 0, 50)
	for range 13 {
		tickets = append(tickets, p.Admit(vision, 0)) // 5 within, 8 band: A full
	}
	for range 4 {
		admit(asr, 0, 0) // within asr's own 4 and nlp's 8: the leaf rule
	}
	snap = p.Snapshot(t0)
	var asrRank int
	for _, r := range snap.Rows {
		if strings.Join(r.Path, "/") == "A/nlp/asr" {
			asrRank = r.Rank
		}
	}
	if asrRank != 3 {
		t.Errorf("asr rank %d, want 3", asrRank)
	}
	admit(asr, 0, 10+10*asrRank)
	for _, tk := range tickets {
		p.Done(tk, 0, t0)
	}
	s := p.Snapshot(t0)
	if s.InFlight != 0 || s.Borrowing != 0 {
		t.Errorf("after Done: inflight %d borrowing %d", s.InFlight, s.Borrowing)
	}
	for _, r := range s.Rows {
		if r.InFlight != 0 || r.WithinShare != 0 {
			t.Errorf("%v: inflight %d within %d after Done", r.Path, r.InFlight, r.WithinShare)
		}
	}
	if _, err := json.Marshal(s); err != nil {
		t.Errorf("Snapshot is not JSON-encodable: %v", err)
	}
}

// TestBandOrder: siblings borrowing from each other get the band by LF.
func TestBandOrder(t *testing.T) {
	root := &Node{Children: []*Node{{Name: "A", Shares: 1, Children: []*Node{
		{Name: "x", Shares: 0.5}, {Name: "y", Shares: 0.5}}}}}
	p := NewPool(4, root, time.Hour, t0)
	p.Done(p.Admit(Path{"A", "x", "", ""}, 0), 10, t0) // x heavily used
	p.Done(p.Admit(Path{"A", "y", "", ""}, 0), 1, t0)
	p.Refresh(t0)
	for range 2 {
		p.Admit(Path{"A", "x", "", ""}, 0)
		p.Admit(Path{"A", "y", "", ""}, 0)
	}
	// Both teams at their 2; A at 4 = C: next ones borrow from another org,
	// so free one slot of A first by using a fresh pool state.
	p2 := NewPool(8, root, time.Hour, t0)
	p2.Done(p2.Admit(Path{"A", "x", "", ""}, 0), 10, t0)
	p2.Done(p2.Admit(Path{"A", "y", "", ""}, 0), 1, t0)
	p2.Refresh(t0)
	for range 4 {
		p2.Admit(Path{"A", "x", "", ""}, 0)
	}
	// x is over its 4? no: x has 4 = its reservation. Next x borrows from y: x has lower LF → band rank 1.
	if got := p2.Peek(Path{"A", "x", "", ""}, 0); got != 4 {
		t.Errorf("over-served sibling band = %d, want 4", got)
	}
	p3 := NewPool(8, root, time.Hour, t0)
	p3.Done(p3.Admit(Path{"A", "x", "", ""}, 0), 10, t0)
	p3.Done(p3.Admit(Path{"A", "y", "", ""}, 0), 1, t0)
	p3.Refresh(t0)
	for range 4 {
		p3.Admit(Path{"A", "y", "", ""}, 0)
	}
	if got := p3.Peek(Path{"A", "y", "", ""}, 1); got != 3 {
		t.Errorf("under-served sibling band = %d, want 3 (2 + class)", got)
	}
}

func TestUsagePersistence(t *testing.T) {
	hl := time.Hour
	p := NewPool(16, threeLevel(), hl, t0)
	p.Done(p.Admit(Path{"A", "nlp", "asr", ""}, 0), 8, t0)
	p.Done(p.Admit(Path{"B", "chem", "", ""}, 0), 2, t0)
	saved := p.Usage(t0.Add(hl))
	q := NewPool(16, threeLevel(), hl, t0)
	q.RestoreUsage(saved, t0.Add(hl), t0.Add(2*hl))
	got := map[string]float64{}
	for _, e := range q.Usage(t0.Add(2 * hl)) {
		got[strings.Join(e.Path, "/")] = e.GPUHours
	}
	for k, v := range map[string]float64{"": 2.5, "A": 2, "A/nlp": 2, "A/nlp/asr": 2, "B": 0.5, "B/chem": 0.5} {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("restored %q = %v, want %v", k, got[k], v)
		}
	}
	// SetTree keeps usage and in-flight of surviving accounts.
	tk := q.Admit(Path{"B", "chem", "", ""}, 0)
	q.SetTree(twoOrgsNamed(), t0.Add(2*hl))
	q.Done(tk, 0, t0.Add(2*hl))
	for _, r := range q.Snapshot(t0.Add(2 * hl)).Rows {
		if r.InFlight != 0 || r.WithinShare != 0 {
			t.Errorf("%v inflight %d within %d after SetTree+Done", r.Path, r.InFlight, r.WithinShare)
		}
		if strings.Join(r.Path, "/") == "B/chem" && math.Abs(r.RawUsage-0.5) > 1e-9 {
			t.Errorf("B/chem usage %v after SetTree, want 0.5", r.RawUsage)
		}
	}
}

func twoOrgsNamed() *Node {
	return &Node{Children: []*Node{{Name: "A", Shares: 0.5}, {Name: "B", Shares: 0.5, Children: []*Node{{Name: "chem", Shares: 1}}}}}
}

// TestConcurrentAdmitDone hammers Admit/Done from many goroutines (run with
// -race) while Refresh and SetTree run, checking that within-share counts
// of leaves never exceed their reservations and all counters return to 0.
func TestConcurrentAdmitDone(t *testing.T) {
	p := NewPool(16, threeLevel(), time.Hour, t0)
	paths := []Path{{"A", "nlp", "asr", ""}, {"A", "nlp", "llm", ""}, {"A", "vision", "", ""}, {"B", "chem", "", ""}, {"C", "guest", "", ""}, {"A", "nlp", "", ""}}
	res := map[string]int64{"A/nlp/asr": 4, "A/nlp/llm": 4, "A/vision": 5, "B/chem": 3}
	var mu sync.Mutex
	within := map[string]int64{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bad sync.Once
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 3000 {
				path := paths[rng.IntN(len(paths))]
				tk := p.Admit(path, i%2)
				key := path.Org + "/" + path.Team
				if path.Project != "" {
					key += "/" + path.Project
				}
				if tk.Priority <= 1 {
					mu.Lock()
					within[key]++
					if r, ok := res[key]; ok && within[key] > r {
						bad.Do(func() { t.Errorf("%s: %d within-share in flight > reservation %d", key, within[key], r) })
					}
					mu.Unlock()
					mu.Lock()
					within[key]--
					mu.Unlock()
				}
				p.Done(tk, rng.Float64(), t0.Add(time.Duration(i)*time.Millisecond))
			}
		}()
	}
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p.Refresh(t0.Add(time.Duration(i) * time.Millisecond))
			if i%50 == 0 {
				p.SetTree(threeLevel(), t0)
			}
			s := p.Snapshot(t0)
			for _, r := range s.Rows {
				if r.Depth == 1 && r.WithinShare > r.Reserved+int64(16) {
					t.Errorf("%v within %d", r.Path, r.WithinShare)
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	bg.Wait()
	s := p.Snapshot(t0)
	if s.InFlight != 0 || s.Borrowing != 0 {
		t.Errorf("pool inflight %d borrowing %d after all Done", s.InFlight, s.Borrowing)
	}
	for _, r := range s.Rows {
		if r.InFlight != 0 || r.WithinShare != 0 {
			t.Errorf("%v inflight %d within %d after all Done", r.Path, r.InFlight, r.WithinShare)
		}
	}
}

func BenchmarkAdmitDone(b *testing.B) {
	p := NewPool(256, threeLevel(), 0, t0)
	path := Path{"A", "nlp", "asr", ""}
	b.ReportAllocs()
	for b.Loop() {
		p.Done(p.Admit(path, 0), 0.001, t0)
	}
}

func BenchmarkAdmitDoneParallel(b *testing.B) {
	p := NewPool(256, threeLevel(), 0, t0)
	paths := []Path{{"A", "nlp", "asr", ""}, {"A", "vision", "", ""}, {"B", "chem", "", ""}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			p.Done(p.Admit(paths[i%len(paths)], i&1), 0.001, t0)
			i++
		}
	})
}

func TestAdmitDoneNoAlloc(t *testing.T) {
	p := NewPool(256, threeLevel(), 0, t0)
	path := Path{"A", "nlp", "asr", ""}
	if n := testing.AllocsPerRun(1000, func() { p.Done(p.Admit(path, 0), 0.001, t0) }); n != 0 {
		t.Errorf("Admit+Done allocates %v times", n)
	}
}

// deepTree is six accounts deep with user associations at several levels
// and root's own user association, as Slurm trees may be.
func deepTree() *Node {
	u := func(name string, shares float64) *Node { return &Node{Name: name, User: true, Shares: shares} }
	return &Node{Children: []*Node{
		u("root", 5),
		{Name: "A", Shares: 10, Children: []*Node{
			{Name: "t", Shares: 60, Children: []*Node{
				u("ann", 5),
				{Name: "p1", UseParent: true, Children: []*Node{
					u("ben", 1),
					{Name: "p2", Shares: 30, Children: []*Node{
						{Name: "p3", Shares: 1, Children: []*Node{
							{Name: "p4", Shares: 1, Children: []*Node{u("cat", 2), u("ann", 4)}},
						}},
					}},
				}},
			}},
		}},
		{Name: "B", Shares: 5, Children: []*Node{{Name: "w", Shares: 1, Children: []*Node{u("dan", 1)}}}},
	}}
}

func TestAdmitDoneNoAllocDeep(t *testing.T) {
	p := NewPool(256, deepTree(), 0, t0)
	for _, path := range []Path{{"A", "t", "p4", "cat"}, {"A", "t", "p4", ""}, {"A", "t", "", "ann"}, {"B", "w", "", "nobody"}} {
		if n := testing.AllocsPerRun(1000, func() { p.Done(p.Admit(path, 0), 0.001, t0) }); n != 0 {
			t.Errorf("%v: Admit+Done allocates %v times", path, n)
		}
	}
}

func BenchmarkAdmitDoneDeep(b *testing.B) {
	p := NewPool(256, deepTree(), 0, t0)
	path := Path{"A", "t", "p4", "cat"}
	b.ReportAllocs()
	for b.Loop() {
		p.Done(p.Admit(path, 0), 0.001, t0)
	}
}

// TestDeepTree: accounts at any depth and user associations are in the
// pool's tree; users and root's own users hold no reservation, the
// accounts' reservations are apportioned over accounts only; a request
// counts at the deepest account of its path and at its owner's
// association there.
func TestDeepTree(t *testing.T) {
	p := NewPool(16, deepTree(), 0, t0)
	s := p.Snapshot(t0)
	rows := map[string]Row{}
	for _, r := range s.Rows {
		rows[strings.Join(r.Path, "/")] = r
	}
	for _, k := range []string{"\x01root", "A/t/\x01ann", "A/t/p1/p2/p3/p4", "A/t/p1/p2/p3/p4/\x01cat", "B/w/\x01dan"} {
		if _, ok := rows[k]; !ok {
			t.Errorf("no row %q", k)
		}
	}
	if r := rows["\x01root"]; r.Reserved != 0 || r.Kind != "user" || !r.Leaf {
		t.Errorf("root's user: %+v", r)
	}
	// A and B share 16 as 10:5 (root's user association takes none).
	if a, b := rows["A"].Reserved, rows["B"].Reserved; a != 11 || b != 5 {
		t.Errorf("reservations A %d B %d, want 11 5", a, b)
	}
	if r := rows["A/t/p1/p2/p3/p4"]; r.Reserved != 11 || r.Kind != "project" || r.Depth != 6 {
		t.Errorf("p4: %+v", r)
	}
	if s.Leaves != 6 {
		t.Errorf("%d leaves, want the 6 user associations", s.Leaves)
	}
	tk := p.Admit(Path{"A", "t", "p4", "cat"}, 0)
	if tk.Priority != 0 {
		t.Errorf("priority %d, want 0 (within)", tk.Priority)
	}
	p.Done(tk, 2, t0)
	s = p.Snapshot(t0)
	for _, r := range s.Rows {
		k := strings.Join(r.Path, "/")
		want := 0.0
		if strings.HasPrefix("A/t/p1/p2/p3/p4/\x01cat", k) && !strings.Contains(k, "\x01ann") && !strings.HasPrefix(k, "\x01") {
			want = 2
		}
		if r.RawUsage != want {
			t.Errorf("%q usage %v, want %v", k, r.RawUsage, want)
		}
	}
}

// A tree deeper than MaxDepth keeps its first MaxDepth levels; requests
// still resolve and count without allocating beyond the stack buffer's
// depth only for the deep ones.
func TestTooDeepTree(t *testing.T) {
	root := &Node{}
	n := root
	for i := 0; i < MaxDepth+6; i++ {
		c := &Node{Name: fmt.Sprintf("a%d", i), Shares: 1}
		n.Children = []*Node{c}
		n = c
	}
	p := NewPool(4, root, 0, t0)
	if rows := p.Snapshot(t0).Rows; len(rows) != MaxDepth {
		t.Fatalf("%d rows, want %d", len(rows), MaxDepth)
	}
	tk := p.Admit(Path{"a0", "a1", fmt.Sprintf("a%d", MaxDepth-1), ""}, 0)
	p.Done(tk, 1, t0)
	if tk.Priority != 0 {
		t.Errorf("priority %d", tk.Priority)
	}
}

// In a tree with users, an account without children (no users, no
// sub-accounts) shows no FairShare, as in sshare, but its requests (keys
// without owner) are still ranked among the leaves.
func TestChildlessAccountRankedNotShown(t *testing.T) {
	root := &Node{Children: []*Node{
		{Name: "A", Shares: 1, Children: []*Node{{Name: "ann", User: true, Shares: 1}}},
		{Name: "B", Shares: 1, Children: []*Node{{Name: "empty", Shares: 1}}},
	}}
	p := NewPool(2, root, 0, t0)
	p.Done(p.Admit(Path{"A", "", "", "ann"}, 0), 5, t0)
	p.Refresh(t0)
	s := p.Snapshot(t0)
	for _, r := range s.Rows {
		switch r.Name {
		case "empty":
			if r.Leaf || !math.IsNaN(float64(r.FairShare)) {
				t.Errorf("childless account shown as a leaf: %+v", r)
			}
			if r.Rank != 0 {
				t.Errorf("unused childless account rank %d, want 0 (first)", r.Rank)
			}
		case "ann":
			if !r.Leaf || r.Rank != 1 {
				t.Errorf("ann: %+v, want a leaf ranked after the unused account", r)
			}
		}
	}
	if s.Leaves != 1 {
		t.Errorf("%d leaves shown, want 1 (ann)", s.Leaves)
	}
}

// TestOwnerCaseFolded: a key owner typed "Alice" counts at Slurm's user
// association "alice" (Slurm keeps user names lower-case); with both
// "alice" and "ALICE" (a case-sensitive Slurm) only the exact name
// matches, and an owner without an association counts at the account.
func TestOwnerCaseFolded(t *testing.T) {
	root := &Node{Children: []*Node{
		{Name: "A", Shares: 1, Children: []*Node{{Name: "ta", Shares: 1, Children: []*Node{
			{Name: "alice", User: true, Shares: 1},
			{Name: "bob", User: true, Shares: 1}, {Name: "BOB", User: true, Shares: 1},
		}}}},
	}}
	p := NewPool(8, root, 0, t0)
	tr := p.st.Load().tree
	for _, c := range []struct{ owner, want string }{
		{"alice", "alice"}, {"Alice", "alice"}, {"ALICE", "alice"},
		{"bob", "bob"}, {"BOB", "BOB"}, {"Bob", "ta"}, // ambiguous: the account
		{"carol", "ta"}, {"Carol", "ta"},
	} {
		if got := tr.resolve(Path{Org: "A", Team: "ta", User: c.owner}); got == nil || got.name != c.want {
			t.Errorf("owner %q counts at %v, want %s", c.owner, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { tr.resolve(Path{Org: "A", Team: "ta", User: "Alice"}) }); n != 0 {
		t.Errorf("%v allocations per resolve", n)
	}
}
