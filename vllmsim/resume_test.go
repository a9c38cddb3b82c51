package vllmsim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is what one generation request returned, streamed or not.
type answer struct {
	text   string
	finish string
	usage  usageJSON
}

// generation posts body (without its closing brace) to path and returns the
// answer; streamed requests ask for the usage chunk.
func generation(t *testing.T, url string, chat, stream bool, body string) answer {
	t.Helper()
	a, err := generate(t.Context(), url, chat, stream, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// generate is generation for any goroutine.
func generate(ctx context.Context, url string, chat, stream bool, body string) (answer, error) {
	path := "/v1/completions"
	if chat {
		path = "/v1/chat/completions"
	}
	if stream {
		body += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	var a answer
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body+`}`))
	if err != nil {
		return a, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return a, err
	}
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("status %d for %s: %s", resp.StatusCode, body, raw)
	}
	var payloads []string
	if stream {
		for line := range strings.Lines(string(raw)) {
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
				payloads = append(payloads, d)
			}
		}
		if len(payloads) == 0 || payloads[len(payloads)-1] != "[DONE]" {
			return a, fmt.Errorf("stream did not end with [DONE]: %q", raw)
		}
		payloads = payloads[:len(payloads)-1]
	} else {
		payloads = []string{string(raw)}
	}
	var text strings.Builder
	for _, d := range payloads {
		var c chatResp
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			return a, fmt.Errorf("body %q: %v", d, err)
		}
		if c.Usage != nil {
			a.usage = *c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta != nil && ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			text.WriteString(ch.Message.Content)
			text.WriteString(ch.Text)
			if ch.FinishReason != nil {
				a.finish = *ch.FinishReason
			}
		}
	}
	a.text = text.String()
	return a, nil
}

// stopAfter streams body and hangs up after k tokens of content, as a
// gateway preempting the request would; it returns the text received.
func stopAfter(t *testing.T, url string, chat bool, body string, k int) string {
	t.Helper()
	if k == 0 {
		return ""
	}
	path := "/v1/completions"
	if chat {
		path = "/v1/chat/completions"
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := post(t, ctx, url+path, body+`,"stream":true}`, nil)
	defer resp.Body.Close()
	var text strings.Builder
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for n < k && sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var c chatResp
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %q: %v", d, err)
		}
		for _, ch := range c.Choices {
			piece := ch.Text
			if ch.Delta != nil && ch.Delta.Content != nil {
				piece = *ch.Delta.Content
			}
			if piece != "" {
				text.WriteString(piece)
				n++
			}
		}
	}
	if n != k {
		t.Fatalf("stream ended after %d tokens, want %d", n, k)
	}
	return text.String()
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestSameRequestSameText(t *testing.T) {
	_, hs := newTestServer(t, Config{})
	for _, chat := range []bool{true, false} {
		for _, stream := range []bool{false, true} {
			body := `{"model":"sim/llama","prompt":"the same prompt","max_tokens":7`
			if chat {
				body = `{"model":"sim/llama","messages":[{"role":"user","content":"the same prompt"}],"max_tokens":7`
			}
			a, b := generation(t, hs.URL, chat, stream, body), generation(t, hs.URL, chat, stream, body)
			if a.text != b.text || a.text != "tok0 tok1 tok2 tok3 tok4 tok5 tok6 " || a.usage != b.usage {
				t.Fatalf("chat %v stream %v: %+v then %+v", chat, stream, a, b)
			}
		}
	}
}

