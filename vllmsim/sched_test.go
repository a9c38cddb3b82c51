package vllmsim

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustInv(t *testing.T, s *Scheduler) {
	t.Helper()
	if err := s.CheckInvariants(); err != nil {
		t.Fatalf("step %d: %v", s.Steps(), err)
	}
}

// runUntilIdle steps until nothing is left, returning the admission order
// (first admissions only) and checking invariants after each step.
func runUntilIdle(t *testing.T, s *Scheduler, limit int) (admitted []SeqID) {
	t.Helper()
	seen := map[SeqID]bool{}
	for i := 0; s.HasWork(); i++ {
		if i >= limit {
			t.Fatalf("still busy after %d steps", limit)
		}
		res := s.Step()
		mustInv(t, s)
		for _, id := range res.Admitted {
			if !seen[id] {
				seen[id] = true
				admitted = append(admitted, id)
			}
		}
	}
	if s.UsedBlocks() != 0 {
		t.Fatalf("idle scheduler holds %d blocks", s.UsedBlocks())
	}
	return admitted
}

func TestHeapOrderPriorityThenArrival(t *testing.T) {
	s := NewScheduler(SchedConfig{MaxNumSeqs: 1})
	add := []Seq{
		{ID: 1, Priority: 5, Arrival: 1},
		{ID: 2, Priority: 0, Arrival: 4},
		{ID: 3, Priority: 0, Arrival: 2},
		{ID: 4, Priority: -3, Arrival: 9},
		{ID: 5, Priority: 5, Arrival: 0},
		{ID: 6, Priority: 1, Arrival: 3},
	}
	for i := range add {
		q := add[i]
		q.PromptTokens, q.MaxTokens = 10, 2
		s.Add(&q)
	}
	var order []SeqID
	for _, q := range s.Waiting() {
		order = append(order, q.ID)
	}
	want := []SeqID{4, 3, 2, 6, 5, 1}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Fatalf("Waiting() order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, runUntilIdle(t, s, 100)); diff != "" {
		t.Fatalf("admission order (-want +got):\n%s", diff)
	}
}

// Three one-block seqs fill a 3-block cache; on the next step each needs a
// second block. The first (a) preempts the largest (priority, arrival), b;
// the next, c, finds itself the largest and is its own victim.
func TestPreemptionVictimLargestPriorityArrivalAndSelf(t *testing.T) {
	s := NewScheduler(SchedConfig{KVBlocks: 3, BlockSize: 4})
	a := &Seq{ID: 1, Priority: 0, Arrival: 1, PromptTokens: 4, MaxTokens: 4}
	b := &Seq{ID: 2, Priority: 1, Arrival: 2, PromptTokens: 4, MaxTokens: 4}
	c := &Seq{ID: 3, Priority: 0, Arrival: 3, PromptTokens: 4, MaxTokens: 4}
	for _, q := range []*Seq{a, b, c} {
		s.Add(q)
	}
	r1 := s.Step()
	mustInv(t, s)
	if diff := cmp.Diff([]SeqID{1, 3, 2}, r1.Admitted); diff != "" {
		t.Fatalf("step 1 admitted (-want +got):\n%s", diff)
	}
	if r1.KVUsage != 1 {
		t.Fatalf("KV usage %v, want 1", r1.KVUsage)
	}
	r2 := s.Step()
	mustInv(t, s)
	if diff := cmp.Diff([]SeqID{2, 3}, r2.Preempted); diff != "" {
		t.Fatalf("step 2 preempted (-want +got):\n%s", diff)
	}
	if len(r2.Admitted) != 0 {
		t.Fatalf("waiting loop ran in a step with preemptions: admitted %v", r2.Admitted)
	}
	if diff := cmp.Diff([]TokenEvent{{ID: 1, Index: 1}}, r2.Emitted); diff != "" {
		t.Fatalf("step 2 emitted (-want +got):\n%s", diff)
	}
	if got := s.PreemptionsByPriority(); !cmp.Equal(got, map[int]int64{0: 1, 1: 1}) {
		t.Fatalf("preemptions by priority %v", got)
	}
	if b.Generated != 1 || b.Computed != 0 || b.Blocks != 0 || b.State != SeqWaiting {
		t.Fatalf("preempted b: %+v", *b)
	}
	// c (priority 0) is re-admitted before b (priority 1), and needs its
	// prompt plus its generated token again (recompute): 5 tokens, 2 blocks.
	var order []SeqID
	for _, q := range s.Waiting() {
		order = append(order, q.ID)
	}
	if diff := cmp.Diff([]SeqID{3, 2}, order); diff != "" {
		t.Fatalf("waiting after preemption (-want +got):\n%s", diff)
	}
	emitted := map[SeqID]int{}
	for _, e := range append(r1.Emitted, r2.Emitted...) {
		emitted[e.ID]++
	}
	for s.HasWork() {
		r := s.Step()
		mustInv(t, s)
		if slices.Contains(r.Admitted, c.ID) && (c.Blocks != 2 || r.PrefillTokens != 5 || c.Admissions != 2) {
			t.Fatalf("re-admitted c: %d blocks, %d prefill tokens in step, %d admissions", c.Blocks, r.PrefillTokens, c.Admissions)
		}
		for _, e := range r.Emitted {
			if e.Index != emitted[e.ID] {
				t.Fatalf("seq %d emitted index %d, want %d", e.ID, e.Index, emitted[e.ID])
			}
			emitted[e.ID]++
		}
		if s.Steps() > 100 {
			t.Fatal("no progress")
		}
	}
	if c.Admissions != 2 || b.Admissions != 2 || a.Preemptions != 0 {
		t.Fatalf("admissions c %d b %d, a preempted %d times", c.Admissions, b.Admissions, a.Preemptions)
	}
	for _, q := range []*Seq{a, b, c} {
		if emitted[q.ID] != q.MaxTokens || q.State != SeqFinished {
			t.Fatalf("seq %d: %d tokens emitted, state %v", q.ID, emitted[q.ID], q.State)
		}
	}
	if s.UsedBlocks() != 0 {
		t.Fatalf("blocks left: %d", s.UsedBlocks())
	}
}

