// Package engine describes what the inference engines of a pool
// understand: how the fair-share priority reaches them, which client body
// members must never reach them, and which OpenAI endpoints they serve.
// The configuration picks one Descriptor per pool; the gateway reads it and
// nowhere else branches on what kind of engine is behind a pool.
//
// It is pure: standard library only. The engine facts each descriptor
// encodes are stated where they are used (Stripped, For).
package engine

// Endpoint is one of the OpenAI routes the gateway proxies.
type Endpoint uint8

// The proxied endpoints, in the order of their paths in Paths.
const (
	ChatCompletions Endpoint = iota
	Completions
	Embeddings
	Responses    // the Responses API (vLLM and llama-server serve it)
	NumEndpoints // how many there are
)

// Path is the endpoint's path, the same on the gateway and the engine.
func (e Endpoint) Path() string {
	switch e {
	case ChatCompletions:
		return "/v1/chat/completions"
	case Completions:
		return "/v1/completions"
	case Embeddings:
		return "/v1/embeddings"
	case Responses:
		return "/v1/responses"
	}
	return ""
}

// Scheduling is how an engine orders the requests it runs.
type Scheduling uint8

const (
	// Priority engines (vLLM --scheduling-policy priority) run the requests
	// with the lowest priority value first and preempt the others: the
	// gateway sends each request's fair-share priority.
	Priority Scheduling = iota
	// GatewayQueue engines have no priority scheduler (llama-server, vLLM
	// in FCFS mode): the gateway keeps at most the pool's capacity in
	// flight and queues the rest in (priority, arrival) order.
	GatewayQueue
	// FCFS sends every request as it comes, with no priority anywhere (the
	// control in experiments).
	FCFS
)

// Descriptor is what one pool's engines understand.
type Descriptor struct {
	Name       string // for logs and listings: "vllm", "llama-server", "openai-compatible"
	Scheduling Scheduling
	// Kind is the engine kind of the configuration: "vllm", "sglang",
	// "llama-server" or "openai".
	Kind string
	// PriorityHeader is the request header the priority is sent in ("" =
	// none); PriorityBody sends it as the body's "priority" member. Only
	// Priority engines get either.
	PriorityHeader string
	PriorityBody   bool
	// PriorityHighFirst is true for an engine that runs the largest
	// priority value first (SGLang's default): the gateway sends Wire(p),
	// which reverses its order.
	PriorityHighFirst bool
	// Strip lists the top-level client body members never sent to the
	// engine: they would let a client choose its own priority, request id,
	// session, KV transfer, prefix-cache partition or llama-server slot.
	// The gateway sets "model", "stream_options", "cache_salt" and
	// "priority" itself.
	Strip []string
	// Endpoints has bit e set when the engine serves Endpoint e.
	Endpoints uint8

	// Resumes is true when the engine continues text it is given: a chat
	// request whose final message is the assistant's answer so far, with
	// continue_final_message true and add_generation_prompt false, and a
	// completion whose prompt ends with it. The gateway can then take a
	// borrower's slot back and resume its answer later (Reclaim).
	Resumes bool
	// ContinuousUsage is true when the engine reports the cumulative usage
	// in every chunk of a stream when asked (vLLM's
	// stream_options.continuous_usage_stats): the gateway knows how many
	// tokens a stream it cut had generated.
	ContinuousUsage bool
	// PreemptsForPriority is true when the engine itself stops a running
	// request for a waiting one of higher priority when every slot is busy.
	// vLLM V1 does not (its scheduler preempts only when KV blocks run out;
	// vLLM issue #40004): the gateway does it for it (ReclaimPreempt).
	PreemptsForPriority bool

	// Metrics names the engine's Prometheus series the gateway reads
	// (capacity, doctor); empty names: the engine has none.
	Metrics Metrics
	// Tokenize is how the engine counts a prompt's tokens (TokenizeNone:
	// it cannot be asked).
	Tokenize Tokenizer
}

// Reclaim is how a pool gives an organisation the slots of its reservation
// back at once when other organisations borrow them all.
type Reclaim uint8

