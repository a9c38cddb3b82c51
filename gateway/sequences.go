package gateway

import (
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/jsonscan"
)

// maxSequences bounds n × prompts as the gateway counts it (vLLM's own
// cap, VLLM_MAX_N_SEQUENCES, is 16,384 per prompt): far beyond it the
// count only has to stay an int64 for the hold to refuse it.
const maxSequences = 1 << 30

// parseSequences sets how many sequences the engine generates for rq, the
// unit of its output limit (max_tokens bounds each one): n per prompt,
// best_of when larger (vLLM generates best_of and returns n), times the
// prompts of a /v1/completions list of prompts (strings or token-id
// lists; a list of token ids is one prompt). An n or best_of that is not
// a positive integer is named in rq.badSeqs: under a budget the gateway
// could not bound the engine by it, so it is a 400 there, as a bad
// output limit is. Embeddings generate nothing.
func (rq *clientRequest) parseSequences(ep engine.Endpoint) {
	rq.prompts, rq.seqs = 1, 1
	if ep == engine.Embeddings {
		rq.prompts = promptCount(rq.get("input"))
		return
	}
	per := int64(1)
	for _, f := range [...]string{"n", "best_of"} {
		raw := rq.get(f)
		if raw == nil || string(raw) == "null" {
			continue
		}
		v := positiveInt(raw)
		if v == 0 {
			rq.badSeqs = f
			continue
		}
		per = max(per, v)
	}
	if ep == engine.Completions {
		rq.prompts = promptCount(rq.get("prompt"))
	}
	rq.seqs = min(per*rq.prompts, maxSequences) // per ≤ 2^40, prompts < 2^22 per MiB
}

// promptCount is the number of prompts in a /v1/completions "prompt" (or
// an embeddings "input"): the elements of a list of strings or of
// token-id lists, else 1.
func promptCount(raw []byte) int64 {
	i := jsonscan.SkipWS(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return 1
	}
	i = jsonscan.SkipWS(raw, i+1)
	if i >= len(raw) || (raw[i] != '"' && raw[i] != '[') {
		return 1 // empty, or token ids: one prompt
	}
	n := int64(0)
	for i < len(raw) {
		e := jsonscan.SkipValue(raw, i)
		if e < 0 {
			return max(n, 1)
		}
		n++
		i = jsonscan.SkipWS(raw, e)
		if i >= len(raw) || raw[i] != ',' {
			break
		}
		i = jsonscan.SkipWS(raw, i+1)
	}
	return max(n, 1)
}
