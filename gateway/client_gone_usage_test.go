package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/engine"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// A client that leaves in the middle of a stream is charged what the
// engine did, from the running count vLLM puts in every chunk when asked
// (continuous_usage_stats): not an estimate. The client, which did not ask
// for usage, never sees it.
func TestClientGoneChargedWhatEngineDid(t *testing.T) {
	sim, hs := simUpstream(t, 2*time.Millisecond)
	e := newEnv(t, []string{hs.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":3000,"messages":[{"role":"user","content":"tell me a long story"}]}`)
	br := bufio.NewReader(resp.Body)
	read := 0
	for read < 100 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"usage"`) {
			t.Fatalf("the client got a usage it did not ask for: %s", line)
		}
		if strings.Contains(line, `"content":"tok`) {
			read++
		}
	}
	resp.Body.Close() // the client leaves
	recs := e.recs.wait(t, 1)
	gatewaytest.WaitFor(t, func() bool { return sim.Stats().Running == 0 })
	r, st := recs[0], sim.Stats()
	if r.Outcome != llmflow.OutcomeClientGone || r.Estimated || r.EstimateReason != "" {
		t.Fatalf("record %+v: want client_gone with the engine's count", r)
	}
	if r.PromptTokens != st.PromptTokens || r.CompletionTokens < int64(read) || r.CompletionTokens > st.GenerationTokens {
		t.Errorf("charged %d prompt + %d completion tokens; the engine prefilled %d and generated %d, the client read %d",
			r.PromptTokens, r.CompletionTokens, st.PromptTokens, st.GenerationTokens, read)
	}
	t.Logf("charged %d + %d tokens, the engine did %d + %d (error %d); the estimate used before was %d + %d (prompt bytes / 4, chunks forwarded)",
		r.PromptTokens, r.CompletionTokens, st.PromptTokens, st.GenerationTokens, st.GenerationTokens-r.CompletionTokens,
		(len(`[{"role":"user","content":"tell me a long story"}]`)+3)/4, read)
}

// On an engine without running usage (llama-server), a stream whose client
// left is charged the prompt as the engine's tokenizer counts it (the chat
// template applied first) and the chunks it forwarded: not an estimate.
func TestClientGoneTokenizedLlamaServer(t *testing.T) {
	chunks := make(chan struct{})
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/apply-template":
			io.WriteString(w, `{"prompt":"<|user|>tell me a story<|assistant|>"}`)
		case "/tokenize":
			io.WriteString(w, `{"tokens":[1,2,3,4,5,6,7]}`)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			for i := 0; ; i++ {
				if _, err := fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}]}\n\n", i); err != nil {
					return
				}
				if rc.Flush() != nil {
					return
				}
				select {
				case chunks <- struct{}{}:
				case <-r.Context().Done():
					return
				}
			}
		}
	})
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.Pools[0].Engine, _ = engine.New("llama-server", engine.Options{})
		o.Config.Pools[0].Reclaim, o.Config.Pools[0].Headroom = engine.ReclaimNone, 0
	})
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"tell me a story"}]}`)
	br := bufio.NewReader(resp.Body)
	for read := 0; read < 10; {
		<-chunks
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			read++
		}
	}
	resp.Body.Close()
	go func() { // let the engine notice
		for range chunks {
		}
	}()
	r := e.recs.wait(t, 1)[0]
	if r.Outcome != llmflow.OutcomeClientGone || r.Estimated || r.PromptTokens != 7 || r.CompletionTokens < 10 {
		t.Errorf("record %+v: want client_gone, 7 prompt tokens from the tokenizer, ≥ 10 chunks, not estimated", r)
	}
}

// A client that leaves before a whole (not streamed) answer came is
// charged the prompt as vLLM's /tokenize counts it; what was generated is
// unknown, so the record stays an estimate.
func TestClientGoneUnaryTokenized(t *testing.T) {
	sim, hs := simUpstream(t, 2*time.Millisecond)
	e := newEnv(t, []string{hs.URL}, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","max_tokens":3000,"messages":[{"role":"user","content":"tell me a long story about a lighthouse"}]}`))
		req.Header.Set("Authorization", "Bearer "+e.key)
		if resp, err := e.srv.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	gatewaytest.WaitFor(t, func() bool { return sim.Stats().Running == 1 })
	cancel()
	<-done
	r := e.recs.wait(t, 1)[0]
	if r.Outcome != llmflow.OutcomeClientGone || !r.Estimated || r.PromptTokens != sim.Stats().PromptTokens {
		t.Errorf("record %+v: want client_gone with the engine's prompt count %d", r, sim.Stats().PromptTokens)
	}
}
