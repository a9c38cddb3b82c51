package engine

import (
	"errors"
	"fmt"
)

// Metrics names an engine's Prometheus series: the requests running and
// waiting, the KV cache in use (0..1) and the preemptions counter.
type Metrics struct {
	Running, Waiting, KVUsage, Preemptions string
}

// Tokenizer is how an engine's tokenizer endpoint is asked.
type Tokenizer uint8

const (
	// TokenizeNone: the engine has no tokenizer endpoint the gateway knows.
	TokenizeNone Tokenizer = iota
	// TokenizeVLLM: POST /tokenize with {"model", "messages"} (the chat
	// template applied) or {"model", "prompt"}, answering {"count": n, …}.
	TokenizeVLLM
	// TokenizeLlamaServer: POST /tokenize with {"content": text},
	// answering {"tokens": […]}; a chat is rendered by POST /apply-template
	// first.
	TokenizeLlamaServer
)

// Kinds are the engine kinds a pool may name, in the order the
// configuration lists them.
var Kinds = []string{"vllm", "sglang", "llama-server", "openai"}

// Options are a pool's settings of its engine kind; "" takes the kind's
// default.
type Options struct {
	// Scheduler is "priority" (the engine orders by the priority the
	// gateway sends), "gateway" (the gateway queues: the engine has no
	// priority scheduler, or it is off) or "fcfs" (no priority anywhere).
	Scheduler string
	// PriorityVia is "header", "body" or "both": how the priority travels,
	// for kinds that offer a choice (vLLM).
	PriorityVia string
	// PriorityOrder is "low_first" or "high_first": which priority values
	// the engine runs first (SGLang either, by its
	// --schedule-low-priority-values-first flag).
	PriorityOrder string
}

// New returns the descriptor of an engine of kind with o. Its error says
// which setting a kind does not take, for the configuration to place.
//
// What each kind is (../shared/reference/engines.md):
//   - vllm: --scheduling-policy priority orders by the lowest value, read
//     from X-Vllm-Priority (mid-2026 on) or the body's priority; no
//     preemption for priority at max_num_seqs (issue #40004); resumes a
//     final assistant message (continue_final_message); continuous usage
//     stats; vllm:* metrics; /tokenize.
//   - sglang: --enable-priority-scheduling orders by the highest body
//     priority unless --schedule-low-priority-values-first; resumes
//     (continue_final_message); sglang:* metrics.
//   - llama-server: no priority scheduler (the gateway queues); slots;
//     resumes (assistant prefill, continue_final_message); llamacpp:*
//     metrics; /tokenize.
//   - openai: any OpenAI-compatible engine: nothing is assumed.
func New(kind string, o Options) (Descriptor, error) {
	d := Descriptor{Kind: kind, Strip: Stripped, Endpoints: allEndpoints}
	sched := o.Scheduler
	switch kind {
	case "vllm":
		d.Name = "vllm"
		d.Resumes, d.ContinuousUsage = true, true
		d.Metrics = Metrics{Running: "vllm:num_requests_running", Waiting: "vllm:num_requests_waiting",
			KVUsage: "vllm:kv_cache_usage_perc", Preemptions: "vllm:num_preemptions_total"}
		d.Tokenize = TokenizeVLLM
		if sched == "" {
			sched = "priority"
		}
	case "sglang":
		d.Name = "sglang"
		d.Resumes = true
		d.PriorityHighFirst = true
		d.Metrics = Metrics{Running: "sglang:num_running_reqs", Waiting: "sglang:num_queue_reqs", KVUsage: "sglang:token_usage"}
		if sched == "" {
			sched = "priority"
		}
	case "llama-server":
		d.Name = "llama-server"
		d.Resumes = true
		d.Metrics = Metrics{Running: "llamacpp:requests_processing", Waiting: "llamacpp:requests_deferred"}
		d.Tokenize = TokenizeLlamaServer
		if sched == "" {
			sched = "gateway"
		}
		if sched == "priority" {
			return Descriptor{}, errors.New(`llama-server has no priority scheduler: use scheduler "gateway" (the default) or "fcfs"`)
		}
	case "openai":
		d.Name = "openai-compatible"
		if sched == "" {
			sched = "fcfs"
		}
		if sched == "priority" {
			return Descriptor{}, errors.New(`an "openai" engine is not known to order by priority: use scheduler "gateway" or "fcfs" (the default), or name its kind`)
		}
	default:
		return Descriptor{}, fmt.Errorf("unknown engine kind %q", kind)
	}
	switch sched {
	case "priority":
		d.Scheduling = Priority
	case "gateway":
		d.Scheduling = GatewayQueue
	case "fcfs":
		d.Scheduling = FCFS
	default:
		return Descriptor{}, fmt.Errorf("unknown scheduler %q", sched)
	}
	if o.PriorityVia != "" && (d.Scheduling != Priority || kind != "vllm") && o.PriorityVia != "both" {
		return Descriptor{}, fmt.Errorf("priority_via is a setting of vLLM's priority scheduler, not of %s with scheduler %q", d.Name, sched)
	}
	if o.PriorityOrder != "" && kind != "sglang" {
		return Descriptor{}, fmt.Errorf("priority_order is a setting of SGLang, not of %s", d.Name)
	}
	if d.Scheduling != Priority {
		d.PriorityHighFirst = false
		return d, nil
	}
	switch kind {
	case "vllm":
		switch o.PriorityVia {
		case "header":
			d.PriorityHeader = VLLMPriorityHeader
		case "body":
			d.PriorityBody = true
		case "both", "":
			d.PriorityHeader, d.PriorityBody = VLLMPriorityHeader, true
		default:
			return Descriptor{}, fmt.Errorf("unknown priority_via %q", o.PriorityVia)
		}
	case "sglang":
		d.PriorityBody = true
		switch o.PriorityOrder {
		case "high_first", "":
		case "low_first":
			d.PriorityHighFirst = false
		default:
			return Descriptor{}, fmt.Errorf("unknown priority_order %q", o.PriorityOrder)
		}
	}
	return d, nil
}

// WirePriorityMax is the value Wire reverses the gateway's priorities
// from, for engines that run the largest value first: every priority the
// gateway gives (0 to fairshare's PriorityUnknown + 1) stays positive.
const WirePriorityMax = 127

// Wire is the priority value sent to the engine for the gateway's
// priority p (lower runs first): p itself, or WirePriorityMax − p for an
// engine that runs the largest value first.
func (d *Descriptor) Wire(p int) int {
	if d.PriorityHighFirst {
		return WirePriorityMax - p
	}
	return p
}
