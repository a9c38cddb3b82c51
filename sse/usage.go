package sse

import "github.com/go-llmflow/llmflow/internal/jsonscan"

// Usage is the token usage of one request, as the engine reported it.
// Fields the engine left out are 0; TotalTokens is not computed.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64 // absent for embeddings
	TotalTokens      int64
	// CachedTokens is prompt_tokens_details.cached_tokens. vLLM omits it
	// unless it is non-zero (and only with --enable-prompt-tokens-details);
	// llama-server always sends it. Absent means 0.
	CachedTokens int64
	// Malformed is set when a token count was present but neither null nor
	// a JSON integer that fits an int64 (a float, a string, an exponent,
	// an object…); that count reads as 0. Callers should not believe such
	// a usage.
	Malformed bool
	// NoPrompt and NoCompletion are set when that count is absent or
	// null: not reported, to be estimated (never taken as 0).
	NoPrompt, NoCompletion bool
}

// ParseUsage extracts the top-level "usage" object of a JSON response body
// (a non-streaming chat, completion or embeddings answer). ok is false when
// the body is not an object or has no "usage" object ("usage":null
// included). If "usage" appears several times the last one wins. Token
// counts that are not JSON integers (or overflow int64) count as 0 and set
// Usage.Malformed.
//
// It is lenient, like the stream path: the body is walked, not validated,
// since the gateway forwards it as it is either way. A body that is not
// well-formed JSON may still yield the usage the walk finds (malformed
// members before it make it fail); on valid JSON it agrees with
// encoding/json.
func ParseUsage(body []byte) (u Usage, ok bool) {
	it, ok := jsonscan.NewObject(body)
	if !ok {
		return Usage{}, false
	}
	var val []byte
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		if string(k) == "usage" {
			val = v
		}
	}
	if it.Bad() || val == nil {
		return Usage{}, false
	}
	return parseUsageObject(val)
}

// usageNames are the member names of one API's usage object.
type usageNames struct{ prompt, completion, details string }

var (
	chatUsage      = usageNames{"prompt_tokens", "completion_tokens", "prompt_tokens_details"}
	responsesUsage = usageNames{"input_tokens", "output_tokens", "input_tokens_details"}
)

// parseUsageObject decodes a chat or completions usage object; ok is false
// if v is not an object (null included) or is malformed.
func parseUsageObject(v []byte) (u Usage, ok bool) { return parseUsageNamed(v, chatUsage) }

// parseUsageNamed decodes a usage object whose counts have the names n.
func parseUsageNamed(v []byte, n usageNames) (u Usage, ok bool) {
	it, ok := jsonscan.NewObject(v)
	if !ok {
		return Usage{}, false
	}
	// Per count, as its value: the last of duplicate members wins.
	var badP, badC, badT, badK bool
	u.NoPrompt, u.NoCompletion = true, true
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch string(k) {
		case n.prompt:
			u.PromptTokens = parseCount(v, &badP)
			u.NoPrompt = string(v) == "null"
		case n.completion:
			u.CompletionTokens = parseCount(v, &badC)
			u.NoCompletion = string(v) == "null"
		case "total_tokens":
			u.TotalTokens = parseCount(v, &badT)
		case n.details:
			u.CachedTokens, badK = 0, false
			if d, ok := jsonscan.NewObject(v); ok {
				for {
					k, v, more := d.Next()
					if !more {
						break
					}
					if string(k) == "cached_tokens" {
						u.CachedTokens = parseCount(v, &badK)
					}
				}
			}
		}
	}
	if it.Bad() {
		return Usage{}, false
	}
	u.Malformed = badP || badC || badT || badK
	return u, true
}

// parseCount decodes a token count: a JSON integer that fits an int64, or
// null (0). Anything else is 0; *malformed says which it was.
func parseCount(v []byte, malformed *bool) int64 {
	n := jsonscan.ParseInt(v)
	*malformed = n == 0 && string(v) != "0" && string(v) != "-0" && string(v) != "null"
	return n
}
