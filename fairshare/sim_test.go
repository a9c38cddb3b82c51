package fairshare

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// The simulator drives vllmsim's V1 scheduler model (priority waiting heap,
// KV blocks, preemption of the largest (priority, arrival)) with
// closed-loop clients: each client submits one request with the priority
// from Pool.Admit, and when it finishes calls Done (charging its GPU time)
// and submits the next. One engine step is one second of pool time.
//
// KV sizing: requests have 64..512 prompt and 32..512 output tokens, so at
// most 1024 tokens = 64 blocks of 16; the cache has C × 64 blocks, so C
// requests always fit (C is the sustainable concurrency) while about 2.5·C
// average requests fit at once.

const (
	simBlock   = 16
	simMaxLen  = 1024
	simPerSlot = simMaxLen / simBlock
)

type simGroup struct {
	name    string
	path    Path
	clients int
	start   int64 // step the group's clients start
}

type simConfig struct {
	capacity int
	root     *Node
	groups   []simGroup
	steps    int64 // total steps
	window   int64 // steady state: the last window steps are measured
	control  bool  // every request at priority 0 (no gateway priorities)
	seed     uint64
}

type simResult struct {
	running     []float64 // mean running requests per group over the window
	fraction    []float64 // share of the running requests per group over the window
	within      []float64 // mean running within-share (priority ≤ 1) requests per group
	maxWithin   []int64   // max in-flight within-share requests per group, whole run
	maxOrgIn    map[string]int64
	kv          float64 // mean KV utilisation over the window
	preempt     map[int]int64
	preemptions int64
}

type simReq struct {
	group  int
	ticket Ticket
}

