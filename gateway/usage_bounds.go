package gateway

import "github.com/go-llmflow/llmflow/engine"

// What the engine may have used is bounded by what the gateway sent it:
// the usage it reports is believed within these bounds only (validUsage).

// promptBound is the most prompt tokens x can be: its prompt bytes (a
// token is at least a byte), at most the model's context per prompt. It
// is what the budget hold counts for the prompt.
func (x *exchange) promptBound() int64 {
	return min(int64(x.rq.promptBytes), x.rt.maxTokens*x.rq.prompts)
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
