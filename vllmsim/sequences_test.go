package vllmsim

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSequences: n, best_of and a list of prompts generate a sequence
// each, as vLLM does, and usage counts the tokens of all of them, unary
// and streamed.
func TestSequences(t *testing.T) {
	_, hs := newTestServer(t, Config{})
	for _, tc := range []struct {
		path, extra string
		choices     int
	}{
		{"/v1/chat/completions", `"messages":[{"role":"user","content":"hi"}]`, 1},
		{"/v1/chat/completions", `"messages":[{"role":"user","content":"hi"}],"n":3`, 3},
		{"/v1/completions", `"prompt":"hi","n":2,"best_of":4`, 4},
		{"/v1/completions", `"prompt":["a","b","c"],"n":2`, 6},
		{"/v1/completions", `"prompt":[[1,2],[3]]`, 2},
		{"/v1/completions", `"prompt":[1,2,3]`, 1},
	} {
		for _, stream := range []bool{false, true} {
			body := `{"model":"` + testModel + `",` + tc.extra + `,"max_tokens":5`
			if stream {
				body += `,"stream":true,"stream_options":{"include_usage":true}`
			}
			resp := post(t, t.Context(), hs.URL+tc.path, body+`}`, nil)
			var completion, choices int
			if stream {
				seen := map[float64]bool{}
				for _, ev := range readSSE(t, resp) {
					var c struct {
						Choices []struct{ Index float64 } `json:"choices"`
						Usage   *struct {
							CompletionTokens int `json:"completion_tokens"`
						} `json:"usage"`
					}
					if strings.HasPrefix(ev, "[DONE]") || json.Unmarshal([]byte(ev), &c) != nil {
						continue
					}
					for _, ch := range c.Choices {
						seen[ch.Index] = true
					}
					if c.Usage != nil {
						completion = c.Usage.CompletionTokens
					}
				}
				choices = len(seen)
			} else {
				a := decode[struct {
					Choices []any `json:"choices"`
					Usage   struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}](t, resp)
				choices, completion = len(a.Choices), a.Usage.CompletionTokens
			}
			if choices != tc.choices || completion != 5*tc.choices {
				t.Errorf("%s %s stream=%v: %d choices, %d completion tokens; want %d and %d", tc.path, tc.extra, stream,
					choices, completion, tc.choices, 5*tc.choices)
			}
		}
	}
	resp := post(t, t.Context(), hs.URL+"/v1/completions", `{"model":"`+testModel+`","prompt":"hi","n":3,"best_of":2}`, nil)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("best_of < n: %d, want 400", resp.StatusCode)
	}
}