const (
	// ReclaimNone leaves it to the engine: on an engine that does not
	// preempt for priority, a returning owner waits until borrowers finish.
	ReclaimNone Reclaim = iota
	// ReclaimPreempt takes the slot of the most junior borrower that can
	// be resumed (its engine request cancelled, resumed later from the
	// text it had generated); borrowers that cannot be resumed must leave
	// the headroom free.
	ReclaimPreempt
	// ReclaimHoldback lets borrowers fill only capacity − headroom slots:
	// an owner finds the headroom free at once, and waits for borrowers
	// beyond it.
	ReclaimHoldback
)

// ParseReclaim returns the Reclaim named s ("none", "preempt",
// "holdback").
func ParseReclaim(s string) (Reclaim, bool) {
	for r := ReclaimNone; r <= ReclaimHoldback; r++ {
		if r.String() == s {
			return r, true
		}
	}
	return ReclaimNone, false
}

// String is the configuration's name of r.
func (r Reclaim) String() string {
	switch r {
	case ReclaimPreempt:
		return "preempt"
	case ReclaimHoldback:
		return "holdback"
	}
	return "none"
}

// DefaultReclaim is a pool's reclaim when its configuration names none:
// none where the engine preempts for priority itself, preempt where it
// resumes, none otherwise (an engine whose resume is unknown).
func (d *Descriptor) DefaultReclaim() Reclaim {
	if d.Resumes && !d.PreemptsForPriority {
		return ReclaimPreempt
	}
	return ReclaimNone
}

// Stripped are the client body members no engine gets. vLLM accepts
// unknown members and acts on these: priority (a client would jump the
// queue or pick preemption victims), request_id (becomes the engine's
// request id, so logs and tracing could be spoofed), kv_transfer_params
// and ec_transfer_params (disaggregated-serving control), vllm_xargs
// (free-form extension arguments, session_id among them), session_id
// (session affinity) and cache_salt (another tenant's prefix cache; the
// gateway sets its own). llama-server reads id_slot on its OpenAI routes
// too (it pins the request to a slot). extra_body is an SDK-side wrapper
// that must not carry any of them.
var Stripped = []string{
	"priority",
	"extra_body",
	"request_id",
	"kv_transfer_params",
	"ec_transfer_params",
	"vllm_xargs",
	"session_id",
	"id_slot",
	"cache_salt",
}

// allEndpoints serves chat completions, completions, embeddings and
// responses.
const allEndpoints = 1<<ChatCompletions | 1<<Completions | 1<<Embeddings | 1<<Responses

// VLLMPriorityHeader is the header vLLM reads a request's priority from.
const VLLMPriorityHeader = "X-Vllm-Priority"

// For returns the descriptor of a pool configured with scheduler
// ("priority", "gateway" or "fcfs") and priorityVia ("header", "body" or
// "both", for "priority" only) and no engine kind: the kind the scheduler
// implies (vLLM, llama-server, any OpenAI-compatible engine). ok is false
// for an unknown scheduler or priorityVia; the configuration checks both
// before.
func For(scheduler, priorityVia string) (d Descriptor, ok bool) {
	kind := map[string]string{"priority": "vllm", "gateway": "llama-server", "fcfs": "openai"}[scheduler]
	d, err := New(kind, Options{Scheduler: scheduler, PriorityVia: priorityVia})
	return d, err == nil
}

// Serves reports whether the engine serves e.
func (d *Descriptor) Serves(e Endpoint) bool { return e < NumEndpoints && d.Endpoints&(1<<e) != 0 }

// SendsPriority reports whether the engine receives the priority, in a
// header or in the body.
func (d *Descriptor) SendsPriority() bool { return d.PriorityHeader != "" || d.PriorityBody }

// Strips reports whether the client body member name is never sent.
func (d *Descriptor) Strips(name []byte) bool {
	for _, s := range d.Strip {
		if string(name) == s {
			return true
		}
	}
	return false
}

// String is the configuration's name of the scheduling: "priority",
// "gateway" or "fcfs".
func (s Scheduling) String() string {
	switch s {
	case Priority:
		return "priority"
	case GatewayQueue:
		return "gateway"
	case FCFS:
		return "fcfs"
	}
	return "unknown"
}
