package gateway

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// hostileBody is a complete chat answer whose usage object is usage.
func hostileBody(usage string) string {
	return `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":` + usage + `}`
}

// hostileStream is a streamed chat answer whose usage chunk carries usage.
func hostileStream(usage string) []string {
	return []string{
		vllmEvents[0], vllmEvents[1], vllmEvents[2],
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":" + usage + "}\n\n",
		"data: [DONE]\n\n",
	}
}

// usageAttacks are usage objects a broken or hostile engine may send, and
// whether the gateway must refuse to believe them.
var usageAttacks = []struct {
	name, usage string
	invalid     bool
}{
	{"Good", `{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":4}}`, false},
	{"NegativePrompt", `{"prompt_tokens":-5,"completion_tokens":2,"total_tokens":-3}`, true},
	{"NegativeCompletion", `{"prompt_tokens":5,"completion_tokens":-1000000}`, true},
	{"NegativeCached", `{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-1}}`, true},
	{"Huge", `{"prompt_tokens":5000000000000000000,"completion_tokens":5000000000000000000,"total_tokens":1}`, true},
	{"BeyondContext", `{"prompt_tokens":1048577,"completion_tokens":1}`, true},
	{"CompletionBeyondContext", `{"prompt_tokens":1,"completion_tokens":2000000}`, true},
	{"CachedOverPrompt", `{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":11}}`, true},
	{"Float", `{"prompt_tokens":12.5,"completion_tokens":2}`, true},
	{"Exponent", `{"prompt_tokens":1e308,"completion_tokens":2}`, true},
	{"NaNString", `{"prompt_tokens":"NaN","completion_tokens":2}`, true},
	{"Overflow", `{"prompt_tokens":99999999999999999999,"completion_tokens":2}`, true},
	// within the model's context, but more than the gateway sent or allowed
	{"AtContext", `{"prompt_tokens":1048576,"completion_tokens":1048576,"prompt_tokens_details":{"cached_tokens":1048576}}`, true},
	{"PromptBeyondSent", `{"prompt_tokens":100,"completion_tokens":2}`, true},
}

// checkUsageRecord checks the record of a request whose engine sent
// attack's usage.
func checkUsageRecord(t *testing.T, rec llmflow.Record, invalid bool) {
	t.Helper()
	if rec.PromptTokens < 0 || rec.CompletionTokens < 0 || rec.CachedTokens < 0 || rec.GPUHours < 0 {
		t.Errorf("negative usage recorded: %+v", rec)
	}
	if rec.Outcome != llmflow.OutcomeOK || rec.Status != http.StatusOK {
		t.Errorf("record outcome %q status %d, want ok 200", rec.Outcome, rec.Status)
	}
	switch {
	case invalid && (!rec.Estimated || rec.EstimateReason != llmflow.EstimateInvalidUsage):
		t.Errorf("record estimated %v reason %q, want true %q", rec.Estimated, rec.EstimateReason, llmflow.EstimateInvalidUsage)
	case invalid && rec.PromptTokens > 1<<20:
		t.Errorf("estimate took the engine's count: %+v", rec)
	case !invalid && (rec.Estimated || rec.EstimateReason != ""):
		t.Errorf("good usage estimated (%q): %+v", rec.EstimateReason, rec)
	}
}

// TestHostileUsage_Body: a non-streaming answer with usage the gateway
// cannot believe still reaches the client byte for byte, and is recorded
// as the gateway's estimate with the reason.
func TestHostileUsage_Body(t *testing.T) {
	for _, tc := range usageAttacks {
		t.Run(tc.name, func(t *testing.T) {
			body := hostileBody(tc.usage)
			up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, body)
			})
			e := newEnv(t, []string{up.srv.URL}, "")
			resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(got) != body {
				t.Fatalf("client got %d %q (err %v), want 200 and the engine's answer %q", resp.StatusCode, got, err, body)
			}
			checkUsageRecord(t, e.recs.wait(t, 1)[0], tc.invalid)
		})
	}
}

