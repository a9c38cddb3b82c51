// Package vllmsim simulates a vLLM server: the V1 scheduler (waiting queue,
// KV blocks, recompute preemption) behind an OpenAI-compatible HTTP API.
//
// It has two layers. Scheduler is a pure, deterministic model of
// vllm/v1/core/sched/scheduler.py: no goroutines, no clock and no I/O, time
// is counted in engine steps, so a test can drive it step by step. Server
// puts it behind /v1/chat/completions, /v1/completions, /v1/embeddings,
// /v1/responses, /v1/models (and /v1/models/{id}), /health and /metrics,
// stepping it on a timer while there is work, for gateway tests,
// benchmarks and the quick start demo.
//
// Like vLLM V1, a waiting request never preempts a running one, whatever
// its priority: when max_num_seqs requests run it waits for one to finish
// however much KV cache is free (vLLM issue #40004). Preemption happens only
// when a running request needs a KV block and none is free; the victim is the
// running request with the largest (priority, arrival), recomputed later.
//
// Output is deterministic and resumable. Token i of an answer is "tok<i> ",
// whatever the request, so the same request always gets the same text, and a
// request that already holds the first k tokens of its answer continues with
// token k: a chat request with continue_final_message true and
// add_generation_prompt false whose final (assistant) message ends with
// "tok0 tok1 … tok<k-1> ", or a completions prompt (a string, or a list of
// one) that ends with them. An answer stopped after k tokens and resumed so
// is the unpreempted answer: same text, same finish_reason, the same total
// completion tokens when max_tokens is lowered by k (or left unset: the model
// stops at answer position DefaultMaxTokens). The resumed request's usage
// counts the k tokens in prompt_tokens (one each, on top of the original
// prompt's count) and only what it generated in completion_tokens. Text
// before them (a prompt, a client's own prefill) is any text; a final message
// that does not end with the answer's first tokens is continued from token 0.
// As vLLM, chat refuses continue_final_message with add_generation_prompt
// true (explicit, or left at its default) and a final message without text,
// with a 400 in vLLM's error shape; like vLLM's chat template, it continues
// the final message whatever its role.
package vllmsim

import (
	"container/heap"
	"fmt"
)

// Scheduling policies, as vLLM's --scheduling-policy.
const (
	PolicyPriority = "priority"
	PolicyFCFS     = "fcfs"
)

// SchedConfig sizes the simulated engine. Zero values take the defaults.
type SchedConfig struct {
	Policy         string // "priority" (default) or "fcfs"
	MaxNumSeqs     int    // max running requests (vLLM max_num_seqs), default 256
	KVBlocks       int    // total KV cache blocks, default 4096
	BlockSize      int    // tokens per block, default 16
	MaxBatchTokens int    // token budget per step (prefill + one per decode), default 8192
}

