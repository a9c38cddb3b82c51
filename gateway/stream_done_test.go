package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// A client that closes its connection as soon as it has read [DONE], as
// the OpenAI SDKs do, was served in full: its record is ok with status
// 200, never client_gone, however the close races the gateway's own end of
// the stream.
func TestStreamClientLeavesAfterDone(t *testing.T) {
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n"+
			"data: [DONE]\n\n")
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	const n = 40
	for range n {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
		req.Header.Set("Authorization", "Bearer "+e.key)
		// A connection of its own, closed as soon as [DONE] is read.
		tr := &http.Transport{DisableKeepAlives: true}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && sc.Text() != "data: [DONE]" {
		}
		resp.Body.Close()
		tr.CloseIdleConnections()
	}
	for _, r := range e.recs.wait(t, n) {
		if r.Outcome != llmflow.OutcomeOK || r.Status != http.StatusOK || r.Estimated {
			t.Fatalf("a stream read to [DONE] recorded as %s %d (estimated %v)", r.Outcome, r.Status, r.Estimated)
		}
	}
}

// doneWatcher is a ResponseWriter that notes, when [DONE] is written to
// the client, how many records the accounting queue had taken by then.
type doneWatcher struct {
	*httptest.ResponseRecorder
	taken       func() int
	takenAtDone int
	sawDone     bool
}

func (w *doneWatcher) Write(p []byte) (int, error) {
	if !w.sawDone && bytes.Contains(p, []byte("data: [DONE]")) {
		w.sawDone = true
		w.takenAtDone = w.taken()
	}
	return w.ResponseRecorder.Write(p)
}

// TestStreamRecordedBeforeDone: a stream's accounting record is queued
// (with a spool: appended to it) before [DONE] is written to the client,
// so a gateway killed right after the client saw [DONE] has the record.
// It is complete (ok, 200, the engine's usage, a latency), there is one
// per request, and the client gets the same bytes as before: for chat and
// legacy completions streams.
func TestStreamRecordedBeforeDone(t *testing.T) {
	const stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n" +
		"data: [DONE]\n\n"
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, stream)
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	for i, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`},
		{"/v1/completions", `{"model":"m","stream":true,"prompt":"x"}`},
	} {
		w := &doneWatcher{ResponseRecorder: httptest.NewRecorder(), taken: func() int {
			// held (waiting or being written), then written: a record
			// moving between the two is counted once or twice, never 0
			held := e.gw.Recorder().Len()
			e.recs.mu.Lock()
			defer e.recs.mu.Unlock()
			return held + len(e.recs.recs)
		}}
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+e.key)
		req.Header.Set("Content-Type", "application/json")
		e.gw.ServeHTTP(w, req)
		if w.Code != 200 || !w.sawDone {
			t.Fatalf("%s: %d %q", c.path, w.Code, w.Body.String())
		}
		if w.takenAtDone < i+1 {
			t.Errorf("%s: [DONE] written to the client before the record was queued", c.path)
		}
		if want := strings.Replace(stream, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n", "", 1); w.Body.String() != want {
			t.Errorf("%s: the client got %q, want %q", c.path, w.Body.String(), want)
		}
	}
	// every record was queued before ServeHTTP returned: any is held or
	// written by now
	e.recs.wait(t, 2)
	// a batch being written counts in the queue (Len) until the write
	// returns, and in the writer already: wait for the queue to be empty,
	// then every record is in the writer, once
	deadline := time.Now().Add(30 * time.Second)
	for e.gw.Recorder().Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the accounting queue still holds %d records", e.gw.Recorder().Len())
		}
		time.Sleep(time.Millisecond)
	}
	e.recs.mu.Lock()
	recs := append([]llmflow.Record(nil), e.recs.recs...)
	e.recs.mu.Unlock()
	if len(recs) != 2 {
		t.Fatalf("%d records for 2 streams", len(recs))
	}
	for _, r := range recs {
		if r.Outcome != llmflow.OutcomeOK || r.Status != 200 || r.Estimated || r.PromptTokens != 3 || r.CompletionTokens != 1 ||
			r.Latency <= 0 || r.TTFB <= 0 || r.TTFB > r.Latency || !r.Stream || r.RequestID == "" || r.GPUHours <= 0 {
			t.Errorf("record %+v", r)
		}
	}
}
