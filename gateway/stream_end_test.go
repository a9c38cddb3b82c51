package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/internal/h1/h1test"
)

// endSpy is the gateway's ResponseWriter as a test sees it: what was
// written and flushed, and each moment the client could have had its
// whole answer (a flush after [DONE], a write that completes the
// Content-Length) with how many requests of the key and of the engine
// were still in flight then.
type endSpy struct {
	http.ResponseWriter
	inFlight func() (key, engine int64)
	written  bytes.Buffer
	flushes  int
	early    []string
}

func (s *endSpy) Write(p []byte) (int, error) {
	s.written.Write(p)
	if n, err := strconv.Atoi(s.Header().Get("Content-Length")); err == nil && s.written.Len() >= n {
		s.whole("the write that completes the answer")
	}
	return s.ResponseWriter.Write(p)
}

func (s *endSpy) FlushError() error {
	s.flushes++
	if bytes.Contains(s.written.Bytes(), []byte("[DONE]")) {
		s.whole("a flush after [DONE]")
	}
	return http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *endSpy) whole(when string) {
	if k, e := s.inFlight(); k != 0 || e != 0 {
		s.early = append(s.early, fmt.Sprintf("%s with key=%d engine=%d in flight", when, k, e))
	}
}

func (s *endSpy) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// TestAnswerEndsAfterRelease: a client has the end of its answer ([DONE],
// or the last byte of a whole answer, however large) only once the
// gateway has released the request (the key's in-flight count, the
// engine's), so a client with max_inflight = 1 that
// sends its next request at that moment, on another connection, is never
// refused for the one it just finished. So on both paths: sse.Copy and
// the answer written whole, and the resumable relay of borrowers under
// reclaim = "preempt" (a stream, an answer assembled from one). A stream
// the engine sends at once goes out in one write, [DONE] and the last
// chunk included: the gateway flushes nothing itself, its handler's
// return does (the resumable relay flushes at the end of each attempt).
func TestAnswerEndsAfterRelease(t *testing.T) {
	const chunk = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}` + "\n\n"
	stream := chunk + `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}` + "\n\n" +
		"data: [DONE]\n\n"
	answer := func(content string) string {
		return `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
			content + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`
	}
	for _, tt := range []struct {
		name, engine string
		stream       bool
		borrow       bool // a borrower's, relayed by the resumable relay (reclaim = "preempt")
	}{
		{"stream", stream, true, false},
		{"answer", answer("hi"), false, false},
		{"large answer", answer(strings.Repeat("word ", 20000)), false, false}, // past any server buffer
		{"borrower's stream", stream, true, true},
		{"borrower's answer", stream, false, true}, // assembled from the engine's stream
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.stream || tt.borrow {
					w.Header().Set("Content-Type", "text/event-stream")
				}
				io.WriteString(w, tt.engine)
			})
			team := "lab-nlp"
			e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
				if tt.borrow {
					// one slot shared, etabA's: every request of etabB borrows
					o.Config.Pools[0].Capacity = 2
					o.Config.Pools[0].Reclaim, o.Config.Pools[0].Headroom = engine.ReclaimPreempt, 1
				}
			})
			if tt.borrow {
				team = "lab-chem"
			}
			k, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: team, Name: "one", MaxInFlight: 1}, Principal{Name: "test", Role: RoleProxyAdmin})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var spies []*endSpy
			srv := h1test.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s := &endSpy{ResponseWriter: w, inFlight: func() (int64, int64) {
					var engine int64
					for _, b := range e.gw.Backends("m") {
						engine += b.InFlight
					}
					return e.gw.bud.mem.Key(k.ID).InFlight(), engine
				}}
				e.gw.ServeHTTP(s, r)
				mu.Lock()
				spies = append(spies, s)
				mu.Unlock()
			}))
			t.Cleanup(srv.Close)
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			if tt.stream {
				body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			for i := range 3 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				whole := tt.engine // as the engine sent it, or assembled from the engine's stream
				if tt.borrow {
					whole = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}}` + "\n"
				}
				if err != nil || resp.StatusCode != http.StatusOK || tt.stream && !strings.HasSuffix(string(got), "data: [DONE]\n\n") ||
					!tt.stream && string(got) != whole {
					t.Fatalf("request %d: %d %v, %d bytes ending %q", i, resp.StatusCode, err, len(got), got[max(0, len(got)-40):])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(spies) != 3 {
				t.Fatalf("%d requests served, want 3", len(spies))
			}
			for i, s := range spies {
				if len(s.early) > 0 {
					t.Errorf("request %d: the client could have its whole answer while in flight: %v", i, s.early)
				}
				if s.flushes != 0 && !tt.borrow { // the resumable relay flushes at the end of an attempt
					t.Errorf("request %d: %d flushes for an answer the engine sent at once, want none (the handler's return sends it)", i, s.flushes)
				}
			}
			for _, r := range e.recs.wait(t, 3) {
				if r.Status != http.StatusOK || r.PromptTokens != 5 || r.CompletionTokens != 1 || tt.borrow != (r.Priority >= fairshare.PriorityBandBase) {
					t.Errorf("record %+v, want status 200 with the engine's usage, a borrower's priority %v", r, tt.borrow)
				}
			}
		})
	}
}
