package gateway

import (
	"encoding/json"

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
//   - tools the engine runs itself (web search, code interpreter, MCP)
//     are refused: their results grow the prompt beyond what the gateway
//     can bound (clientTools); function and custom tools are the client's;
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
	if !clientTools(rq.get("tools")) {
		return invalid("tools", "only function and custom tools are supported: the gateway cannot bound what tools the engine runs itself use")
	}
	rq.promptBytes = len(rq.get("input")) + len(rq.get("instructions"))
	if raw := rq.get("max_output_tokens"); raw != nil && string(raw) != "null" {
		if rq.maxOutput = positiveInt(raw); rq.maxOutput == 0 {
			rq.badOutput = "max_output_tokens"
		}
	}
	return nil
}

// clientTools reports whether a Responses "tools" value (absent, null or
// a list) holds only tools the client runs: "function" and "custom". The
// engine runs the others itself (vLLM's tool server: web search, code
// interpreter, MCP), turn after turn: the prompt then grows by what they
// return, beyond any bound the gateway could hold a budget for or believe
// the usage within.
func clientTools(raw []byte) bool {
	if isNull(raw) {
		return true
	}
	var tools []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &tools) != nil {
		return false
	}
	for _, t := range tools {
		if t.Type != "function" && t.Type != "custom" {
			return false
		}
	}
	return true
}

// answerUsage is the usage of a complete JSON answer of endpoint ep.
func answerUsage(ep engine.Endpoint, b []byte) (sse.Usage, bool) {
	if ep == engine.Responses {
		return sse.ParseResponseUsage(b)
	}
	return sse.ParseUsage(b)
}

// responsesMessages renders a Responses body's instructions and input as
// the chat messages an engine's tokenizer counts (countPrompt), as vLLM
// builds them: the instructions as a system message, a string input as a
// user message, message items with their role and their text parts
// (input_text, output_text) as text parts. It is nil when the input holds
// anything else (images, files, tool calls, reasoning): the prompt is then
// estimated.
func (rq *clientRequest) responsesMessages() []byte {
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type message struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	var msgs []message
	if raw := rq.get("instructions"); !isNull(raw) {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		msgs = append(msgs, message{Role: "system", Content: s})
	}
	raw := rq.get("input")
	if isNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		msgs = append(msgs, message{Role: "user", Content: s})
	} else {
		var items []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for _, it := range items {
			if (it.Type != "" && it.Type != "message") || it.Role == "" {
				return nil
			}
			if json.Unmarshal(it.Content, &s) == nil {
				msgs = append(msgs, message{Role: it.Role, Content: s})
				continue
			}
			var parts []part
			if json.Unmarshal(it.Content, &parts) != nil {
				return nil
			}
			for i, p := range parts {
				if p.Type != "input_text" && p.Type != "output_text" {
					return nil
				}
				parts[i].Type = "text"
			}
			msgs = append(msgs, message{Role: it.Role, Content: parts})
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	b, _ := json.Marshal(msgs) // strings and parts always marshal
	return b
}
