package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/budgets"
)

// hostileEngine answers every request as a broken engine would: stream
// is whether it streams, chunks the content chunks it sends (whatever
// max_tokens says), usage its usage object ("" = none).
func hostileEngine(stream bool, chunks int, usage string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			body := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
				strings.Repeat("tok ", chunks) + `"},"finish_reason":"length"}]`
			if usage != "" {
				body += `,"usage":` + usage
			}
			io.WriteString(w, body+"}")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for range chunks {
			if _, err := io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n"); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if usage != "" {
			io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":"+usage+"}\n\n")
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

// TestBudgetHostileEngine: what an engine reports is believed only
// within what the gateway let it do (prompt within the bytes sent,
// completion within the output limit of each sequence), a count it does
// not report is estimated, never free, and a stream that passes its
// output limit is cut. A burst of 40 requests with max_tokens 100 on a
// key budget of 0.01 GPU-hours never spends more than it, and every
// request served is charged at least its prompt and some output.
func TestBudgetHostileEngine(t *testing.T) {
	const limit = 0.01
	for _, tc := range []struct {
		name   string
		stream bool
		chunks int
		usage  string
	}{
		{"ignores max_tokens, stream", true, 2000, `{"prompt_tokens":10,"completion_tokens":20000,"total_tokens":20010}`},
		{"ignores max_tokens", false, 2000, `{"prompt_tokens":10,"completion_tokens":20000,"total_tokens":20010}`},
		{"million prompt tokens", false, 50, `{"prompt_tokens":1000000,"completion_tokens":50,"total_tokens":1000050}`},
		{"million prompt tokens, stream", true, 50, `{"prompt_tokens":1000000,"completion_tokens":50,"total_tokens":1000050}`},
		{"null counts", false, 100, `{"prompt_tokens":null,"completion_tokens":null,"total_tokens":null}`},
		{"null counts, stream", true, 100, `{"prompt_tokens":null,"completion_tokens":null}`},
		{"no completion count", false, 100, `{"prompt_tokens":10}`},
		{"no usage", false, 100, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRecordingUpstream(t, hostileEngine(tc.stream, tc.chunks, tc.usage))
			e, _ := budgetEnv(t, []string{up.srv.URL}, "")
			k, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "hostile"}, Principal{})
			if err != nil {
				t.Fatal(err)
			}
			sc := budgets.Scope{Kind: budgets.KindKey, Name: k.ID}
			putBudget(t, e, fmt.Sprintf(`{"kind":"key","name":%q,"period":"day","max_cost":%v}`, k.ID, limit))
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":100,"stream":%v}`, tc.stream)
			run := burst(t, e, secret, "/v1/chat/completions", body, 40)
			st := settled(t, e, sc)
			t.Logf("%s: served %d, refused %d; spent %.5f of %v (%.1f %%)", tc.name, run.served, run.refused, st.Spent, limit, 100*st.Spent/limit)
			if run.other > 0 || run.served == 0 {
				t.Fatalf("served %d refused %d, %d others (%s)", run.served, run.refused, run.other, run.firstOther)
			}
			if st.Spent > limit {
				t.Fatalf("spent %v: over the limit %v", st.Spent, limit)
			}
			// never free: more than the prompt's estimate (12 tokens) per
			// request served, at least one output token of the 50 or more
			// each engine sent (fewer when a request's limit was lowered)
			if floor := float64(run.served) * (12 + 10) / 1e6; st.Spent < floor {
				t.Fatalf("spent %v for %d requests served: less than %v, usage taken as free", st.Spent, run.served, floor)
			}
		})
	}
}

// TestStreamCutPastOutputLimit: an engine streaming past the max_tokens
// it was given is cut at the limit (a role chunk, a token each and a
// finish chunk per sequence): the client gets an error event and no
// [DONE], the record says upstream_error and charges at most the limit.
func TestStreamCutPastOutputLimit(t *testing.T) {
	up := newRecordingUpstream(t, hostileEngine(true, 500, `{"prompt_tokens":5,"completion_tokens":500}`))
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"n":2,"stream":true}`)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := strings.Count(string(got), `"delta"`); resp.StatusCode != 200 || n != 2*(10+2) ||
		!strings.Contains(string(got), `"code":"upstream_error"`) || strings.Contains(string(got), "[DONE]") {
		t.Fatalf("client got %d with %d chunks: %q", resp.StatusCode, n, got)
	}
	rec := e.recs.wait(t, 1)[0]
	if rec.Outcome != "upstream_error" || !rec.Estimated || rec.CompletionTokens > 20 {
		t.Fatalf("record %+v: want upstream_error, estimated, at most 20 completion tokens", rec)
	}
}

// TestTokenizerCountBounded: the prompt count an engine's tokenizer gives
// for a stream that broke without usage is believed within the prompt's
// bound only, as its usage is: a million tokens for a few bytes is not
// charged (the estimate is).
func TestTokenizerCountBounded(t *testing.T) {
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			io.WriteString(w, `{"count":1000000,"max_model_len":4096,"tokens":[]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 { // then the stream breaks: no usage, no [DONE]
			io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n")
		}
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rec := e.recs.wait(t, 1)[0]
	if rec.PromptTokens > int64(len(`[{"role":"user","content":"hi"}]`)+chatTemplateTokens) {
		t.Fatalf("record %+v: the tokenizer's count of a million prompt tokens believed", rec)
	}
}
