package gateway

import (
	"testing"

	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/sse"
)

var benchReq = []byte(`{"model":"m","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in two words."}],"max_tokens":16,"temperature":0}`)

func BenchmarkRewrite(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		rq, err := parseRequest(benchReq, engine.ChatCompletions)
		if err != nil {
			b.Fatal(err)
		}
		rq.encode(upstreamBody{engine: &vllm, model: "sim/llama", cacheSalt: "0123456789012345678901234567890123456789012", priority: 1, withPrio: true})
	}
}

func BenchmarkParseUsage(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"sim/llama","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":21,"completion_tokens":3,"total_tokens":24}}`)
	b.ReportAllocs()
	for b.Loop() {
		sse.ParseUsage(body)
	}
}
