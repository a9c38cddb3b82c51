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
}

// ParseUsage extracts the top-level "usage" object of a JSON response body
// (a non-streaming chat, completion or embeddings answer). ok is false when
// the body is not an object or has no "usage" object ("usage":null
// included). If "usage" appears several times the last one wins. Token
// counts that are not JSON integers (or overflow int64) count as 0.
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

// parseUsageObject decodes a usage object; ok is false if v is not an
// object (null included) or is malformed.
func parseUsageObject(v []byte) (u Usage, ok bool) {
	it, ok := jsonscan.NewObject(v)
	if !ok {
		return Usage{}, false
	}
	for {
		k, v, more := it.Next()
		if !more {
			break
		}
		switch string(k) {
		case "prompt_tokens":
			u.PromptTokens = jsonscan.ParseInt(v)
		case "completion_tokens":
			u.CompletionTokens = jsonscan.ParseInt(v)
		case "total_tokens":
			u.TotalTokens = jsonscan.ParseInt(v)
		case "prompt_tokens_details":
			u.CachedTokens = 0
			if d, ok := jsonscan.NewObject(v); ok {
				for {
					k, v, more := d.Next()
					if !more {
						break
					}
					if string(k) == "cached_tokens" {
						u.CachedTokens = jsonscan.ParseInt(v)
					}
				}
			}
		}
	}
	if it.Bad() {
		return Usage{}, false
	}
	return u, true
}