// withDefaults returns cfg with zero fields replaced by the defaults.
func (cfg SchedConfig) withDefaults() SchedConfig {
	if cfg.Policy == "" {
		cfg.Policy = PolicyPriority
	}
	if cfg.MaxNumSeqs <= 0 {
		cfg.MaxNumSeqs = 256
	}
	if cfg.KVBlocks <= 0 {
		cfg.KVBlocks = 4096
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.MaxBatchTokens <= 0 {
		cfg.MaxBatchTokens = 8192
	}
	return cfg
}

// MaxModelLen is the longest sequence (prompt + output tokens) the engine
// accepts: it must fit in the KV cache and, chunked prefill being off, in one
// step's token budget (vLLM requires max_num_batched_tokens >= max_model_len
// in that case).
func (cfg SchedConfig) MaxModelLen() int {
	cfg = cfg.withDefaults()
	return min(cfg.KVBlocks*cfg.BlockSize, cfg.MaxBatchTokens)
}

// SeqID identifies a sequence (a request) in the scheduler.
type SeqID uint64

// SeqState is where a sequence is.
type SeqState int

// Sequence states.
const (
	SeqNew SeqState = iota // not yet added
	SeqWaiting
	SeqRunning
	SeqFinished
	SeqAborted
)

func (st SeqState) String() string {
	switch st {
	case SeqNew:
		return "new"
	case SeqWaiting:
		return "waiting"
	case SeqRunning:
		return "running"
	case SeqFinished:
		return "finished"
	case SeqAborted:
		return "aborted"
	}
	return fmt.Sprintf("SeqState(%d)", int(st))
}

// Seq is one request in the engine. The caller fills ID, Priority, Arrival,
// PromptTokens and MaxTokens before Add; the scheduler maintains the rest.
// Fields must not be changed by the caller after Add.
type Seq struct {
	ID           SeqID
	Priority     int   // lower runs earlier (vLLM)
	Arrival      int64 // monotonically increasing arrival counter or step
	PromptTokens int   // ≥ 1
	MaxTokens    int   // ≥ 1; the seq finishes when Generated reaches it

	Generated   int      // output tokens generated so far (kept across preemptions)
	Computed    int      // tokens whose KV is computed (0 after a preemption)
	Blocks      int      // KV blocks held
	Preemptions int      // times this seq was preempted
	State       SeqState // where it is
	Admissions  int      // times admitted from the waiting queue (1 + re-admissions)

	heapIdx int // index in the priority heap, -1 when not in it
}

// Tokens is the sequence length so far: prompt plus generated tokens.
func (q *Seq) Tokens() int { return q.PromptTokens + q.Generated }

// TokenEvent is one generated token: Index is its 0-based position in the
// output (Generated-1 after the step).
type TokenEvent struct {
	ID    SeqID
	Index int
}

// StepResult reports one engine step.
type StepResult struct {
	Step      int64        // 1-based number of this step
	Admitted  []SeqID      // seqs moved from waiting to running (prefilled) this step
	Emitted   []TokenEvent // one token per scheduled running seq
	Finished  []SeqID      // seqs that reached MaxTokens this step (blocks freed)
	Preempted []SeqID      // seqs preempted this step, in order
	Running   int          // running seqs after the step
	Waiting   int          // waiting seqs after the step
	KVUsage   float64      // used blocks / KVBlocks after the step, 0..1

	PrefillTokens int // tokens prefilled this step (including recomputation)
}

// Scheduler is a deterministic model of vLLM V1's scheduler. It is not safe
// for concurrent use.
type Scheduler struct {
	cfg SchedConfig

	seqs    map[SeqID]*Seq // every waiting or running seq
	running []*Seq         // admission order
	pq      seqHeap        // waiting queue under "priority"
	fifo    []*Seq         // waiting queue under "fcfs", front first

	usedBlocks int
	steps      int64

	preemptions       int64
	preemptionsByPrio map[int]int64
	finished          int64
	aborted           int64
	generated         int64
	prefilled         int64
}

// NewScheduler returns an empty scheduler. It panics on an unknown policy.
func NewScheduler(cfg SchedConfig) *Scheduler {
	cfg = cfg.withDefaults()
	if cfg.Policy != PolicyPriority && cfg.Policy != PolicyFCFS {
		panic(fmt.Sprintf("vllmsim: unknown scheduling policy %q", cfg.Policy))
	}
	return &Scheduler{
		cfg:               cfg,
		seqs:              make(map[SeqID]*Seq),
		preemptionsByPrio: make(map[int]int64),
	}
}

// Config returns the configuration with defaults applied.
func (s *Scheduler) Config() SchedConfig { return s.cfg }

// Fits reports whether seq can ever run: PromptTokens and MaxTokens ≥ 1 and
// PromptTokens+MaxTokens ≤ MaxModelLen. Add panics on a seq that does not
// fit, since it would block the head of the queue for ever; a server
// rejects such requests with a 400 first.
func (s *Scheduler) Fits(seq *Seq) bool {
	return seq.PromptTokens >= 1 && seq.MaxTokens >= 1 &&
		seq.PromptTokens+seq.MaxTokens <= s.cfg.MaxModelLen()
}

// Add puts a new seq in the waiting queue. It panics if the ID is in use,
// the seq was already added, or it does not fit (see Fits).
func (s *Scheduler) Add(seq *Seq) {
	if seq.State != SeqNew {
		panic(fmt.Sprintf("vllmsim: Add of seq %d in state %v", seq.ID, seq.State))
	}
	if _, dup := s.seqs[seq.ID]; dup {
		panic(fmt.Sprintf("vllmsim: Add of duplicate seq id %d", seq.ID))
	}
	if !s.Fits(seq) {
		panic(fmt.Sprintf("vllmsim: seq %d does not fit: prompt %d + max %d tokens, max model len %d",
			seq.ID, seq.PromptTokens, seq.MaxTokens, s.cfg.MaxModelLen()))
	}
	seq.Generated, seq.Computed, seq.Blocks = 0, 0, 0
	s.seqs[seq.ID] = seq
	s.pushWaiting(seq, false)
}

// Abort removes a waiting or running seq (the client left) and frees its
// blocks. Unknown or already finished IDs are ignored. It reports whether a
// seq was aborted.
func (s *Scheduler) Abort(id SeqID) bool {
	seq, ok := s.seqs[id]
	if !ok {
		return false
	}
	switch seq.State {
	case SeqWaiting:
		s.removeWaiting(seq)
	case SeqRunning:
		s.removeRunning(seq)
		s.free(seq)
	}
	seq.State = SeqAborted
	delete(s.seqs, id)
	s.aborted++
	return true
}

// Get returns the waiting or running seq with that id, or nil.
func (s *Scheduler) Get(id SeqID) *Seq { return s.seqs[id] }

// NumRunning is the number of running seqs.
func (s *Scheduler) NumRunning() int { return len(s.running) }

// NumWaiting is the number of waiting seqs.
func (s *Scheduler) NumWaiting() int { return len(s.pq) + len(s.fifo) }

// HasWork reports whether any seq is waiting or running.
func (s *Scheduler) HasWork() bool { return len(s.seqs) > 0 }

// UsedBlocks is the number of KV blocks held by running seqs.
func (s *Scheduler) UsedBlocks() int { return s.usedBlocks }

// FreeBlocks is KVBlocks - UsedBlocks.
func (s *Scheduler) FreeBlocks() int { return s.cfg.KVBlocks - s.usedBlocks }

// KVUsage is UsedBlocks / KVBlocks, 0..1 (vllm:kv_cache_usage_perc).
func (s *Scheduler) KVUsage() float64 {
	return float64(s.usedBlocks) / float64(s.cfg.KVBlocks)
}

// Steps is the number of Step calls so far.
func (s *Scheduler) Steps() int64 { return s.steps }

// Preemptions is the total number of preemptions (vllm:num_preemptions).
func (s *Scheduler) Preemptions() int64 { return s.preemptions }

// PreemptionsByPriority returns a copy of the preemption counts keyed by the
// victim's priority.
func (s *Scheduler) PreemptionsByPriority() map[int]int64 {
	m := make(map[int]int64, len(s.preemptionsByPrio))
	for k, v := range s.preemptionsByPrio {
		m[k] = v
	}
	return m
}

// Counters returns totals since creation: finished and aborted seqs,
// generated tokens and prefilled tokens (recomputation included).
func (s *Scheduler) Counters() (finished, aborted, generated, prefilled int64) {
	return s.finished, s.aborted, s.generated, s.prefilled
}

// Running returns the running seqs in admission order (a copy of the slice;
// the seqs themselves are shared and must not be modified).
func (s *Scheduler) Running() []*Seq { return append([]*Seq(nil), s.running...) }

// Waiting returns the waiting seqs in the order they would be admitted.
func (s *Scheduler) Waiting() []*Seq {
	if s.cfg.Policy == PolicyFCFS {
		return append([]*Seq(nil), s.fifo...)
	}
	h := append(seqHeap(nil), s.pq...)
	out := make([]*Seq, 0, len(h))
	for len(h) > 0 {
		// Pop without touching heapIdx of the real heap's seqs.
		out = append(out, h[0])
		n := len(h) - 1
		h[0], h[n] = h[n], h[0]
		h = h[:n]
		down(h, 0)
	}
	return out
}

func down(h seqHeap, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && h.Less(r, l) {
			j = r
		}
		if !h.Less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// blocksFor is the number of blocks holding n tokens.
func (s *Scheduler) blocksFor(n int) int { return (n + s.cfg.BlockSize - 1) / s.cfg.BlockSize }

// grow allocates blocks so that seq holds n tokens; false if not enough free.
func (s *Scheduler) grow(seq *Seq, n int) bool {
	need := s.blocksFor(n) - seq.Blocks
	if need <= 0 {
		return true
	}
	if need > s.FreeBlocks() {
		return false
	}
	seq.Blocks += need
	s.usedBlocks += need
	return true
}

func (s *Scheduler) free(seq *Seq) {
	s.usedBlocks -= seq.Blocks
	seq.Blocks = 0
	seq.Computed = 0
}

// Step runs one engine step, as vLLM's schedule() followed by one forward
// pass:
//
//  1. RUNNING loop, in admission order: each running seq needs KV slots for
//     its whole sequence (the token sampled last step is computed now). When
//     a block cannot be allocated, the running seq with the largest
//     (priority, arrival) is preempted ("fcfs": the last admitted), which
//     may be the seq itself, in which case the loop stops.
//  2. WAITING loop, only if nothing was preempted: admit in queue order
//     while a running slot, the blocks for prompt+generated tokens and the
//     token budget allow; stop at the first that does not fit.
//  3. Every scheduled seq generates one token; seqs reaching MaxTokens
//     finish and free their blocks.
func (s *Scheduler) Step() StepResult {
	s.steps++
	res := StepResult{Step: s.steps}
	budget := s.cfg.MaxBatchTokens
	scheduled := make([]*Seq, 0, len(s.running))
	isScheduled := make(map[SeqID]int, len(s.running)) // id → tokens scheduled

	// RUNNING loop (vLLM: while req_index < len(self.running) and token_budget > 0).
	for i := 0; i < len(s.running) && budget > 0; {
		seq := s.running[i]
		n := seq.Tokens() - seq.Computed // 1 in steady decode
		if n > budget {
			// Chunked prefill off: cannot happen for decodes (n == 1).
			break
		}
		ok := true
		for !s.grow(seq, seq.Tokens()) {
			var victim *Seq
			if s.cfg.Policy == PolicyPriority {
				victim = s.running[0]
				for _, r := range s.running[1:] {
					if r.Priority > victim.Priority ||
						(r.Priority == victim.Priority && r.Arrival > victim.Arrival) ||
						(r.Priority == victim.Priority && r.Arrival == victim.Arrival && r.ID > victim.ID) {
						victim = r
					}
				}
				if toks, was := isScheduled[victim.ID]; was {
					budget += toks
					delete(isScheduled, victim.ID)
					scheduled = removeSeq(scheduled, victim)
					i-- // it was before i in s.running
				}
			} else {
				victim = s.running[len(s.running)-1]
			}
			s.preempt(victim)
			res.Preempted = append(res.Preempted, victim.ID)
			if victim == seq {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		budget -= n
		isScheduled[seq.ID] = n
		scheduled = append(scheduled, seq)
		i++
	}

	// WAITING loop, skipped when anything was preempted.
	if len(res.Preempted) == 0 {
		for budget > 0 && s.NumWaiting() > 0 {
			if len(s.running) >= s.cfg.MaxNumSeqs {
				break
			}
			seq := s.peekWaiting()
			n := seq.Tokens() // recompute preemption: prompt + generated again
			if n > budget {
				break
			}
			if !s.grow(seq, n) {
				break
			}
			s.popWaiting()
			seq.State = SeqRunning
			seq.Admissions++
			s.running = append(s.running, seq)
			budget -= n
			isScheduled[seq.ID] = n
			scheduled = append(scheduled, seq)
			res.Admitted = append(res.Admitted, seq.ID)
		}
	}

	// Forward pass: one token per scheduled seq.
	for _, seq := range scheduled {
		n := isScheduled[seq.ID]
		if seq.Computed == 0 {
			res.PrefillTokens += n
			s.prefilled += int64(n)
		}
		seq.Computed = seq.Tokens()
		seq.Generated++
		s.generated++
		res.Emitted = append(res.Emitted, TokenEvent{ID: seq.ID, Index: seq.Generated - 1})
		if seq.Generated >= seq.MaxTokens {
			s.removeRunning(seq)
			s.free(seq)
			seq.State = SeqFinished
			delete(s.seqs, seq.ID)
			s.finished++
			res.Finished = append(res.Finished, seq.ID)
		}
	}

	res.Running = len(s.running)
	res.Waiting = s.NumWaiting()
	res.KVUsage = s.KVUsage()
	return res
}

// preempt frees a running seq and puts it back in the waiting queue
// (recompute preemption: it keeps Generated and Arrival).
func (s *Scheduler) preempt(seq *Seq) {
	s.removeRunning(seq)
	s.free(seq)
	seq.Preemptions++
	s.preemptions++
	s.preemptionsByPrio[seq.Priority]++
	s.pushWaiting(seq, true)
}

func removeSeq(list []*Seq, seq *Seq) []*Seq {
	for i, r := range list {
		if r == seq {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

func (s *Scheduler) removeRunning(seq *Seq) { s.running = removeSeq(s.running, seq) }

// pushWaiting enqueues seq; front puts it at the head of the FIFO ("fcfs"
// prepend of a preempted request). Under "priority" a prepend is a push.
func (s *Scheduler) pushWaiting(seq *Seq, front bool) {
	seq.State = SeqWaiting
	if s.cfg.Policy == PolicyFCFS {
		if front {
			s.fifo = append([]*Seq{seq}, s.fifo...)
		} else {
			s.fifo = append(s.fifo, seq)
		}
		return
	}
	heap.Push(&s.pq, seq)
}

func (s *Scheduler) peekWaiting() *Seq {
	if s.cfg.Policy == PolicyFCFS {
		return s.fifo[0]
	}
	return s.pq[0]
}

func (s *Scheduler) popWaiting() *Seq {
	if s.cfg.Policy == PolicyFCFS {
		seq := s.fifo[0]
		s.fifo[0] = nil
		s.fifo = s.fifo[1:]
		return seq
	}
	return heap.Pop(&s.pq).(*Seq)
}

func (s *Scheduler) removeWaiting(seq *Seq) {
	if s.cfg.Policy == PolicyFCFS {
		s.fifo = removeSeq(s.fifo, seq)
		return
	}
	heap.Remove(&s.pq, seq.heapIdx)
}

// CheckInvariants verifies the scheduler's bookkeeping: used blocks equal
// the sum of the running seqs' blocks and stay within KVBlocks, running
// stays within MaxNumSeqs, waiting seqs hold no blocks, states agree with
// the queues and every running seq holds blocks for its computed tokens.
func (s *Scheduler) CheckInvariants() error {
	if s.usedBlocks < 0 || s.usedBlocks > s.cfg.KVBlocks {
		return fmt.Errorf("used blocks %d outside [0, %d]", s.usedBlocks, s.cfg.KVBlocks)
	}
	if len(s.running) > s.cfg.MaxNumSeqs {
		return fmt.Errorf("%d running > max_num_seqs %d", len(s.running), s.cfg.MaxNumSeqs)
	}
	sum := 0
	for _, r := range s.running {
		if r.State != SeqRunning {
			return fmt.Errorf("seq %d in running list has state %v", r.ID, r.State)
		}
		if r.Blocks < s.blocksFor(r.Computed) {
			return fmt.Errorf("seq %d holds %d blocks for %d computed tokens", r.ID, r.Blocks, r.Computed)
		}
		sum += r.Blocks
	}
	if sum != s.usedBlocks {
		return fmt.Errorf("used blocks %d != sum over running seqs %d", s.usedBlocks, sum)
	}
	waiting := s.fifo
	if s.cfg.Policy == PolicyPriority {
		waiting = s.pq
	}
	for _, w := range waiting {
		if w.State != SeqWaiting || w.Blocks != 0 || w.Computed != 0 {
			return fmt.Errorf("waiting seq %d: state %v, %d blocks, %d computed", w.ID, w.State, w.Blocks, w.Computed)
		}
	}
	if len(waiting)+len(s.running) != len(s.seqs) {
		return fmt.Errorf("%d waiting + %d running != %d known seqs", len(waiting), len(s.running), len(s.seqs))
	}
	for i, q := range s.pq {
		if q.heapIdx != i {
			return fmt.Errorf("heap index of seq %d is %d, want %d", q.ID, q.heapIdx, i)
		}
	}
	return nil
}

// seqHeap is the "priority" waiting queue: a min-heap on
// (Priority, Arrival, ID), as vLLM's Request.__lt__.
type seqHeap []*Seq

func (h seqHeap) Len() int { return len(h) }
func (h seqHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	if a.Arrival != b.Arrival {
		return a.Arrival < b.Arrival
	}
	return a.ID < b.ID
}
func (h seqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *seqHeap) Push(x any) {
	seq := x.(*Seq)
	seq.heapIdx = len(*h)
	*h = append(*h, seq)
}
func (h *seqHeap) Pop() any {
	old := *h
	n := len(old)
	seq := old[n-1]
	old[n-1] = nil
	seq.heapIdx = -1
	*h = old[:n-1]
	return seq
}