// An answer stopped after k tokens and resumed (chat: the k tokens as a
// prefilled assistant message continued with continue_final_message;
// completions: the prompt followed by them) continues with tokens k, k+1, …
// of the unpreempted answer: the concatenation is the same text, the resumed
// request counts the k tokens in its prompt and only what it generated as
// completion tokens, and finishes for the same reason.
func TestResumeEqualsUnpreempted(t *testing.T) {
	const n = 6
	_, hs := newTestServer(t, Config{DefaultMaxTokens: n})
	type endpoint struct {
		name string
		chat bool
		// orig is the request (no closing brace, no max_tokens); resumed
		// is the same request holding prefix, the text generated so far.
		orig    string
		resumed func(prefix string) string
	}
	endpoints := []endpoint{
		{"chat", true,
			`{"model":"sim/llama","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"count for me, please"}]`,
			func(p string) string {
				return `{"model":"sim/llama","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"count for me, please"},` +
					`{"role":"assistant","content":` + jsonString(p) + `}],"continue_final_message":true,"add_generation_prompt":false`
			}},
		{"chat with the client's own prefill", true,
			`{"model":"sim/llama","messages":[{"role":"user","content":"count for me"},{"role":"assistant","content":"Sure: "}],"continue_final_message":true,"add_generation_prompt":false`,
			func(p string) string {
				return `{"model":"sim/llama","messages":[{"role":"user","content":"count for me"},{"role":"assistant","content":` +
					jsonString("Sure: "+p) + `}],"continue_final_message":true,"add_generation_prompt":false`
			}},
		{"chat with content parts", true,
			`{"model":"sim/llama","messages":[{"role":"user","content":[{"type":"text","text":"count for me"}]}]`,
			func(p string) string {
				return `{"model":"sim/llama","messages":[{"role":"user","content":[{"type":"text","text":"count for me"}]},` +
					`{"role":"assistant","content":[{"type":"text","text":` + jsonString(p) + `}]}],"continue_final_message":true,"add_generation_prompt":false`
			}},
		{"completions", false,
			`{"model":"sim/llama","prompt":"Count: "`,
			func(p string) string { return `{"model":"sim/llama","prompt":` + jsonString("Count: "+p) }},
		{"completions, a list of one prompt", false,
			`{"model":"sim/llama","prompt":["Count: "]`,
			func(p string) string { return `{"model":"sim/llama","prompt":[` + jsonString("Count: "+p) + `]` }},
	}
	for _, ep := range endpoints {
		for _, limit := range []string{"max_tokens", "default"} {
			for _, stream := range []bool{false, true} {
				for _, k := range []int{0, 1, 3, n - 1} {
					t.Run(fmt.Sprintf("%s/%s/stream=%v/k=%d", ep.name, limit, stream, k), func(t *testing.T) {
						orig, setLimit := ep.orig, func(int) string { return "" }
						if limit == "max_tokens" {
							setLimit = func(m int) string { return fmt.Sprintf(`,"max_tokens":%d`, m) }
						}
						full := generation(t, hs.URL, ep.chat, stream, orig+setLimit(n))
						if full.usage.CompletionTokens != n || !strings.HasPrefix(full.text, "tok0 ") {
							t.Fatalf("unpreempted answer %+v", full)
						}
						prefix := stopAfter(t, hs.URL, ep.chat, orig+setLimit(n), k)
						if !strings.HasPrefix(full.text, prefix) {
							t.Fatalf("stopped stream %q is not a prefix of %q", prefix, full.text)
						}
						rest := generation(t, hs.URL, ep.chat, stream, ep.resumed(prefix)+setLimit(n-k))
						if prefix+rest.text != full.text {
							t.Fatalf("resumed after %d tokens: %q + %q, want %q", k, prefix, rest.text, full.text)
						}
						want := usageJSON{PromptTokens: full.usage.PromptTokens + k, CompletionTokens: n - k,
							TotalTokens: full.usage.PromptTokens + n}
						if rest.usage != want || rest.finish != full.finish {
							t.Fatalf("resumed usage %+v finish %q, want %+v finish %q", rest.usage, rest.finish, want, full.finish)
						}
					})
				}
			}
		}
	}
}

// A final assistant message that is not the answer so far (a client's own
// prefill, a previous turn) is continued from the answer's start; without
// continue_final_message an assistant message is a finished turn and the
// answer starts afresh.
func TestContinueFinalMessageOffsets(t *testing.T) {
	_, hs := newTestServer(t, Config{})
	for _, tc := range []struct {
		name, fields, want string
	}{
		{"prefill of other text", `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Well,"}],"continue_final_message":true,"add_generation_prompt":false`, "tok0 tok1 "},
		{"not a prefix of the answer", `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok1 tok2 "}],"continue_final_message":true,"add_generation_prompt":false`, "tok0 tok1 "},
		{"without its last space", `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 tok1"}],"continue_final_message":true,"add_generation_prompt":false`, "tok0 tok1 "},
		{"resumed", `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 tok1 "}],"continue_final_message":true,"add_generation_prompt":false`, "tok2 tok3 "},
		{"new turn after an assistant message", `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 tok1 "}]`, "tok0 tok1 "},
		{"new turn, generation prompt explicit", `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 tok1 "}],"add_generation_prompt":true,"continue_final_message":false`, "tok0 tok1 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := generation(t, hs.URL, true, false, `{"model":"sim/llama",`+tc.fields+`,"max_tokens":2`)
			if got.text != tc.want {
				t.Fatalf("text %q, want %q", got.text, tc.want)
			}
		})
	}
}

