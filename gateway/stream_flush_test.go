package gateway

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/engine"
)

// TestStreamsReachClientBeforeEngineGoesOn: an engine that sends a chunk
// and then waits has that chunk at the client while it waits, on both
// stream paths: sse.Copy (a request within its organisation's reservation)
// and the resumable relay of borrowers under reclaim = "preempt". Both
// write events as they read them and flush before they wait for the
// engine; a relay that forgot to flush would hold the chunk until the
// engine went on, and this test would time out.
func TestStreamsReachClientBeforeEngineGoesOn(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"first "},"finish_reason":null}]}`+"\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"last"},"finish_reason":"stop"}]}`+"\n\n"+
			`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`+"\n\n"+
			"data: [DONE]\n\n")
	})
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the upstream closes
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.Pools[0].Capacity = 4
		o.Config.Pools[0].Reclaim, o.Config.Pools[0].Headroom = engine.ReclaimPreempt, 1
	})
	key := e.newKey(t, "lab-chem") // etabB: a reservation of 1 of the 4 slots

	type stream struct {
		first chan string // the first content the client read
		rest  chan string // what it read after release, to [DONE]
	}
	open := func() stream {
		s := stream{first: make(chan string, 1), rest: make(chan string, 1)}
		go func() {
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				s.first <- "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var got strings.Builder
			sent := false
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					got.WriteString(line + "\n")
					if !sent && strings.Contains(line, "first") {
						s.first <- line
						sent = true
					}
				}
			}
			if !sent {
				s.first <- "no first chunk: " + got.String()
			}
			s.rest <- got.String()
		}()
		return s
	}
	firstOf := func(name string, s stream) {
		t.Helper()
		select {
		case line := <-s.first:
			if !strings.Contains(line, `"content":"first "`) {
				t.Fatalf("%s: %s", name, line)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the engine's first chunk did not reach the client while the engine waited", name)
		}
	}
	within := open()
	firstOf("within its reservation (sse.Copy)", within)
	borrower := open()
	firstOf("a borrower (the resumable relay)", borrower)

	// the second went to the engine as a borrower, a priority of its own
	reqs := up.requests()
	if len(reqs) != 2 || reqs[1].header.Get("X-Vllm-Priority") == reqs[0].header.Get("X-Vllm-Priority") {
		var prios []string
		for _, r := range reqs {
			prios = append(prios, r.header.Get("X-Vllm-Priority"))
		}
		t.Fatalf("engine requests' priorities %v, want two, the second a borrower's", prios)
	}
	once.Do(func() { close(release) })
	for name, s := range map[string]stream{"within": within, "borrower": borrower} {
		if rest := <-s.rest; !strings.Contains(rest, `"content":"last"`) || !strings.HasSuffix(rest, "[DONE]\n") {
			t.Errorf("%s: the rest of the stream: %q", name, rest)
		}
	}
}
