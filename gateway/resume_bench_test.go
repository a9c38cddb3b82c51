package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/engine"
)

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// BenchmarkResumableRelay: what relaying a borrower's stream costs per
// chunk on a pool that may preempt it (every chunk read, its text kept, the
// running count cut out, id and model rewritten), against sse.Copy's
// BenchmarkCopy_DropChunkUsage for the same stream.
func BenchmarkResumableRelay(b *testing.B) {
	var in bytes.Buffer
	const head = `data: {"id":"chatcmpl-7f3a9c1e5b2d4e68a0c1","object":"chat.completion.chunk","created":1764489600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":`
	for i := range 500 {
		fmt.Fprintf(&in, "%s{\"content\":\" word%d\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":412,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n", head, i, 413+i, i+1)
	}
	in.WriteString("data: [DONE]\n\n")
	pl := &pool{victims: newReclaimer(), engine: engine.Descriptor{ContinuousUsage: true}}
	x := &exchange{rt: &route{pool: pl}, rq: &clientRequest{model: "llama", stream: true}}
	g := &Gateway{}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.SetBytes(int64(in.Len()))
	for b.Loop() {
		rs := &resumeState{chat: true, prompt: -1, header: true}
		x.first = time.Now()
		if end := g.relayChunks(context.Background(), w, x, rs, bytes.NewReader(in.Bytes()), func() {}); end != attemptDone {
			b.Fatal(end)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/500, "ns/event")
}
