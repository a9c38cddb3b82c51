package gateway

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/internal/jsonscan"
)

// Reclaim (pool { reclaim = "preempt" }): vLLM V1 never stops a running
// request for a waiting one of higher priority when every slot is busy, so
// an organisation returning to its reservation would wait for the requests
// borrowing it to finish. The gateway does what Slurm's PreemptMode=REQUEUE
// does for jobs: when a request within its reservation finds no slot, it
// takes one from the most junior borrower running (reclaimer.pick),
// cancelling that borrower's engine request; the borrower waits for a slot
// again in the pool's queue, ahead of later borrowers of its priority, and
// resumes from the text it had generated (resume.go). Its client sees a
// pause, never an error.

// errPreempted is the cause with which the gateway cancels the engine
// request of a borrower whose slot it takes back.
var errPreempted = errors.New("slot taken back for a request within its reservation")

// reclaimer is a pool's register of the borrowers it may preempt: those
// running in the engine now whose answer the gateway can resume.
type reclaimer struct {
	mu      sync.Mutex
	running map[*exchange]struct{}
}

func newReclaimer() *reclaimer { return &reclaimer{running: make(map[*exchange]struct{})} }

// add registers x, about to be sent to the engine, as a possible victim.
func (r *reclaimer) add(x *exchange) {
	r.mu.Lock()
	x.picked.Store(false)
	r.running[x] = struct{}{}
	r.mu.Unlock()
}

// remove takes x out of the register; picked is true when x was picked
// (its engine request is being cancelled, or was, for errPreempted).
func (r *reclaimer) remove(x *exchange) (picked bool) {
	r.mu.Lock()
	delete(r.running, x)
	picked = x.picked.Load()
	r.mu.Unlock()
	return picked
}

// pin keeps x from ever being picked from now on (its answer took a turn
// the gateway cannot resume: tool calls, reasoning); false when it was
// picked already.
func (r *reclaimer) pin(x *exchange) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, x)
	return !x.picked.Load()
}

// pick preempts, for a request of org at priority prio, the most junior
// borrower it may take a slot from (victimFor), and reports whether there
// was one. The victim's engine request is cancelled with errPreempted; it
// gives its slot back (release with victim set) once its relay has seen
// that.
func (r *reclaimer) pick(org string, prio int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v *exchange
	for x := range r.running {
		if victimFor(prio, org, x.priority, x.org) && (v == nil || junior(x, v)) {
			v = x
		}
	}
	if v == nil {
		return false
	}
	delete(r.running, v)
	v.picked.Store(true)
	v.preempt(errPreempted)
	return true
}

// victimFor reports whether a request of org at priority prio may take the
// slot of one of vorg at vprio: one within its organisation's reservation
// from a borrower from another organisation; one within its own account's
// reservation from a request of its organisation borrowing from a sibling
// account. Never from a request within its reservation.
func victimFor(prio int, org string, vprio int, vorg string) bool {
	switch {
	case vprio >= fairshare.PriorityBorrowBase:
		return prio < fairshare.PriorityBorrowBase
	case vprio >= fairshare.PriorityBandBase:
		return prio < fairshare.PriorityBandBase && vorg == org
	}
	return false
}

// junior reports whether a goes before b as a victim: Fair Tree order (the
// larger priority value, the lower rank), then the later arrival (the
// least work lost).
func junior(a, b *exchange) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.arrival > b.arrival
}

// queueKeyOf is x's key in its pool's queue; held when, borrowing, x must
// leave the pool's headroom free.
func (x *exchange) queueKeyOf() queueKey {
	pl := x.rt.pool
	held := pl.reclaim == engine.ReclaimHoldback || (pl.reclaim == engine.ReclaimPreempt && !x.resumable())
	return queueKey{org: x.org, team: x.key.Team, project: x.key.Project, owner: x.key.Owner, class: x.rt.class, held: held}
}

// reclaimOnWait is the queue's beforeWait part for a request of a
// "gateway" pool about to wait: within its organisation's reservation, and
// with more such requests waiting than slots being taken back, it takes
// one from a borrower. Called with the queue locked.
func (g *Gateway) reclaimOnWait(x *exchange, prio int) {
	pl := x.rt.pool
	if pl.reclaim != engine.ReclaimPreempt || prio >= fairshare.PriorityBorrowBase || pl.queue.shortOfSlots(true) <= 0 {
		return
	}
	if pl.victims.pick(x.org, prio) {
		pl.queue.reclaiming()
		g.m.preemptions.WithLabelValues(pl.name).Inc()
	}
}