// TestHostileUsage_Stream: the same through a stream's usage chunk, which
// the client asked for: forwarded as the engine sent it.
func TestHostileUsage_Stream(t *testing.T) {
	for _, tc := range usageAttacks {
		t.Run(tc.name, func(t *testing.T) {
			events := hostileStream(tc.usage)
			up := newRecordingUpstream(t, sseHandler(events, nil))
			e := newEnv(t, []string{up.srv.URL}, "")
			resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}`)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := strings.Join(events, ""); err != nil || resp.StatusCode != http.StatusOK || string(got) != want {
				t.Fatalf("client got %d %q (err %v), want 200 and %q", resp.StatusCode, got, err, want)
			}
			rec := e.recs.wait(t, 1)[0]
			checkUsageRecord(t, rec, tc.invalid)
			if tc.invalid && rec.CompletionTokens != 3 {
				t.Errorf("estimated completion %d, want the 3 chunks with choices", rec.CompletionTokens)
			}
		})
	}
}

// TestStreamIdleTimeout: an engine that stops sending mid-stream has its
// request cancelled after limits.stream_idle_timeout; the client's stream
// ends without [DONE] and the record is incomplete, estimated.
func TestStreamIdleTimeout(t *testing.T) {
	cancelled := make(chan struct{})
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		io.WriteString(w, vllmEvents[0]+vllmEvents[1])
		rc.Flush()
		select { // then nothing: the engine hangs
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	e := newEnv(t, []string{up.srv.URL}, "limits {\n  stream_idle_timeout = \"200ms\"\n}\n")
	start := time.Now()
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true}`)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("stream ended after %v: the idle timeout did not fire", elapsed)
	}
	if want := vllmEvents[0] + vllmEvents[1]; string(got) != want {
		t.Errorf("client got %q, want the two events sent and no [DONE]", got)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the engine request was not cancelled")
	}
	rec := e.recs.wait(t, 1)[0]
	if rec.Outcome != llmflow.OutcomeIncomplete || !rec.Estimated || rec.EstimateReason != llmflow.EstimateIdleTimeout {
		t.Errorf("record outcome %q estimated %v reason %q, want incomplete, true, %q", rec.Outcome, rec.Estimated, rec.EstimateReason, llmflow.EstimateIdleTimeout)
	}
	if rec.CompletionTokens != 2 || rec.PromptTokens <= 0 {
		t.Errorf("estimate %d/%d, want prompt bytes/4 and the 2 chunks with choices", rec.PromptTokens, rec.CompletionTokens)
	}
}

// An engine that drips a byte now and then without ever completing an
// event is idle all the same: the timeout counts whole events, not bytes.
func TestStreamIdleTimeout_Drip(t *testing.T) {
	cancelled := make(chan struct{})
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		io.WriteString(w, vllmEvents[0])
		rc.Flush()
		for {
			select { // one byte of an event that never ends, every 20ms
			case <-r.Context().Done():
				close(cancelled)
				return
			case <-time.After(20 * time.Millisecond):
				io.WriteString(w, " ")
				rc.Flush()
			}
		}
	})
	e := newEnv(t, []string{up.srv.URL}, "limits {\n  stream_idle_timeout = \"200ms\"\n}\n")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(time.Minute):
		t.Fatal("a dripping engine kept the stream alive")
	}
	rec := e.recs.wait(t, 1)[0]
	if rec.Outcome != llmflow.OutcomeIncomplete || rec.EstimateReason != llmflow.EstimateIdleTimeout {
		t.Errorf("record outcome %q reason %q, want incomplete, %q", rec.Outcome, rec.EstimateReason, llmflow.EstimateIdleTimeout)
	}
}

// TestStreamIdleTimeout_SlowButAlive: gaps shorter than the idle timeout
// never cut a stream, however long it lasts in all; "0" disables the
// timeout.
func TestStreamIdleTimeout_SlowButAlive(t *testing.T) {
	for _, tc := range []struct{ name, limits string }{
		{"UnderTimeout", "limits {\n  stream_idle_timeout = \"300ms\"\n}\n"},
		{"Disabled", "limits {\n  stream_idle_timeout = \"0\"\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w)
				for _, ev := range vllmEvents {
					io.WriteString(w, ev)
					rc.Flush()
					time.Sleep(120 * time.Millisecond) // 600ms in all
				}
			})
			e := newEnv(t, []string{up.srv.URL}, tc.limits)
			resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`)
			br := bufio.NewReader(resp.Body)
			got, _ := io.ReadAll(br)
			resp.Body.Close()
			if !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
				t.Errorf("stream cut: %q", got)
			}
			rec := e.recs.wait(t, 1)[0]
			if rec.Outcome != llmflow.OutcomeOK || rec.Estimated || rec.PromptTokens != 12 {
				t.Errorf("record %+v: want ok with the engine's usage", rec)
			}
		})
	}
}
