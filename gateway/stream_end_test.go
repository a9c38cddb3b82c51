package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-llmflow/llmflow/internal/h1/h1test"
)

// endSpy is the client's side of the gateway's ResponseWriter as the
// tests see it: what was written, and, at every flush that sends [DONE],
// how many requests of the key and of the engine were still in flight.
type endSpy struct {
	http.ResponseWriter
	inFlight func() (key, engine int64)
	mu       sync.Mutex
	written  bytes.Buffer
	flushes  int
	atDone   []string // "key=K engine=E" at each flush that sent [DONE]
}

func (s *endSpy) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.written.Write(p)
	s.mu.Unlock()
	return s.ResponseWriter.Write(p)
}

func (s *endSpy) FlushError() error {
	s.mu.Lock()
	s.flushes++
	if bytes.Contains(s.written.Bytes(), []byte("[DONE]")) {
		k, e := s.inFlight()
		s.atDone = append(s.atDone, fmt.Sprintf("key=%d engine=%d", k, e))
	}
	s.mu.Unlock()
	return http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *endSpy) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// TestStreamEndLeavesAfterRelease: a stream's [DONE] reaches the client
// only once the gateway has released the request (the key's in-flight
// count, the engine's), so a client with max_inflight = 1 that sends its
// next request the moment it sees [DONE], on another connection, is
// never refused for the one it just finished. An engine that sends its
// whole answer at once has it go out in one write, [DONE] and the last
// chunk included: the gateway flushes nothing itself, its handler's
// return does.
func TestStreamEndLeavesAfterRelease(t *testing.T) {
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`+"\n\n"+
			`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`+"\n\n"+
			"data: [DONE]\n\n")
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	k, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "one", MaxInFlight: 1}, Principal{Name: "test", Role: RoleProxyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	var spies []*endSpy
	var mu sync.Mutex
	srv := h1test.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &endSpy{ResponseWriter: w, inFlight: func() (int64, int64) {
			var engine int64
			for _, b := range e.gw.Backends("") {
				engine += b.InFlight
			}
			return e.gw.bud.mem.Key(k.ID).InFlight(), engine
		}}
		mu.Lock()
		spies = append(spies, s)
		mu.Unlock()
		e.gw.ServeHTTP(s, r)
	}))
	t.Cleanup(srv.Close)

	for i := range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(spies) != 3 {
		t.Fatalf("%d requests served, want 3", len(spies))
	}
	for i, s := range spies {
		if len(s.atDone) > 0 {
			t.Errorf("request %d: [DONE] flushed to the client while in flight: %v", i, s.atDone)
		}
		if s.flushes != 0 {
			t.Errorf("request %d: %d flushes for an answer the engine sent at once, want none (the handler's return sends it in one write)", i, s.flushes)
		}
	}
}