// admitSlot counts the request in its pool's queue when the pool reclaims
// (reclaim = "preempt" or "holdback") and its engines queue by priority
// themselves: a request within its organisation's reservation takes a slot
// at once, and one from a borrower when the engine has none for it; a
// borrower waits for a slot in the gateway, within the capacity (less the
// headroom when it must leave it), so that the engine never holds a
// borrower back for it.
func (g *Gateway) admitSlot(ctx context.Context, x *exchange) error {
	pl := x.rt.pool
	if pl.queue == nil || pl.engine.Scheduling == engine.GatewayQueue {
		return nil // no reclaim, or the queue step did it
	}
	if x.priority < fairshare.PriorityBorrowBase {
		var pick func() bool
		if pl.reclaim == engine.ReclaimPreempt {
			pick = func() bool { return pl.victims.pick(x.org, x.priority) }
		}
		if pl.queue.takeReclaiming(&x.arrival, pick) {
			g.m.preemptions.WithLabelValues(pl.name).Inc()
		}
		x.queued, x.top = true, true
		return nil
	}
	if err := pl.queue.acquireOr(ctx, x.queueKeyOf(), g.now, nil, &x.arrival); err != nil {
		return err
	}
	x.queued = true
	return nil
}

// resumable reports whether the gateway can stop rq's engine request and
// resume it faithfully on ep: one answer (no n or best_of above 1), plain
// text (no tools, structured output, log probabilities, echo or suffix), a
// chat whose final message is not already an answer being continued, or a
// completion of one string prompt. The value of each member is looked at
// without decoding the request.
func (rq *clientRequest) resumable(ep engine.Endpoint) bool {
	switch ep {
	case engine.ChatCompletions:
		if !lastRoleNot(rq.get("messages"), "assistant") {
			return false
		}
	case engine.Completions:
		p := rq.get("prompt")
		if len(p) == 0 || p[0] != '"' {
			return false
		}
	default:
		return false
	}
	for _, m := range rq.members {
		v := m.val
		switch string(m.name) {
		case "n", "best_of":
			if !isNull(v) && string(v) != "1" {
				return false
			}
		case "logprobs", "echo", "use_beam_search", "continue_final_message":
			if !isNull(v) && string(v) != "false" {
				return false
			}
		case "add_generation_prompt":
			if !isNull(v) && string(v) != "true" {
				return false
			}
		case "top_logprobs", "prompt_logprobs", "tools", "functions", "tool_choice", "function_call",
			"suffix", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
			"return_tokens_as_token_ids", "logits_processors":
			if !isNull(v) && string(v) != "[]" {
				return false
			}
		case "response_format":
			if !isNull(v) && !responseFormatText(v) {
				return false
			}
		}
	}
	return true
}

func isNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }

// responseFormatText reports whether v is {"type":"text"}.
func responseFormatText(v []byte) bool {
	s, e, ok := jsonscan.Member(v, "type")
	return ok && string(v[s:e]) == `"text"`
}

// lastRoleNot reports whether arr is a non-empty JSON array of objects
// whose last element's "role" is not role.
func lastRoleNot(arr []byte, role string) bool {
	if len(arr) == 0 || arr[0] != '[' {
		return false
	}
	var last []byte
	for i := jsonscan.SkipWS(arr, 1); i < len(arr) && arr[i] != ']'; {
		e := jsonscan.SkipValue(arr, i)
		if e <= i {
			return false
		}
		last = arr[i:e]
		i = jsonscan.SkipWS(arr, e)
		if i < len(arr) && arr[i] == ',' {
			i = jsonscan.SkipWS(arr, i+1)
		}
	}
	if last == nil {
		return false
	}
	s, e, ok := jsonscan.Member(last, "role")
	if !ok {
		return false
	}
	return !bytes.Equal(last[s:e], []byte(`"`+role+`"`))
}

// shedder is a pool's queue's shed under reclaim = "preempt": it takes a
// slot back from the most junior borrower from another organisation
// running here, when the borrowers' room shrank below what they hold (an
// owner arrived on another replica).
func (g *Gateway) shedder(pl *pool) func() bool {
	return func() bool {
		if !pl.victims.pick("", 0) {
			return false
		}
		g.m.preemptions.WithLabelValues(pl.name).Inc()
		return true
	}
}

// resumability caches whether a request can be resumed.
type resumability uint8

const (
	resumeUnknown resumability = iota
	resumeNo
	resumeYes
)

// resumable reports whether x is on a pool that preempts and has a shape
// the gateway can resume; asked only for the requests it matters to (a
// borrower, a request waiting in a gateway queue), so that a request
// within its reservation never scans its body for it.
func (x *exchange) resumable() bool {
	if x.resume == resumeUnknown {
		x.resume = resumeNo
		if x.rt.pool.reclaim == engine.ReclaimPreempt && x.rq.resumable(x.ep) {
			x.resume = resumeYes
		}
	}
	return x.resume == resumeYes
}
