package sse_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/sse"
)

func TestParseUsage(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		want   sse.Usage
		wantOK bool
	}{
		{
			name: "VLLMChat",
			body: `{"id":"chatcmpl-abc","object":"chat.completion","created":1764489600,"model":"meta-llama/Llama-3.1-8B-Instruct",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"The \"usage\" is below: {\"usage\":{\"prompt_tokens\":1}}","tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],` +
				`"usage":{"prompt_tokens":42,"total_tokens":60,"completion_tokens":18,"prompt_tokens_details":{"cached_tokens":32}},"prompt_logprobs":null,"kv_transfer_params":null}`,
			want:   sse.Usage{PromptTokens: 42, CompletionTokens: 18, TotalTokens: 60, CachedTokens: 32},
			wantOK: true,
		},
		{
			name:   "VLLMNoCachedTokens",
			body:   `{"object":"text_completion","choices":[{"index":0,"text":" Paris","finish_reason":"length"}],"usage":{"prompt_tokens":7,"total_tokens":8,"completion_tokens":1}}`,
			want:   sse.Usage{PromptTokens: 7, CompletionTokens: 1, TotalTokens: 8},
			wantOK: true,
		},
		{
			name: "LlamaServerCachedZero",
			body: `{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Bonjour"}}],"created":1764489700,"model":"qwen2.5-7b-instruct-q4_k_m.gguf","system_fingerprint":"b7142","object":"chat.completion",` +
				`"usage":{"completion_tokens":4,"prompt_tokens":25,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-x",` +
				`"timings":{"cache_n":0,"prompt_n":25,"prompt_ms":31.2,"predicted_n":4,"predicted_ms":52.7}}`,
			want:   sse.Usage{PromptTokens: 25, CompletionTokens: 4, TotalTokens: 29},
			wantOK: true,
		},
		{
			name:   "Embeddings",
			body:   `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023,-0.0093,1e-3]}],"model":"bge-m3","usage":{"prompt_tokens":8,"total_tokens":8}}`,
			want:   sse.Usage{PromptTokens: 8, TotalTokens: 8, NoCompletion: true},
			wantOK: true,
		},
		{
			name:   "Whitespace",
			body:   "{\n  \"usage\" : {\n    \"prompt_tokens\" : 3 ,\n    \"prompt_tokens_details\" : { \"cached_tokens\" : 2 }\n  }\n}\n",
			want:   sse.Usage{PromptTokens: 3, CachedTokens: 2, NoCompletion: true},
			wantOK: true,
		},
		{
			name:   "LastWins",
			body:   `{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`,
			want:   sse.Usage{PromptTokens: 2, NoCompletion: true},
			wantOK: true,
		},
		{
			name:   "NonIntegerCountsAreZero",
			body:   `{"usage":{"prompt_tokens":1.5,"completion_tokens":"2","total_tokens":99999999999999999999,"prompt_tokens_details":null}}`,
			want:   sse.Usage{Malformed: true},
			wantOK: true,
		},
		{
			name:   "NullCountsAreAbsent",
			body:   `{"usage":{"prompt_tokens":null,"completion_tokens":-0,"prompt_tokens_details":{"cached_tokens":null}}}`,
			want:   sse.Usage{NoPrompt: true},
			wantOK: true,
		},
		{
			name:   "LastDuplicateWins",
			body:   `{"usage":{"prompt_tokens":1e3,"prompt_tokens":7}}`,
			want:   sse.Usage{PromptTokens: 7, NoCompletion: true},
			wantOK: true,
		},
		{
			name:   "NegativeIsNotMalformed",
			body:   `{"usage":{"prompt_tokens":-5,"prompt_tokens_details":{"cached_tokens":"x"}}}`,
			want:   sse.Usage{PromptTokens: -5, Malformed: true, NoCompletion: true},
			wantOK: true,
		},
		{name: "Missing", body: `{"choices":[],"nested":{"usage":{"prompt_tokens":1}}}`},
		{name: "Null", body: `{"usage":null}`},
		{name: "NotAnObject", body: `{"usage":[1,2]}`},
		{name: "Array", body: `[{"usage":{"prompt_tokens":1}}]`},
		{name: "Truncated", body: `{"usage":{"prompt_tokens":1}`},
		{name: "Malformed", body: `{"usage":{"prompt_tokens":1,}}`},
		{name: "TrailingGarbageIsNotChecked", body: `{"usage":{"prompt_tokens":1}} x`, want: sse.Usage{PromptTokens: 1, NoCompletion: true}, wantOK: true},
		{name: "Empty", body: ``},
		{name: "Error", body: `{"error":{"message":"x","type":"BadRequestError","param":null,"code":400}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := sse.ParseUsage([]byte(tt.body))
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Usage mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// refParseUsage is the naive reference for ParseUsage, on encoding/json.
func refParseUsage(body []byte) (sse.Usage, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return sse.Usage{}, false
	}
	raw, ok := top["usage"]
	if !ok {
		return sse.Usage{}, false
	}
	var u map[string]json.RawMessage
	if json.Unmarshal(raw, &u) != nil || u == nil {
		return sse.Usage{}, false
	}
	malformed := false
	num := func(m map[string]json.RawMessage, k string) int64 {
		v, ok := m[k]
		if !ok || string(v) == "null" {
			return 0
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			malformed = true
			return 0
		}
		return n
	}
	var d map[string]json.RawMessage
	json.Unmarshal(u["prompt_tokens_details"], &d)
	us := sse.Usage{
		PromptTokens:     num(u, "prompt_tokens"),
		CompletionTokens: num(u, "completion_tokens"),
		TotalTokens:      num(u, "total_tokens"),
		CachedTokens:     num(d, "cached_tokens"),
	}
	us.Malformed = malformed
	absent := func(k string) bool { v, ok := u[k]; return !ok || string(v) == "null" }
	us.NoPrompt, us.NoCompletion = absent("prompt_tokens"), absent("completion_tokens")
	return us, true
}

func FuzzParseUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":42,"total_tokens":60,"completion_tokens":18,"prompt_tokens_details":{"cached_tokens":32}}}`))
	f.Add([]byte(`{"usage":null}`))
	f.Add([]byte(`{"a":"\"}","usage":{"prompt_tokens":-1,"x":[{"y":"]"}]}}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":1e3}}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":"NaN","completion_tokens":1.5,"prompt_tokens_details":{"cached_tokens":99999999999999999999}}}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":1.5,"prompt_tokens":3,"completion_tokens":null,"total_tokens":-0}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if bytes.IndexByte(body, '\\') >= 0 {
			// encoding/json unescapes keys ("us\u0061ge"); ParseUsage
			// compares them raw. Engines never escape these keys.
			return
		}
		got, ok := sse.ParseUsage(body)
		if !json.Valid(body) {
			return // lenient on malformed bodies: only must not panic
		}
		want, wantOK := refParseUsage(body)
		if ok != wantOK || got != want {
			t.Fatalf("ParseUsage(%q) = %+v, %v; reference %+v, %v", body, got, ok, want, wantOK)
		}
	})
}
