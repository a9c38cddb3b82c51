package sse_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/go-llmflow/llmflow/sse"
)

func ExampleCopy() {
	upstream := strings.NewReader(`data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}` + "\n\n" +
		"data: [DONE]\n\n")
	// The client did not ask for usage: the usage chunk is dropped, but
	// reported. In the gateway, Flush is http.NewResponseController(w).Flush.
	res, err := sse.Copy(os.Stdout, upstream, sse.Options{KeepUsage: false, Flush: nil})
	if err != nil {
		fmt.Println("error:", err)
	}
	fmt.Printf("usage %+v, done %v, deltas %d\n", res.Usage, res.Done, res.Deltas)
	// Output:
	// data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}
	//
	// data: [DONE]
	//
	// usage {PromptTokens:5 CompletionTokens:1 TotalTokens:6 CachedTokens:0 Malformed:false NoPrompt:false NoCompletion:false}, done true, deltas 1
}
