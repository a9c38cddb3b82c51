package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAnswersCarryClientModelName: the engine answers with its own model
// name (upstream_model "sim/llama"); the client sees the name it asked for,
// in a plain answer and in every stream chunk.
func TestAnswersCarryClientModelName(t *testing.T) {
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range []string{"Hel", "lo"} {
				io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"sim/llama","choices":[{"index":0,"delta":{"content":"`+c+`"}}]}`+"\n\n")
			}
			io.WriteString(w, `data: {"id":"c","model":"sim/llama","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`+"\n\n")
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"sim/llama","choices":[{"index":0,"message":{"role":"assistant","content":"the model is \"sim/llama\""}}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	})
	e := newEnv(t, []string{up.srv.URL}, "")

	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %s: %v", resp.StatusCode, b, err)
	}
	if ans.Model != "m" {
		t.Errorf("answer model = %q, want the client's m", ans.Model)
	}
	if len(ans.Choices) != 1 || ans.Choices[0].Message.Content != `the model is "sim/llama"` {
		t.Errorf("content changed: %s", b)
	}
	if resp.ContentLength != int64(len(b)) {
		t.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(b))
	}

	resp = e.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "sim/llama") {
		t.Errorf("stream carries the engine's model name:\n%s", b)
	}
	if n := strings.Count(string(b), `"model":"m"`); n != 3 {
		t.Errorf("%d chunks with the client's model name, want 3:\n%s", n, b)
	}
}

func TestGetModel(t *testing.T) {
	e := newEnv(t, []string{"http://127.0.0.1:1"}, "")
	get := func(path string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.key)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	if code, v := get("/v1/models/m"); code != http.StatusOK || v["id"] != "m" || v["object"] != "model" {
		t.Errorf("GET /v1/models/m = %d %v", code, v)
	}
	code, v := get("/v1/models/nope/x")
	errObj, _ := v["error"].(map[string]any)
	if code != http.StatusNotFound || errObj == nil || errObj["message"] == nil || errObj["type"] != "invalid_request_error" || errObj["param"] != "model" {
		t.Errorf("GET unknown model = %d %v, want 404 in the OpenAI error shape", code, v)
	}
}
