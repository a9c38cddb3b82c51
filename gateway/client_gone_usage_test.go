package gateway

import (
	"bufio"
	"strings"
	"testing"
	"time"

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
