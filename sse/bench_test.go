package sse_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/sse"
)

// raceEnabled is set under -race, where allocation counts are not exact.
var raceEnabled bool

// vllmStream returns a vLLM chat stream of n content chunks, then the
// finish chunk, the usage chunk and [DONE]. With continuous, every chunk
// carries cumulative usage (continuous_usage_stats).
func vllmStream(n int, continuous bool) []byte {
	var b bytes.Buffer
	usage := func(c int) string {
		if !continuous {
			return ""
		}
		return fmt.Sprintf(`,"usage":{"prompt_tokens":412,"total_tokens":%d,"completion_tokens":%d}`, 412+c, c)
	}
	const head = `data: {"id":"chatcmpl-7f3a9c1e5b2d4e68a0c1","object":"chat.completion.chunk","created":1764489600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":`
	fmt.Fprintf(&b, "%s{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]%s}\n\n", head, usage(0))
	words := []string{" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dogs", "\\n", " usage"}
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s{\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":null}]%s}\n\n", head, words[i%len(words)], usage(i+1))
	}
	fmt.Fprintf(&b, "%s{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}]%s}\n\n", head, usage(n))
	fmt.Fprintf(&b, `data: {"id":"chatcmpl-7f3a9c1e5b2d4e68a0c1","object":"chat.completion.chunk","created":1764489600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":412,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":384}}}`+"\n\n", 412+n, n)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

func benchmarkCopy(b *testing.B, in []byte, keep bool) {
	benchmarkCopyOpt(b, in, sse.Options{KeepUsage: keep})
}

func benchmarkCopyOpt(b *testing.B, in []byte, opt sse.Options) {
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	src := bytes.NewReader(in)
	opt.Flush = func() error { return nil }
	var res sse.Result
	for b.Loop() {
		src.Reset(in)
		var err error
		res, err = sse.Copy(io.Discard, src, opt)
		if err != nil || !res.Done {
			b.Fatal(res, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(res.Events), "ns/event")
}

// BenchmarkCopy: a 500-chunk vLLM stream, the usage chunk dropped.
func BenchmarkCopy(b *testing.B) { benchmarkCopy(b, vllmStream(500, false), false) }

// BenchmarkCopy_Model: a 500-chunk vLLM stream whose "model" is renamed to
// the client's name in every chunk.
func BenchmarkCopy_Model(b *testing.B) {
	benchmarkCopyOpt(b, vllmStream(500, false), sse.Options{Model: "llama", UpstreamModel: "meta-llama/Llama-3.1-8B-Instruct"})
}

// BenchmarkCopy_ContinuousUsage: every chunk carries usage, so every chunk
// goes through the JSON scanner.
func BenchmarkCopy_ContinuousUsage(b *testing.B) { benchmarkCopy(b, vllmStream(500, true), true) }

// BenchmarkCopy_DropChunkUsage: what the gateway now does with every vLLM
// stream whose client did not ask for continuous usage: every chunk's
// running count read and cut out, the model renamed.
func BenchmarkCopy_DropChunkUsage(b *testing.B) {
	benchmarkCopyOpt(b, vllmStream(500, true), sse.Options{DropChunkUsage: true, Model: "llama", UpstreamModel: "meta-llama/Llama-3.1-8B-Instruct"})
}

// smallReads returns at most n bytes per Read, like a slow upstream.
type smallReads struct {
	r *bytes.Reader
	n int
}

func (s smallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), s.n)]) }

// BenchmarkCopy_SmallReads: the same stream delivered 16 bytes per read.
func BenchmarkCopy_SmallReads(b *testing.B) {
	in := vllmStream(500, false)
	src := bytes.NewReader(in)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		src.Reset(in)
		if _, err := sse.Copy(io.Discard, smallReads{src, 16}, sse.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReader_Next reports the cost of one event.
func BenchmarkReader_Next(b *testing.B) {
	in := vllmStream(500, false)
	src := bytes.NewReader(in)
	r := sse.NewReader(src, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(in) / 503))
	for b.Loop() {
		if _, err := r.Next(); err != nil {
			src.Reset(in)
			r.Reset(src, 0)
		}
	}
}

func BenchmarkParseUsage(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-abc","object":"chat.completion","created":1764489600,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("Lorem ipsum dolor sit amet. ", 40) + `"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":42,"total_tokens":60,"completion_tokens":18,"prompt_tokens_details":{"cached_tokens":32}}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, ok := sse.ParseUsage(body); !ok {
			b.Fatal("no usage")
		}
	}
}

// TestCopy_Allocs: Copy's allocations do not grow with the number of
// events (none per content chunk, even with usage on every chunk), and a
// warm Reader.Next allocates nothing.
func TestCopy_Allocs(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts are not exact under -race or -cover")
	}
	for _, continuous := range []bool{false, true} {
		allocs := func(n int) float64 {
			in := vllmStream(n, continuous)
			src := bytes.NewReader(in)
			return testing.AllocsPerRun(50, func() {
				src.Reset(in)
				sse.Copy(io.Discard, src, sse.Options{Flush: func() error { return nil }})
			})
		}
		small, large := allocs(10), allocs(500)
		if large > small || large > 1 {
			t.Errorf("continuous=%v: %v allocs for 10 chunks, %v for 500; want the same, at most 1", continuous, small, large)
		}
	}

	// Renaming the model reuses one buffer for every event.
	renamed := func(n int) float64 {
		in := vllmStream(n, false)
		src := bytes.NewReader(in)
		return testing.AllocsPerRun(50, func() {
			src.Reset(in)
			sse.Copy(io.Discard, src, sse.Options{Model: "llama", UpstreamModel: "meta-llama/Llama-3.1-8B-Instruct"})
		})
	}
	if small, large := renamed(10), renamed(500); large > small || large > 4 {
		t.Errorf("Model: %v allocs for 10 chunks, %v for 500; want the same, at most 4", small, large)
	}

	in := vllmStream(100, false)
	src := bytes.NewReader(in)
	r := sse.NewReader(src, 0)
	n := testing.AllocsPerRun(1000, func() {
		if _, err := r.Next(); err != nil {
			src.Reset(in)
			r.Reset(src, 0)
		}
	})
	if n != 0 {
		t.Errorf("Reader.Next: %v allocs per event, want 0", n)
	}
}