// A victim already scheduled earlier in the RUNNING loop gives back its
// budget and blocks.
func TestPreemptionOfAlreadyScheduledSeq(t *testing.T) {
	s := NewScheduler(SchedConfig{KVBlocks: 3, BlockSize: 4})
	low := &Seq{ID: 1, Priority: 9, Arrival: 1, PromptTokens: 2, MaxTokens: 4}
	hi := &Seq{ID: 2, Priority: 0, Arrival: 2, PromptTokens: 8, MaxTokens: 4}
	s.Add(low)
	s.Step() // low: 1 block (2 tokens)
	s.Add(hi)
	s.Step() // low decodes (3 tokens, 1 block); hi: 2 blocks (8 tokens); cache full
	mustInv(t, s)
	// Step 3: low (4 tokens) is scheduled without a new block; then hi (9
	// tokens) needs a third block and preempts low, already scheduled.
	r := s.Step()
	mustInv(t, s)
	if diff := cmp.Diff([]SeqID{1}, r.Preempted); diff != "" {
		t.Fatalf("preempted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]TokenEvent{{ID: 2, Index: 1}}, r.Emitted); diff != "" {
		t.Fatalf("emitted (-want +got):\n%s", diff)
	}
	if low.State != SeqWaiting || hi.State != SeqRunning || hi.Blocks != 3 {
		t.Fatalf("low %v hi %v (%d blocks)", low.State, hi.State, hi.Blocks)
	}
	runUntilIdle(t, s, 100)
}

func TestWaitingHighPriorityNeverPreempts(t *testing.T) {
	t.Run("max_num_seqs", func(t *testing.T) {
		s := NewScheduler(SchedConfig{MaxNumSeqs: 1})
		low := &Seq{ID: 1, Priority: 100, Arrival: 1, PromptTokens: 8, MaxTokens: 5}
		s.Add(low)
		s.Step()
		hi := &Seq{ID: 2, Priority: -100, Arrival: 2, PromptTokens: 8, MaxTokens: 5}
		s.Add(hi)
		for low.State == SeqRunning {
			r := s.Step()
			mustInv(t, s)
			if hi.State != SeqWaiting && low.State == SeqRunning {
				t.Fatal("high priority seq admitted while low runs")
			}
			if len(r.Preempted) != 0 {
				t.Fatalf("preempted %v", r.Preempted)
			}
		}
		runUntilIdle(t, s, 100)
		if s.Preemptions() != 0 {
			t.Fatalf("%d preemptions", s.Preemptions())
		}
	})
	t.Run("kv_blocks", func(t *testing.T) {
		s := NewScheduler(SchedConfig{KVBlocks: 4, BlockSize: 4})
		low := &Seq{ID: 1, Priority: 100, Arrival: 1, PromptTokens: 12, MaxTokens: 3}
		s.Add(low)
		s.Step() // 3 blocks
		hi := &Seq{ID: 2, Priority: -100, Arrival: 2, PromptTokens: 8, MaxTokens: 3}
		s.Add(hi) // needs 2 blocks, 1 free
		r := s.Step()
		if len(r.Admitted) != 0 || len(r.Preempted) != 0 || hi.State != SeqWaiting {
			t.Fatalf("step: %+v, hi %v", r, hi.State)
		}
		runUntilIdle(t, s, 100)
	})
}

// Head of line: the waiting loop stops at the first seq that does not fit,
// even if a later, smaller one would.
func TestWaitingHeadOfLineBlocks(t *testing.T) {
	s := NewScheduler(SchedConfig{KVBlocks: 4, BlockSize: 4})
	s.Add(&Seq{ID: 1, Priority: 0, Arrival: 1, PromptTokens: 8, MaxTokens: 4})
	s.Step()                                                                    // 2 blocks used
	s.Add(&Seq{ID: 2, Priority: 0, Arrival: 2, PromptTokens: 12, MaxTokens: 1}) // 3 blocks: no
	s.Add(&Seq{ID: 3, Priority: 1, Arrival: 3, PromptTokens: 4, MaxTokens: 1})  // 1 block: would fit
	r := s.Step()
	if len(r.Admitted) != 0 {
		t.Fatalf("admitted %v behind a blocked head", r.Admitted)
	}
	if diff := cmp.Diff([]SeqID{2, 3}, runUntilIdle(t, s, 100)); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

func TestTokenBudget(t *testing.T) {
	s := NewScheduler(SchedConfig{MaxBatchTokens: 20})
	s.Add(&Seq{ID: 1, Arrival: 1, PromptTokens: 12, MaxTokens: 3})
	s.Add(&Seq{ID: 2, Arrival: 2, PromptTokens: 12, MaxTokens: 3})
	r := s.Step()
	if diff := cmp.Diff([]SeqID{1}, r.Admitted); diff != "" {
		t.Fatalf("step 1 admitted (-want +got):\n%s", diff)
	}
	r = s.Step() // 1 decode token + 12 prefill ≤ 20
	if diff := cmp.Diff([]SeqID{2}, r.Admitted); diff != "" {
		t.Fatalf("step 2 admitted (-want +got):\n%s", diff)
	}
	if r.PrefillTokens != 12 {
		t.Fatalf("prefill tokens %d", r.PrefillTokens)
	}
	runUntilIdle(t, s, 100)
}

func TestFCFS(t *testing.T) {
	s := NewScheduler(SchedConfig{Policy: PolicyFCFS, KVBlocks: 3, BlockSize: 4})
	// Priority is ignored by the queue order under fcfs.
	a := &Seq{ID: 1, Priority: 7, Arrival: 1, PromptTokens: 4, MaxTokens: 4}
	b := &Seq{ID: 2, Priority: 0, Arrival: 2, PromptTokens: 4, MaxTokens: 4}
	c := &Seq{ID: 3, Priority: -7, Arrival: 3, PromptTokens: 4, MaxTokens: 4}
	d := &Seq{ID: 4, Priority: -9, Arrival: 4, PromptTokens: 4, MaxTokens: 1}
	for _, q := range []*Seq{a, b, c, d} {
		s.Add(q)
	}
	var order []SeqID
	for _, q := range s.Waiting() {
		order = append(order, q.ID)
	}
	if diff := cmp.Diff([]SeqID{1, 2, 3, 4}, order); diff != "" {
		t.Fatalf("fcfs order (-want +got):\n%s", diff)
	}
	r := s.Step()
	if diff := cmp.Diff([]SeqID{1, 2, 3}, r.Admitted); diff != "" {
		t.Fatalf("admitted (-want +got):\n%s", diff)
	}
	// Each needs a 2nd block: a preempts the last admitted, c; b then
	// preempts... the last admitted is now b itself.
	r = s.Step()
	mustInv(t, s)
	if diff := cmp.Diff([]SeqID{3, 2}, r.Preempted); diff != "" {
		t.Fatalf("preempted (-want +got):\n%s", diff)
	}
	// Preempted seqs go back to the front: b (preempted last) first, then c,
	// then d.
	order = nil
	for _, q := range s.Waiting() {
		order = append(order, q.ID)
	}
	if diff := cmp.Diff([]SeqID{2, 3, 4}, order); diff != "" {
		t.Fatalf("waiting after preemption (-want +got):\n%s", diff)
	}
	runUntilIdle(t, s, 100)
}

func TestAbortFreesBlocks(t *testing.T) {
	s := NewScheduler(SchedConfig{MaxNumSeqs: 2, KVBlocks: 10, BlockSize: 4})
	for i := 1; i <= 4; i++ {
		s.Add(&Seq{ID: SeqID(i), Arrival: int64(i), PromptTokens: 10, MaxTokens: 100 - 70})
	}
	s.Step()
	if s.UsedBlocks() != 6 || s.NumRunning() != 2 || s.NumWaiting() != 2 {
		t.Fatalf("used %d running %d waiting %d", s.UsedBlocks(), s.NumRunning(), s.NumWaiting())
	}
	if !s.Abort(1) || !s.Abort(4) {
		t.Fatal("abort of a known seq returned false")
	}
	if s.Abort(1) || s.Abort(99) {
		t.Fatal("abort of an unknown seq returned true")
	}
	mustInv(t, s)
	if s.UsedBlocks() != 3 || s.NumRunning() != 1 || s.NumWaiting() != 1 {
		t.Fatalf("after abort: used %d running %d waiting %d", s.UsedBlocks(), s.NumRunning(), s.NumWaiting())
	}
	s.Abort(2)
	s.Abort(3)
	mustInv(t, s)
	if s.UsedBlocks() != 0 || s.HasWork() {
		t.Fatalf("after aborting all: used %d", s.UsedBlocks())
	}
	if _, aborted, _, _ := s.Counters(); aborted != 4 {
		t.Fatalf("aborted counter %d", aborted)
	}
}

func TestAddPanicsOnSeqThatCannotFit(t *testing.T) {
	s := NewScheduler(SchedConfig{KVBlocks: 2, BlockSize: 4})
	if s.Config().MaxModelLen() != 8 {
		t.Fatalf("max model len %d", s.Config().MaxModelLen())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	s.Add(&Seq{ID: 1, PromptTokens: 5, MaxTokens: 4})
}

// randomRun drives a scheduler with random adds, aborts and steps and checks
// the invariants after every operation, then drains it.
func randomRun(t *testing.T, seed uint64, ops []byte) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	policy := PolicyPriority
	if seed%3 == 0 {
		policy = PolicyFCFS
	}
	cfg := SchedConfig{
		Policy:         policy,
		MaxNumSeqs:     1 + rng.IntN(8),
		KVBlocks:       4 + rng.IntN(40),
		BlockSize:      1 + rng.IntN(8),
		MaxBatchTokens: 16 + rng.IntN(200),
	}
	s := NewScheduler(cfg)
	maxLen := s.Config().MaxModelLen()
	var next SeqID
	var live []SeqID
	seqs := map[SeqID]*Seq{}
	emitted := map[SeqID]int{}
	check := func() {
		t.Helper()
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("seed %d cfg %+v step %d: %v", seed, cfg, s.Steps(), err)
		}
	}
	step := func() {
		t.Helper()
		r := s.Step()
		check()
		if r.Running > cfg.MaxNumSeqs || r.KVUsage < 0 || r.KVUsage > 1 {
			t.Fatalf("bad step result %+v", r)
		}
		for _, e := range r.Emitted {
			if e.Index != emitted[e.ID] {
				t.Fatalf("seed %d: seq %d emitted index %d, want %d", seed, e.ID, e.Index, emitted[e.ID])
			}
			emitted[e.ID]++
		}
		for _, id := range r.Finished {
			if emitted[id] != seqs[id].MaxTokens {
				t.Fatalf("seq %d finished with %d of %d tokens", id, emitted[id], seqs[id].MaxTokens)
			}
		}
	}
	for _, op := range ops {
		switch op % 4 {
		case 0, 1: // add
			next++
			prompt := 1 + rng.IntN(maxLen-1)
			q := &Seq{ID: next, Priority: rng.IntN(4) * 10, Arrival: int64(next),
				PromptTokens: prompt, MaxTokens: 1 + rng.IntN(maxLen-prompt)}
			if policy == PolicyFCFS {
				q.Priority = 0
			}
			seqs[q.ID] = q
			s.Add(q)
			live = append(live, q.ID)
		case 2: // abort
			if len(live) > 0 {
				i := rng.IntN(len(live))
				s.Abort(live[i])
				live = append(live[:i], live[i+1:]...)
			}
		case 3:
			step()
		}
		check()
	}
	// Drain: every seq either finishes or was aborted; no livelock.
	for i := 0; s.HasWork(); i++ {
		if i > 100000 {
			t.Fatalf("seed %d: no progress, running %d waiting %d", seed, s.NumRunning(), s.NumWaiting())
		}
		step()
	}
	if s.UsedBlocks() != 0 {
		t.Fatalf("blocks left %d", s.UsedBlocks())
	}
	fin, ab, gen, _ := s.Counters()
	if int(fin+ab) != len(seqs) {
		t.Fatalf("finished %d + aborted %d != %d added", fin, ab, len(seqs))
	}
	var sum int64
	for _, n := range emitted {
		sum += int64(n)
	}
	if sum != gen {
		t.Fatalf("generated counter %d != emitted %d", gen, sum)
	}
}

func TestSchedulerRandomInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 150; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		ops := make([]byte, 50+rng.IntN(300))
		for i := range ops {
			ops[i] = byte(rng.IntN(256))
		}
		randomRun(t, seed, ops)
	}
}