func runSim(t *testing.T, cfg simConfig) simResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(cfg.seed, 42))
	s := vllmsim.NewScheduler(vllmsim.SchedConfig{Policy: vllmsim.PolicyPriority,
		KVBlocks: cfg.capacity * simPerSlot, BlockSize: simBlock, MaxNumSeqs: 1024, MaxBatchTokens: 16384})
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	pool := NewPool(cfg.capacity, cfg.root, simHalfLife, t0)
	reqs := map[vllmsim.SeqID]*simReq{}
	var nextID vllmsim.SeqID
	var arrival int64
	inWithin := make([]int64, len(cfg.groups))
	res := simResult{running: make([]float64, len(cfg.groups)), fraction: make([]float64, len(cfg.groups)),
		within: make([]float64, len(cfg.groups)), maxWithin: make([]int64, len(cfg.groups)), maxOrgIn: map[string]int64{}}
	submit := func(g int, now time.Time) {
		tk := pool.Admit(cfg.groups[g].path, 0)
		prio := tk.Priority
		if cfg.control {
			prio = 0
		}
		nextID++
		arrival++
		reqs[nextID] = &simReq{group: g, ticket: tk}
		if tk.Priority <= 1 {
			inWithin[g]++
			res.maxWithin[g] = max(res.maxWithin[g], inWithin[g])
		}
		s.Add(&vllmsim.Seq{ID: nextID, Priority: prio, Arrival: arrival,
			PromptTokens: 64 + rng.IntN(449), MaxTokens: 32 + rng.IntN(481)})
	}
	var total float64
	counts := make([]float64, len(cfg.groups))
	for step := int64(0); step < cfg.steps; step++ {
		now := t0.Add(time.Duration(step) * time.Second)
		for g, gr := range cfg.groups {
			if gr.start == step {
				for range gr.clients {
					submit(g, now)
				}
			}
		}
		r := s.Step()
		now = now.Add(time.Second)
		for _, id := range r.Finished {
			q := reqs[id]
			delete(reqs, id)
			if q.ticket.Priority <= 1 {
				inWithin[q.group]--
			}
			// GPU-hours: one step of one sequence is 1/C of the pool for 1 s.
			pool.Done(q.ticket, float64(tokensOf(r, id))/3600/float64(cfg.capacity), now)
			submit(q.group, now)
		}
		pool.Refresh(now)
		if step >= cfg.steps-cfg.window {
			for i := range counts {
				counts[i] = 0
			}
			var within = make([]float64, len(cfg.groups))
			for _, q := range s.Running() {
				g := reqs[q.ID].group
				counts[g]++
				if reqs[q.ID].ticket.Priority <= 1 {
					within[g]++
				}
			}
			for g := range counts {
				res.running[g] += counts[g]
				res.within[g] += within[g]
				total += counts[g]
			}
			res.kv += r.KVUsage
		}
		if step%64 == 0 {
			for _, row := range pool.Snapshot(now).Rows {
				if row.Depth == 1 {
					res.maxOrgIn[row.Name] = max(res.maxOrgIn[row.Name], row.WithinShare)
				}
			}
		}
		if step%1000 == 0 {
			if err := s.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for g := range res.running {
		res.fraction[g] = res.running[g] / total
		res.running[g] /= float64(cfg.window)
		res.within[g] /= float64(cfg.window)
	}
	res.kv /= float64(cfg.window)
	res.preempt = s.PreemptionsByPriority()
	res.preemptions = s.Preemptions()
	return res
}

// tokensOf is the number of tokens a seq that finished in r generated: one
// per step it ran, so usage is its running time.
func tokensOf(r vllmsim.StepResult, id vllmsim.SeqID) int {
	for _, e := range r.Emitted {
		if e.ID == id {
			return e.Index + 1 // Generated == MaxTokens: one step per token
		}
	}
	return 0
}

func preemptClasses(m map[int]int64) (within, sibling, borrow int64) {
	for p, n := range m {
		switch {
		case p <= 1:
			within += n
		case p < PriorityBorrowBase:
			sibling += n
		default:
			borrow += n
		}
	}
	return
}

func twoOrgs(a, b float64) *Node {
	return &Node{Children: []*Node{
		{Name: "etabA", Shares: a, Children: []*Node{{Name: "lab-nlp", Shares: 1}}},
		{Name: "etabB", Shares: b, Children: []*Node{{Name: "lab-chem", Shares: 1}}},
	}}
}

var (
	pathA = Path{Org: "etabA", Team: "lab-nlp"}
	pathB = Path{Org: "etabB", Team: "lab-chem"}
)

func simSteps() (steps, window int64) {
	if testing.Short() {
		return 12000, 8000
	}
	return 30000, 24000
}

func TestSimulator(t *testing.T) {
	steps, window := simSteps()
	var table strings.Builder
	table.WriteString("\n| scenario (C = 16, 64 clients per team) | running A / B | fraction A / B | KV util | preemptions 0-1 / 2-9 / ≥10 |\n|---|---|---|---|---|\n")
	row := func(name string, r simResult) {
		w, s, b := preemptClasses(r.preempt)
		table.WriteString("| " + name + " | " + f2(r.running[0]) + " / " + f2(r.running[1]) + " | " + f3(r.fraction[0]) + " / " + f3(r.fraction[1]) +
			" | " + f3(r.kv) + " | " + itoa(w) + " / " + itoa(s) + " / " + itoa(b) + " |\n")
	}

	t.Run("alone", func(t *testing.T) {
		for _, g := range []simGroup{{"A", pathA, 64, 0}, {"B", pathB, 64, 0}} {
			r := runSim(t, simConfig{capacity: 16, root: twoOrgs(0.8125, 0.1875), seed: 1,
				groups: []simGroup{g, {"idle", Path{Org: "nobody"}, 0, -1}}, steps: steps / 2, window: window / 2})
			row(g.name+" alone", r)
			if r.kv < 0.95 {
				t.Errorf("%s alone: KV utilisation %.3f < 0.95", g.name, r.kv)
			}
		}
	})
	t.Run("both", func(t *testing.T) {
		r := runSim(t, simConfig{capacity: 16, root: twoOrgs(0.8125, 0.1875), seed: 2,
			groups: []simGroup{{"A", pathA, 64, 0}, {"B", pathB, 64, 2000}}, steps: steps, window: window})
		row("both saturating, B after A", r)
		if d := r.fraction[0] - 0.8125; d > 0.01 || d < -0.01 {
			t.Errorf("A running fraction %.4f, want 0.8125 ± 0.01", r.fraction[0])
		}
		if d := r.fraction[1] - 0.1875; d > 0.01 || d < -0.01 {
			t.Errorf("B running fraction %.4f, want 0.1875 ± 0.01", r.fraction[1])
		}
		if w, _, _ := preemptClasses(r.preempt); w != 0 {
			t.Errorf("%d preemptions of within-share requests (priority 0/1): %v", w, r.preempt)
		}
		if r.preemptions == 0 {
			t.Errorf("no preemption at all: the scenario does not exercise the victim choice")
		}
	})
	t.Run("control", func(t *testing.T) {
		r := runSim(t, simConfig{capacity: 16, root: twoOrgs(0.8125, 0.1875), seed: 3, control: true,
			groups: []simGroup{{"A", pathA, 64, 0}, {"B", pathB, 64, 2000}}, steps: steps, window: window})
		row("control: every request at priority 0", r)
		if d := r.fraction[1] - 0.5; d > 0.03 || d < -0.03 {
			t.Errorf("control: B running fraction %.4f, want its fraction of clients 0.5", r.fraction[1])
		}
	})
	t.Run("C=10", func(t *testing.T) {
		r := runSim(t, simConfig{capacity: 10, root: twoOrgs(0.8125, 0.1875), seed: 4,
			groups: []simGroup{{"A", pathA, 64, 0}, {"B", pathB, 64, 2000}}, steps: steps, window: window})
		row("C = 10 (reservations 8 / 2)", r)
		t.Logf("C = 10: max within-share in flight A %d (reservation 8), B %d (2); org within counts %v",
			r.maxWithin[0], r.maxWithin[1], r.maxOrgIn)
		if r.maxWithin[0] > 8 || r.maxOrgIn["etabA"] > 8 {
			t.Errorf("A held %d (org count %d) within-share requests, reservation 8", r.maxWithin[0], r.maxOrgIn["etabA"])
		}
		if r.maxWithin[1] > 2 {
			t.Errorf("B held %d within-share requests, reservation 2", r.maxWithin[1])
		}
		if w, _, _ := preemptClasses(r.preempt); w != 0 {
			t.Errorf("%d preemptions of within-share requests", w)
		}
	})
	t.Run("sub-shares", func(t *testing.T) {
		root := &Node{Children: []*Node{
			{Name: "etabA", Shares: 13, Children: []*Node{{Name: "lab-nlp", Shares: 60}, {Name: "lab-vision", Shares: 40}}},
			{Name: "etabB", Shares: 3, Children: []*Node{{Name: "lab-chem", Shares: 100}}},
		}}
		vision := Path{Org: "etabA", Team: "lab-vision"}
		r := runSim(t, simConfig{capacity: 16, root: root, seed: 5,
			groups: []simGroup{{"nlp", pathA, 64, 0}, {"vision", vision, 64, 3000}, {"B", pathB, 64, 0}},
			steps:  steps, window: window})
		w, s, b := preemptClasses(r.preempt)
		t.Logf("sub-shares (A 13 = nlp 8 + vision 5, B 3): running nlp %.2f vision %.2f B %.2f; within-share running %.2f / %.2f / %.2f (max in flight %v); fractions %.3f / %.3f / %.3f; preemptions 0-1/2-9/≥10 %d/%d/%d",
			r.running[0], r.running[1], r.running[2], r.within[0], r.within[1], r.within[2], r.maxWithin,
			r.fraction[0], r.fraction[1], r.fraction[2], w, s, b)
		for g, res := range []float64{8, 5, 3} {
			if r.maxWithin[g] > int64(res) {
				t.Errorf("%s: %d within-share requests in flight, reservation %v", []string{"nlp", "vision", "B"}[g], r.maxWithin[g], res)
			}
			if r.within[g] < 0.9*res {
				t.Errorf("%s: %.2f within-share requests running on average, sub-guarantee %v", []string{"nlp", "vision", "B"}[g], r.within[g], res)
			}
			if r.running[g] < res {
				t.Errorf("%s: %.2f running on average, below its reservation %v", []string{"nlp", "vision", "B"}[g], r.running[g], res)
			}
		}
		if w != 0 {
			t.Errorf("%d preemptions of within-share requests", w)
		}
	})
	t.Log(table.String())
}

// simHalfLife is the default 168h: with half-lives short against the
// controller lag (borrowers keep the priority they were admitted with),
// decayed usage over-weights the latest swing and the small organisation
// gets more than its share (10m: B 0.26, 2h: 0.20, 24h: 0.19, 168h: 0.1877).
var simHalfLife = DefaultHalfLife