func TestContinueFinalMessageRefusals(t *testing.T) {
	s, hs := newTestServer(t, Config{})
	for _, tc := range []struct {
		name, fields, message string
	}{
		{"with add_generation_prompt true",
			`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 "}],"continue_final_message":true,"add_generation_prompt":true`,
			"Cannot set both `continue_final_message` and `add_generation_prompt` to True."},
		{"add_generation_prompt left at its default (true)",
			`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"tok0 "}],"continue_final_message":true`,
			"continue_final_message and add_generation_prompt are not compatible."},
		{"no text to continue",
			`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"x"}}]}],"continue_final_message":true,"add_generation_prompt":false`,
			"could not find any text to continue"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				before := s.Stats()
				resp := post(t, t.Context(), hs.URL+"/v1/chat/completions",
					fmt.Sprintf(`{"model":"sim/llama",%s,"max_tokens":2,"stream":%v}`, tc.fields, stream), nil)
				if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
				}
				got := decode[errResp](t, resp)
				if !strings.Contains(got.Error.Message, tc.message) || got.Error.Type != "BadRequestError" ||
					got.Error.Code != http.StatusBadRequest || got.Error.Param != nil {
					t.Fatalf("error %+v, want message containing %q", got.Error, tc.message)
				}
				after := s.Stats()
				if after.Served != before.Served || after.Rejected != before.Rejected+1 {
					t.Fatalf("served %d→%d, rejected %d→%d", before.Served, after.Served, before.Rejected, after.Rejected)
				}
			})
		}
	}
	// As vLLM, the final message is continued whatever its role: the chat
	// template checks none.
	for _, msgs := range []string{
		`[{"role":"assistant","content":"tok0 "},{"role":"user","content":"tok0 "}]`,
		`[{"role":"system","content":"tok0 "}]`,
	} {
		got := generation(t, hs.URL, true, false, `{"model":"sim/llama","messages":`+msgs+`,"continue_final_message":true,"add_generation_prompt":false,"max_tokens":1`)
		if got.text != "tok1 " {
			t.Fatalf("continue a final non-assistant message %s: %+v, want tok1", msgs, got)
		}
	}
	// Completions take no such fields (vLLM ignores unknown ones).
	got := generation(t, hs.URL, false, false, `{"model":"sim/llama","prompt":"hi","continue_final_message":true,"add_generation_prompt":true,"max_tokens":1`)
	if got.text != "tok0 " {
		t.Fatalf("completions with chat-only fields: %+v", got)
	}
}

// Under KV pressure the engine preempts running requests (recompute) as
// before; their text is unaffected: every answer is still tok0 … tok<n-1>.
func TestKVPreemptionKeepsText(t *testing.T) {
	s, hs := newTestServer(t, Config{StepInterval: 5 * time.Millisecond,
		Sched: SchedConfig{KVBlocks: 4, BlockSize: 4}})
	const n = 11 // 4 prompt tokens + 11 = 15 tokens, 4 blocks: the whole cache
	want := ""
	for i := range n {
		want += tokenText(i)
	}
	for attempt := 0; s.Stats().Preemptions == 0; attempt++ {
		if attempt == 10 {
			t.Fatal("no preemption in 10 rounds of 3 concurrent requests")
		}
		var wg sync.WaitGroup
		got := make([]answer, 3)
		errs := make([]error, 3)
		for i := range got {
			wg.Go(func() {
				got[i], errs[i] = generate(t.Context(), hs.URL, i%2 == 0, i == 1,
					fmt.Sprintf(`{"model":"sim/llama","prompt":"0123456789abcdef","messages":[{"role":"user","content":"0123456789abcdef"}],"max_tokens":%d`, n))
			})
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil || got[i].text != want || got[i].usage.CompletionTokens != n {
				t.Fatalf("request %d: %+v, %v; want %q", i, got[i], errs[i], want)
			}
		}
	}
}
