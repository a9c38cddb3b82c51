package gateway

import (
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/sse"
)

// The Responses API (POST /v1/responses) goes through the same admission
// steps, budgets, priorities, routing and accounting as chat; what differs
// is read here:
//
//   - the prompt is "input" plus "instructions"; the output limit is
//     "max_output_tokens", which a budget's hold replaces as it replaces
//     chat's max_completion_tokens;
//   - usage comes as input_tokens / output_tokens /
//     input_tokens_details.cached_tokens: top-level in an answer, in the
//     "response" of the response.completed (or .incomplete, .failed) event
//     of a stream, which engines always send, so the gateway asks for
//     nothing (no stream_options.include_usage) and drops nothing;
//   - the gateway keeps no responses: what needs state in the engine
//     (previous_response_id, conversation, background) is refused, since
//     the engine that stored it is any of the pool's upstreams (and
//     GET /v1/responses/{id} is not proxied), and the engine is told
//     store=false (vLLM's store, when enabled, never evicts);
//   - an answer is not resumable (clientRequest.resumable): its events
//     carry sequence numbers and item ids, and no engine continues a
//     response from a prefilled output, so a borrower on a reclaiming pool
//     stays within the pool's headroom, as a chat with tools does.

// parseResponses reads what the gateway needs of a Responses API body
// whose members rq holds.
func (rq *clientRequest) parseResponses() error {
	rq.responses = true
	rq.prompts, rq.seqs = 1, 1 // one answer: no n, no best_of
	if raw := rq.get("stream_options"); raw != nil && string(raw) != "null" {
		// OpenAI's {"include_obfuscation":…}: forwarded as it is
		if !rq.stream {
			return invalid("stream_options", "stream_options is only allowed when stream is true")
		}
		if raw[0] != '{' {
			return invalid("stream_options", "stream_options must be an object")
		}
	}
	for _, f := range [...]string{"previous_response_id", "conversation"} {
		if !isNull(rq.get(f)) {
			return invalid(f, "%s is not supported: the gateway keeps no responses; send the whole conversation in input", f)
		}
	}
	if v := rq.get("background"); !isNull(v) && string(v) != "false" {
		return invalid("background", "background responses are not supported: the gateway keeps no responses")
	}
	rq.promptBytes = len(rq.get("input")) + len(rq.get("instructions"))
	if raw := rq.get("max_output_tokens"); raw != nil && string(raw) != "null" {
		if rq.maxOutput = positiveInt(raw); rq.maxOutput == 0 {
			rq.badOutput = "max_output_tokens"
		}
	}
	return nil
}

// answerUsage is the usage of a complete JSON answer of endpoint ep.
func answerUsage(ep engine.Endpoint, b []byte) (sse.Usage, bool) {
	if ep == engine.Responses {
		return sse.ParseResponseUsage(b)
	}
	return sse.ParseUsage(b)
}
