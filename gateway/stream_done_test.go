package gateway

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

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
