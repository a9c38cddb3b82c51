package vllmsim

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type responseUsageJSON struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	TotalTokens        int `json:"total_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

type responseJSON struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Model             string `json:"model"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *responseUsageJSON `json:"usage"`
}

// 40 bytes of input and instructions: 10 prompt tokens.
const responsesBody40 = `{"model":"sim/llama","instructions":"0123456789","input":[{"role":"user","content":[{"type":"input_text","text":"012345678901234567890123456789"}]}]`

func TestResponsesNonStream(t *testing.T) {
	for _, tc := range []struct {
		name       string
		body       string
		text       string
		status     string
		incomplete string
		input, out int
	}{
		{"max_output_tokens", responsesBody40 + `,"max_output_tokens":3}`, "tok0 tok1 tok2 ", "incomplete", "max_output_tokens", 10, 3},
		{"default limit", responsesBody40 + `}`, "", "completed", "", 10, 16},
		{"string input", `{"model":"sim/llama","input":"0123456789012345","max_output_tokens":1}`, "tok0 ", "incomplete", "max_output_tokens", 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, hs := newTestServer(t, Config{})
			resp := post(t, t.Context(), hs.URL+"/v1/responses", tc.body, map[string]string{PriorityHeader: "0"})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			got := decode[responseJSON](t, resp)
			if !strings.HasPrefix(got.ID, "resp_") || got.Object != "response" || got.Model != testModel || got.Status != tc.status {
				t.Fatalf("envelope %+v", got)
			}
			if (got.IncompleteDetails == nil) != (tc.incomplete == "") ||
				(got.IncompleteDetails != nil && got.IncompleteDetails.Reason != tc.incomplete) {
				t.Fatalf("incomplete_details %+v", got.IncompleteDetails)
			}
			if len(got.Output) != 1 || got.Output[0].Type != "message" || got.Output[0].Role != "assistant" ||
				len(got.Output[0].Content) != 1 || got.Output[0].Content[0].Type != "output_text" {
				t.Fatalf("output %+v", got.Output)
			}
			if tc.text != "" && got.Output[0].Content[0].Text != tc.text {
				t.Fatalf("text %q", got.Output[0].Content[0].Text)
			}
			want := &responseUsageJSON{InputTokens: tc.input, OutputTokens: tc.out, TotalTokens: tc.input + tc.out}
			if diff := cmp.Diff(want, got.Usage); diff != "" {
				t.Fatalf("usage (-want +got):\n%s", diff)
			}
			if st := s.Stats(); st.Completed != 1 || st.Running != 0 || st.UsedBlocks != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// sseEvent is one event of a Responses stream.
type sseEvent struct {
	name string
	data map[string]any
}

func readTypedSSE(t *testing.T, resp *http.Response) []sseEvent {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[len("data: "):]), &cur.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		case line == "":
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	return out
}

func TestResponsesStream(t *testing.T) {
	_, hs := newTestServer(t, Config{})
	resp := post(t, t.Context(), hs.URL+"/v1/responses", responsesBody40+`,"max_output_tokens":3,"stream":true}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := readTypedSSE(t, resp)
	var names []string
	var text strings.Builder
	for i, ev := range events {
		names = append(names, ev.name)
		if ev.data["type"] != ev.name || ev.data["sequence_number"] != float64(i) {
			t.Fatalf("event %d: %s %v", i, ev.name, ev.data)
		}
		if d, ok := ev.data["delta"].(string); ok {
			text.WriteString(d)
		}
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if text.String() != "tok0 tok1 tok2 " {
		t.Fatalf("text %q", text.String())
	}
	first := events[0].data["response"].(map[string]any)
	if first["usage"] != nil || first["status"] != "in_progress" || first["model"] != testModel {
		t.Fatalf("created %v", first)
	}
	last := events[len(events)-1].data["response"].(map[string]any)
	u, _ := json.Marshal(last["usage"])
	if string(u) != `{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}` {
		t.Fatalf("usage %s", u)
	}
	// No limit: the simulated model stops, the response is completed.
	events = readTypedSSE(t, post(t, t.Context(), hs.URL+"/v1/responses", responsesBody40+`,"stream":true}`, nil))
	if ev := events[len(events)-1]; ev.name != "response.completed" || ev.data["response"].(map[string]any)["status"] != "completed" {
		t.Fatalf("last event %s %v", ev.name, ev.data)
	}
}

func TestResponsesRequests(t *testing.T) {
	s, hs := newTestServer(t, Config{Sched: SchedConfig{Policy: PolicyPriority}})
	for _, tc := range []struct {
		name   string
		body   string
		header map[string]string
		status int
		prio   int
	}{
		{"header over body", responsesBody40 + `,"priority":3,"max_output_tokens":1}`, map[string]string{PriorityHeader: "7"}, 200, 7},
		{"body priority", responsesBody40 + `,"priority":3,"max_output_tokens":1}`, nil, 200, 3},
		{"unknown model", `{"model":"nope","input":"x"}`, nil, 404, 0},
		{"background", responsesBody40 + `,"background":true}`, nil, 400, 0},
		{"previous response", responsesBody40 + `,"previous_response_id":"resp_1"}`, nil, 404, 0},
		{"bad input", `{"model":"sim/llama","input":[]}`, nil, 400, 0},
		{"zero limit", responsesBody40 + `,"max_output_tokens":0}`, nil, 400, 0},
		{"bad salt", responsesBody40 + `,"cache_salt":""}`, nil, 400, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, t.Context(), hs.URL+"/v1/responses", tc.body, tc.header)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			r := s.Received()
			if got := r[len(r)-1]; tc.status == 200 && got.Priority != tc.prio {
				t.Fatalf("priority %d, want %d", got.Priority, tc.prio)
			}
		})
	}
}

func TestGetModel(t *testing.T) {
	_, hs := newTestServer(t, Config{})
	resp, err := http.Get(hs.URL + "/v1/models/sim/llama")
	if err != nil {
		t.Fatal(err)
	}
	card := decode[map[string]any](t, resp)
	if resp.StatusCode != 200 || card["id"] != testModel || card["object"] != "model" || card["owned_by"] != "vllm" {
		t.Fatalf("%d %v", resp.StatusCode, card)
	}
	resp, err = http.Get(hs.URL + "/v1/models/sim%2Fllama") // an SDK escapes the slash
	if err != nil {
		t.Fatal(err)
	}
	if card := decode[map[string]any](t, resp); resp.StatusCode != 200 || card["id"] != testModel {
		t.Fatalf("escaped: %d %v", resp.StatusCode, card)
	}
	resp, err = http.Get(hs.URL + "/v1/models/nope")
	if err != nil {
		t.Fatal(err)
	}
	if e := decode[errorBody](t, resp); resp.StatusCode != 404 || !strings.Contains(e.Error.Message, "does not exist") {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
}