func FuzzScheduler(f *testing.F) {
	f.Add(uint64(1), []byte{0, 0, 0, 3, 3, 2, 3, 1, 3, 3})
	f.Add(uint64(3), []byte{0, 1, 0, 1, 0, 1, 3, 3, 3, 3, 2, 2, 3})
	f.Add(uint64(42), []byte{0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 2, 3})
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		randomRun(t, seed, ops)
	})
}

// A request of higher priority arriving while max_num_seqs is full waits
// for a running one to finish, however much KV is free (vLLM V1: the waiting
// loop never preempts; vLLM issue #40004); under KV pressure the running
// request with the largest (priority, arrival) is still preempted, never the
// higher-priority one.
func TestHigherPriorityArrivalAtFullEngine(t *testing.T) {
	t.Run("max_num_seqs full, KV to spare", func(t *testing.T) {
		s := NewScheduler(SchedConfig{MaxNumSeqs: 4, KVBlocks: 4096, BlockSize: 16})
		lows := make([]*Seq, 4)
		for i := range lows {
			lows[i] = &Seq{ID: SeqID(i + 1), Priority: 10, Arrival: int64(i + 1), PromptTokens: 64, MaxTokens: 20 + 10*i}
			s.Add(lows[i])
		}
		if r := s.Step(); len(r.Admitted) != 4 {
			t.Fatalf("step 1 admitted %v", r.Admitted)
		}
		hi := &Seq{ID: 9, Priority: -10, Arrival: 9, PromptTokens: 64, MaxTokens: 5}
		s.Add(hi)
		firstFinish := int64(0)
		for hi.State == SeqWaiting {
			r := s.Step()
			mustInv(t, s)
			if len(r.Preempted) != 0 {
				t.Fatalf("step %d preempted %v with %.0f%% of KV used", r.Step, r.Preempted, 100*r.KVUsage)
			}
			if r.KVUsage > 0.1 {
				t.Fatalf("KV usage %v: not to spare", r.KVUsage)
			}
			if len(r.Admitted) > 0 && firstFinish == 0 {
				t.Fatalf("step %d admitted %v while max_num_seqs was full", r.Step, r.Admitted)
			}
			if len(r.Finished) > 0 && firstFinish == 0 {
				firstFinish = r.Step
			}
			if r.Step > 100 {
				t.Fatal("high-priority seq never admitted")
			}
		}
		if s.Steps() != firstFinish+1 || lows[0].State != SeqFinished {
			t.Fatalf("admitted at step %d, first finish at step %d", s.Steps(), firstFinish)
		}
		runUntilIdle(t, s, 200)
		if s.Preemptions() != 0 {
			t.Fatalf("%d preemptions", s.Preemptions())
		}
	})
	t.Run("KV pressure", func(t *testing.T) {
		s := NewScheduler(SchedConfig{MaxNumSeqs: 4, KVBlocks: 6, BlockSize: 4})
		low1 := &Seq{ID: 1, Priority: 10, Arrival: 1, PromptTokens: 4, MaxTokens: 12}
		low2 := &Seq{ID: 2, Priority: 10, Arrival: 2, PromptTokens: 4, MaxTokens: 12}
		s.Add(low1)
		s.Add(low2)
		s.Step()
		hi := &Seq{ID: 3, Priority: -10, Arrival: 3, PromptTokens: 4, MaxTokens: 12}
		s.Add(hi)
		if r := s.Step(); len(r.Admitted) != 1 || r.Admitted[0] != hi.ID {
			t.Fatalf("step 2 admitted %v", r.Admitted)
		}
		runUntilIdle(t, s, 200)
		if s.Preemptions() == 0 || hi.Preemptions != 0 {
			t.Fatalf("%d preemptions, %d of the high-priority seq", s.Preemptions(), hi.Preemptions)
		}
		if got := s.PreemptionsByPriority(); len(got) != 1 || got[10] != s.Preemptions() {
			t.Fatalf("preemptions by priority %v", got)
		}
		for _, q := range []*Seq{low1, low2, hi} {
			if q.State != SeqFinished || q.Generated != q.MaxTokens {
				t.Fatalf("seq %d: %v, %d of %d tokens", q.ID, q.State, q.Generated, q.MaxTokens)
			}
		}
	})
}
