package sse_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/sse"
)

// hookWriter is a dst that keeps what BeforeDone saw.
type hookWriter struct {
	bytes.Buffer
	calls   int
	written string // what had been written when BeforeDone was called
	res     sse.Result
}

func (w *hookWriter) BeforeDone(res sse.Result) {
	w.calls++
	w.written, w.res = w.String(), res
}

// TestCopyDoneHook: a DoneHook dst is told once, with the usage and Done
// set, before [DONE] is written; never for a stream cut short.
func TestCopyDoneHook(t *testing.T) {
	const body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n"
	w := &hookWriter{}
	res, err := sse.Copy(w, strings.NewReader(body+"data: [DONE]\n\n"), sse.Options{})
	if err != nil || !res.Done {
		t.Fatalf("Copy: %+v %v", res, err)
	}
	if w.calls != 1 || !w.res.Done || !w.res.HasUsage || w.res.Usage.CompletionTokens != 1 || w.res.Deltas != 1 {
		t.Fatalf("BeforeDone called %d times with %+v", w.calls, w.res)
	}
	if strings.Contains(w.written, "[DONE]") || !strings.HasSuffix(w.String(), "data: [DONE]\n\n") {
		t.Fatalf("written at BeforeDone %q, at the end %q", w.written, w.String())
	}
	cut := &hookWriter{}
	if res, _ := sse.Copy(cut, strings.NewReader(body), sse.Options{}); res.Done || cut.calls != 0 {
		t.Fatalf("a stream without [DONE]: Done %v, BeforeDone called %d times", res.Done, cut.calls)
	}
}
