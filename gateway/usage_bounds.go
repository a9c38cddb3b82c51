package gateway

import (
	"io"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/sse"
)

// What the engine may have used is bounded by what the gateway sent it:
// the usage it reports is believed within these bounds only (validUsage).

// promptBound is the most prompt tokens x can be: its prompt bytes (a
// token is at least a byte; a chat template's own tokens allowed for),
// at most the model's context per prompt. It is what the budget hold
// counts for the prompt.
func (x *exchange) promptBound() int64 {
	b := int64(x.rq.promptBytes)
	if x.ep == engine.ChatCompletions || x.ep == engine.Responses { // instructions and input go through the chat template
		b += chatTemplateTokens
	}
	return min(b, x.rt.maxTokens*x.rq.prompts)
}

// outputBound is the most output tokens each of x's sequences can be:
// the limit the gateway sent (a budget's), else the client's, else the
// model's context; 0 for an embedding.
func (x *exchange) outputBound() int64 {
	switch {
	case x.ep == engine.Embeddings:
		return 0
	case x.outputLimit > 0:
		return x.outputLimit
	case x.rq.maxOutput > 0:
		return min(x.rq.maxOutput, x.rt.maxTokens)
	}
	return x.rt.maxTokens
}

// completionBound is the most completion tokens x can be: the output
// bound of each of its sequences.
func (x *exchange) completionBound() int64 { return x.outputBound() * x.rq.seqs }

// chatTemplateTokens is what a chat template may add to the messages'
// bytes (the roles' markers, a default system prompt): part of the
// prompt's bound, held by budgets.
const chatTemplateTokens = 32

// promptEstimate is the gateway's estimate of x's prompt tokens: its
// bytes / 4.
func (x *exchange) promptEstimate() int64 { return int64(x.rq.promptBytes+3) / 4 }

// maxDeltas is how many chunks with choices x's stream may carry: a role
// chunk, a token each and a finish chunk per sequence (vLLM may put
// several tokens in a chunk, never fewer than one); 0 = no limit.
func (x *exchange) maxDeltas() int {
	if n := x.rq.seqs * (x.outputBound() + 2); n < 1<<31 {
		return int(n)
	}
	return 0
}

// bodyTokens estimates the completion tokens of a whole answer b: its
// bytes / 4 (a token is at least a byte of text, and b holds more than
// the text).
func bodyTokens(b []byte) int64 { return int64(len(b)+3) / 4 }

// takeUsage sets x's record's usage from what the engine reported, when
// it can be believed (validUsage); a count it did not report (absent or
// null) is estimated, never free: the prompt by its bytes, the completion
// by est (the deltas forwarded, a whole answer's size), flagged no_usage.
// Usage that cannot be believed is estimated whole, flagged
// invalid_usage. It reports whether the engine's usage was taken.
func (g *Gateway) takeUsage(x *exchange, u sse.Usage, est int64) bool {
	if u.NoPrompt {
		u.PromptTokens, u.CachedTokens = x.promptEstimate(), 0
	}
	if u.NoCompletion && x.ep != engine.Embeddings {
		u.CompletionTokens = min(est, x.completionBound())
	}
	if !x.validUsage(u) {
		g.estimate(x, est, llmflow.EstimateInvalidUsage)
		g.logInvalidUsage(x, u)
		return false
	}
	x.setUsage(u)
	if u.NoPrompt || (u.NoCompletion && x.ep != engine.Embeddings) {
		x.rec.Estimated, x.rec.EstimateReason = true, llmflow.EstimateNoUsage
	}
	return true
}

// cutStream ends the stream of an engine that generated past the output
// limit it was given (sse.Options.MaxDeltas): an error event instead of
// what followed, and no [DONE]; closing the upstream body aborts the
// request in the engine.
func (g *Gateway) cutStream(fw *flushWriter, x *exchange) {
	g.log.Warn("engine generated past its output limit: stream cut", "request_id", x.id, "upstream", x.up.name,
		"max_tokens", x.outputBound(), "sequences", x.rq.seqs)
	if x.rq.responses { // the Responses API's error event
		io.WriteString(fw, "event: error\ndata: {\"type\":\"error\",\"code\":\"upstream_error\",\"message\":\"the engine generated more than the output limit; the answer was cut\",\"param\":null}\n\n")
	} else {
		io.WriteString(fw, "data: {\"error\":{\"message\":\"the engine generated more than the output limit; the answer was cut\",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_error\"}}\n\n")
	}
	fw.Flush()
}
