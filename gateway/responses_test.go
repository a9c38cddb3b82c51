package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/vllmsim"
)

var responsesSeeds = []string{
	`{"model":"m","input":"hi"}`,
	`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"instructions":"be brief","max_output_tokens":20}`,
	`{"model":"m","input":"hi","stream":true,"stream_options":{"include_obfuscation":false}}`,
	`{"model":"m","input":"hi","store":true,"priority":-100,"cache_salt":"x","request_id":"r","max_tokens":5,"max_output_tokens":7}`,
	`{"model":"m","input":"hi","max_output_tokens":null,"background":false,"previous_response_id":null,"conversation":null}`,
	`{"model":"m","input":"hi","\u0073tore":true,"max_output_tokens":3,"max_output_tokens":4}`,
}

func TestResponsesRewrite(t *testing.T) {
	for _, body := range responsesSeeds {
		for _, limit := range []int64{0, 9} {
			checkResponsesRewrite(t, []byte(body), limit, true)
		}
	}
}

func TestResponsesParse(t *testing.T) {
	for _, tc := range []struct {
		body          string
		prompt        int
		maxOutput     int64
		bad, refusal  string
		stream, reply bool
	}{
		{body: `{"model":"m","input":"hello","instructions":"be brief"}`, prompt: len(`"hello"`) + len(`"be brief"`)},
		{body: `{"model":"m","input":"x","max_output_tokens":12,"max_tokens":3,"max_completion_tokens":4}`, prompt: 3, maxOutput: 12},
		{body: `{"model":"m","input":"x","max_output_tokens":0}`, prompt: 3, bad: "max_output_tokens"},
		{body: `{"model":"m","input":"x","max_output_tokens":1.5}`, prompt: 3, bad: "max_output_tokens"},
		{body: `{"model":"m","input":"x","stream":true,"stream_options":{"include_obfuscation":true}}`, prompt: 3, stream: true},
		{body: `{"model":"m","input":"x","stream_options":{}}`, refusal: "stream_options"},
		{body: `{"model":"m","input":"x","stream":true,"stream_options":[]}`, refusal: "stream_options"},
		{body: `{"model":"m","input":"x","previous_response_id":"resp_1"}`, refusal: "previous_response_id"},
		{body: `{"model":"m","input":"x","conversation":{"id":"conv_1"}}`, refusal: "conversation"},
		{body: `{"model":"m","input":"x","background":true}`, refusal: "background"},
		{body: `{"model":"m","input":"x","stream":1}`, refusal: "stream"},
		{body: `{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{}},{"type":"custom","name":"g"}]}`, prompt: 3},
		{body: `{"model":"m","input":"x","tools":[]}`, prompt: 3},
		{body: `{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"web_search_preview"}]}`, refusal: "tools"},
		{body: `{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"s"}]}`, refusal: "tools"},
		{body: `{"model":"m","input":"x","tools":{"type":"function"}}`, refusal: "tools"},
	} {
		rq, err := parseRequest([]byte(tc.body), engine.Responses)
		if tc.refusal != "" {
			var le *llmflow.Error
			if err == nil || !errorsAs(err, &le) || le.Param != tc.refusal || le.Code != llmflow.EINVALID {
				t.Errorf("%s: %v, want a 400 naming %s", tc.body, err, tc.refusal)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if !rq.responses || rq.promptBytes != tc.prompt || rq.maxOutput != tc.maxOutput || rq.badOutput != tc.bad ||
			rq.stream != tc.stream || rq.wantsUsage || rq.resumable(engine.Responses) {
			t.Errorf("%s: %+v", tc.body, rq)
		}
	}
}

func errorsAs(err error, le **llmflow.Error) bool {
	e, ok := err.(*llmflow.Error)
	*le = e
	return ok
}

// checkResponsesRewrite checks the upstream body made from a Responses API
// body: valid JSON, every key once, no stripped field, the gateway's
// model, salt and priority, store false, the output limit the gateway set
// (else the client's) as max_output_tokens, the client's stream_options,
// and every other member as encoding/json decodes it.
func checkResponsesRewrite(t testing.TB, body []byte, limit int64, mustParse bool) {
	t.Helper()
	rq, err := parseRequest(body, engine.Responses)
	if err != nil {
		if mustParse {
			t.Fatalf("parse %s: %v", body, err)
		}
		return
	}
	out := rq.encode(upstreamBody{engine: &vllm, model: "up/model", cacheSalt: "salt", priority: 7, withPrio: true, outputLimit: limit})
	if !json.Valid(out) {
		t.Fatalf("invalid upstream body %q from %q", out, body)
	}
	keys, vals := topLevel(t, out)
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Fatalf("key %q twice in %s", k, out)
		}
		seen[k] = true
		if k != "cache_salt" && k != "priority" && slices.Contains(engine.Stripped, k) {
			t.Fatalf("stripped field %q in %s", k, out)
		}
	}
	if vals["model"] != "up/model" || vals["cache_salt"] != "salt" || vals["priority"] != json.Number("7") || vals["store"] != false {
		t.Fatalf("gateway fields wrong in %s", out)
	}
	var client map[string]any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&client); err != nil {
		t.Fatalf("accepted a body encoding/json refuses: %v", err)
	}
	for k, v := range client {
		switch {
		case k == "model" || k == "store" || slices.Contains(engine.Stripped, k):
		case k == "max_output_tokens" && limit > 0:
		case !reflect.DeepEqual(vals[k], v):
			t.Fatalf("member %q: upstream %v, client %v", k, vals[k], v)
		}
	}
	if limit > 0 && vals["max_output_tokens"] != json.Number(strconv.FormatInt(limit, 10)) {
		t.Fatalf("max_output_tokens %v, want %d: %s", vals["max_output_tokens"], limit, out)
	}
	if _, ok := client["stream_options"]; !ok && seen["stream_options"] {
		t.Fatalf("stream_options added: %s", out)
	}
	// what the tokenizer would be sent: nothing, or chat messages
	if m := rq.responsesMessages(); m != nil {
		var msgs []struct {
			Role    *string         `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(m, &msgs); err != nil || len(msgs) == 0 || msgs[0].Role == nil || len(msgs[0].Content) == 0 {
			t.Fatalf("messages %s from %s: %v", m, body, err)
		}
	}
}

func FuzzResponsesRewrite(f *testing.F) {
	for _, s := range responsesSeeds {
		f.Add([]byte(s), int64(0))
	}
	f.Add([]byte(responsesSeeds[1]), int64(5))
	f.Fuzz(func(t *testing.T, body []byte, limit int64) {
		checkResponsesRewrite(t, body, max(0, limit%1000), false)
	})
}

// responsesEvent is one event of a Responses stream as a client reads it.
type responsesEvent struct {
	name string
	data map[string]any
}

func readResponsesStream(t *testing.T, resp *http.Response) []responsesEvent {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %q: %s", resp.StatusCode, ct, b)
	}
	var out []responsesEvent
	var cur responsesEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			cur.data = nil
			if err := json.Unmarshal([]byte(line[len("data: "):]), &cur.data); err != nil {
				cur.data = map[string]any{"undecodable": line} // the stream broke off inside it
			}
		case line == "":
			out = append(out, cur)
			cur = responsesEvent{}
		}
	}
	return out // an incomplete last event is left out
}

// TestResponsesThroughGateway: /v1/responses through the gateway to
// vllmsim under a budget, streamed and not: the engine gets the priority,
// the salt, store false, the output limit the budget held; the client gets
// the model it asked for and the engine's usage; the record has that usage,
// its cost, and was charged to the budget.
func TestResponsesThroughGateway(t *testing.T) {
	sim, hs := simUpstream(t, time.Millisecond)
	records := newFakeRecords()
	e, _ := budgetEnv(t, []string{hs.URL}, "", func(o *Options) { o.Records = records })
	// 1 per million input tokens, 10 per million output: 0.001 pays for
	// at most 96 output tokens after the prompt hold
	putBudget(t, e, `{"kind":"team","name":"lab-nlp","period":"day","max_cost":0.001}`)
	input := `"input":[{"role":"user","content":[{"type":"input_text","text":"0123456789abcdef"}]}]`

	// not streamed, the client's limit within the budget
	resp := e.post(t, "/v1/responses", `{"model":"m",`+input+`,"instructions":"0123456789abcdef","max_output_tokens":3,"store":true,"priority":-9}`)
	var got struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Status string `json:"status"`
		Output []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	gatewaytest.DecodeJSON(t, resp, &got)
	if resp.StatusCode != 200 || got.Object != "response" || got.Model != "m" || got.Status != "incomplete" ||
		got.Output[0].Content[0].Text != "tok0 tok1 tok2 " || got.Usage.InputTokens != 8 || got.Usage.OutputTokens != 3 {
		t.Fatalf("%d %+v", resp.StatusCode, got)
	}
	r := sim.Received()
	sent := r[len(r)-1]
	if sent.Path != "/v1/responses" || sent.Body["store"] != false || sent.Body["max_output_tokens"] != 3.0 ||
		sent.Body["cache_salt"] == nil || sent.Header.Get(vllmsim.PriorityHeader) != "0" || sent.Body["model"] != "sim/llama" {
		t.Fatalf("engine got %s %v", sent.RawBody, sent.Header)
	}
	if _, ok := sent.Body["stream_options"]; ok {
		t.Fatalf("stream_options sent: %s", sent.RawBody)
	}

	// streamed, no limit: the budget's hold bounds the engine
	resp = e.post(t, "/v1/responses", `{"model":"m",`+input+`,"stream":true}`)
	held, _ := strconv.Atoi(resp.Header.Get(outputHeader))
	events := readResponsesStream(t, resp)
	r = sim.Received()
	sent = r[len(r)-1]
	if held < 1 || held > 96 || sent.Body["max_output_tokens"] != float64(held) {
		t.Fatalf("held %d, engine's max_output_tokens %v", held, sent.Body["max_output_tokens"])
	}
	var text strings.Builder
	for i, ev := range events {
		if ev.data["type"] != ev.name || ev.data["sequence_number"] != float64(i) {
			t.Fatalf("event %d relayed as %s %v", i, ev.name, ev.data)
		}
		if resp, ok := ev.data["response"].(map[string]any); ok && resp["model"] != "m" {
			t.Fatalf("%s: model %v reached the client", ev.name, resp["model"])
		}
		if d, ok := ev.data["delta"].(string); ok {
			text.WriteString(d)
		}
	}
	if last := events[len(events)-1]; last.name != "response.incomplete" || text.String() != tokens(0, held) {
		t.Fatalf("last event %s, text %q", last.name, text.String())
	}

	recs := records.wait(t, 2)
	for i, want := range []struct{ prompt, completion int64 }{{8, 3}, {4, int64(held)}} {
		rec := recs[i]
		if rec.Outcome != llmflow.OutcomeOK || rec.Estimated || rec.PromptTokens != want.prompt ||
			rec.CompletionTokens != want.completion || rec.GPUHours <= 0 || rec.Model != "m" || rec.Stream != (i == 1) {
			t.Errorf("record %d: %+v", i, rec)
		}
	}
	// a stream is recorded at its terminal event, settled when it ends
	team := budgets.Scope{Kind: budgets.KindTeam, Name: "lab-nlp"}
	gatewaytest.WaitFor(t, func() bool { return budgetStatus(t, e, team).Held == 0 })
	if st := budgetStatus(t, e, team); st.Spent < recs[0].GPUHours+recs[1].GPUHours-1e-12 {
		t.Errorf("budget %+v after %v + %v", st, recs[0].GPUHours, recs[1].GPUHours)
	}
	series := `llmflow_tokens_total{kind="completion",model="m",org="etabA",pool="p",team="lab-nlp"}`
	gatewaytest.WaitFor(t, func() bool { return metricValue(e.metricsText(t), series) == float64(3+held) })

	// what the gateway cannot serve, and a limit it cannot hold by
	for body, param := range map[string]string{
		`{"model":"m","input":"x","previous_response_id":"resp_1"}`: "previous_response_id",
		`{"model":"m","input":"x","background":true}`:               "background",
		`{"model":"m","input":"x","max_output_tokens":0}`:           "max_output_tokens",
	} {
		resp := e.post(t, "/v1/responses", body)
		var eb errorBody
		gatewaytest.DecodeJSON(t, resp, &eb)
		if resp.StatusCode != 400 || eb.Error.Param == nil || *eb.Error.Param != param {
			t.Errorf("%s: %d %+v", body, resp.StatusCode, eb)
		}
	}
}

// A borrower on /v1/responses cannot be resumed: on a pool that reclaims
// by preemption it leaves the headroom free and is never preempted.
func TestReclaimNeverPreemptsResponses(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimPreempt, 1)
	keyB := e.newKey(t, "lab-chem")
	body := `{"model":"m","stream":true,"max_output_tokens":400,"input":"borrower"}`
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := gatewaytest.Post(t, e.srv, keyB, "/v1/responses", body)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	// three run (capacity 4 less headroom 1), the fourth waits in the
	// gateway: the engine runs them once it steps
	gatewaytest.WaitFor(t, func() bool {
		_, w := e.gw.pools["p"].queue.lengths()
		return w == 1 && sim.RunningBy(who)["borrower"] == 3
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		ask(t, e, e.key, "/v1/responses", `{"model":"m","max_output_tokens":5,"input":"owner"}`)
	}()
	gatewaytest.WaitFor(t, func() bool { return sim.RunningBy(who)["owner"] == 1 })
	wg.Wait()
	for _, r := range e.recs.wait(t, 5) {
		if r.Preemptions != 0 || r.Outcome != llmflow.OutcomeOK || r.Estimated {
			t.Errorf("%s (%s): %d preemptions, outcome %s, estimated %v", r.RequestID, r.Team, r.Preemptions, r.Outcome, r.Estimated)
		}
	}
}

// The outcome and usage of a Responses stream, from the sse package's
// transcripts of what engines send: the terminal event's usage, or an
// estimate from the deltas forwarded when it never came.
func TestResponsesStreamOutcome(t *testing.T) {
	for _, tc := range []struct {
		file       string
		outcome    llmflow.Outcome
		estimated  llmflow.EstimateReason
		completion int64
	}{
		{"vllm_completed", llmflow.OutcomeOK, "", 3},
		{"vllm_incomplete", llmflow.OutcomeOK, "", 3},
		{"done_after", llmflow.OutcomeOK, "", 3},
		{"truncated", llmflow.OutcomeIncomplete, llmflow.EstimateIncomplete, 2},
		{"failed", llmflow.OutcomeUpstreamError, llmflow.EstimateUpstreamError, 1},
		{"error_event", llmflow.OutcomeUpstreamError, llmflow.EstimateUpstreamError, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			transcript, err := os.ReadFile(filepath.Join("..", "sse", "testdata", "responses", tc.file+".sse"))
			if err != nil {
				t.Fatal(err)
			}
			up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Write(transcript)
			})
			e := newEnv(t, []string{up.srv.URL}, "")
			events := readResponsesStream(t, e.post(t, "/v1/responses", `{"model":"m","input":"hello there","stream":true}`))
			if len(events) == 0 {
				t.Fatal("no events relayed")
			}
			rec := e.recs.wait(t, 1)[0]
			if rec.Outcome != tc.outcome || rec.EstimateReason != tc.estimated || rec.CompletionTokens != tc.completion {
				t.Fatalf("record %+v", rec)
			}
			if tc.estimated == "" && (rec.PromptTokens != 42 || rec.CachedTokens != 32 || rec.Estimated) {
				t.Fatalf("usage not the engine's: %+v", rec)
			}
			if tc.estimated != "" && rec.PromptTokens != int64(len(`"hello there"`)+3)/4 {
				t.Fatalf("prompt estimate %d", rec.PromptTokens)
			}
		})
	}
}

// Usage a non-streamed Responses answer carries is believed only when it
// is sound, as chat's.
func TestResponsesHostileUsage(t *testing.T) {
	for _, tc := range []struct {
		usage  string
		reason llmflow.EstimateReason
	}{
		{`{"input_tokens":12,"output_tokens":2,"total_tokens":14,"input_tokens_details":{"cached_tokens":4}}`, ""},
		{`{"input_tokens":-5,"output_tokens":2}`, llmflow.EstimateInvalidUsage},
		{`{"input_tokens":5,"output_tokens":1.5}`, llmflow.EstimateInvalidUsage},
		{`{"input_tokens":10,"output_tokens":1,"input_tokens_details":{"cached_tokens":11}}`, llmflow.EstimateInvalidUsage},
		{`{"input_tokens":37,"output_tokens":1}`, llmflow.EstimateInvalidUsage}, // over "hi" + the chat template
		{`{"prompt_tokens":12,"completion_tokens":2}`, llmflow.EstimateNoUsage}, // chat's names: not reported
	} {
		up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"resp_1","object":"response","model":"sim/llama","status":"completed","output":[],"usage":`+tc.usage+`}`)
		})
		e := newEnv(t, []string{up.srv.URL}, "")
		var got struct {
			Model string `json:"model"`
		}
		resp := e.post(t, "/v1/responses", `{"model":"m","input":"hi"}`)
		gatewaytest.DecodeJSON(t, resp, &got)
		if resp.StatusCode != 200 || got.Model != "m" {
			t.Fatalf("%d %+v", resp.StatusCode, got)
		}
		rec := e.recs.wait(t, 1)[0]
		if tc.reason == llmflow.EstimateNoUsage {
			if !rec.Estimated || rec.EstimateReason != tc.reason || rec.PromptTokens != 1 || rec.CompletionTokens == 0 {
				t.Errorf("%s: %+v", tc.usage, rec)
			}
			continue
		}
		checkUsageRecord(t, rec, tc.reason != "")
	}
}

// A client that leaves a Responses stream cancels the engine request at
// once. vLLM counts no running usage on this endpoint: the prompt is
// counted by the engine's tokenizer (the input rendered as chat messages),
// the completion is one token per delta event forwarded; an input the
// gateway cannot render (an image) leaves the prompt estimated.
func TestResponsesClientLeaves(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		prompt      int64 // 33 text bytes: the engine counts 8; the estimate is body bytes / 4
		estimated   bool
	}{
		{"text", `"0123456789abcdef"`, 8, false},
		{"image", `[{"role":"user","content":[{"type":"input_text","text":"0123456789abcdef"},{"type":"input_image","image_url":"x"}]}]`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, hs := simUpstream(t, 5*time.Millisecond)
			e := newEnv(t, []string{hs.URL}, "")
			body := `{"model":"m","instructions":"be brief and kind","input":` + tc.input + `,"max_output_tokens":2000,"stream":true}`
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/responses", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+e.key)
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			deltas := 0
			sc := bufio.NewScanner(resp.Body)
			for deltas < 5 && sc.Scan() {
				if sc.Text() == "event: response.output_text.delta" {
					deltas++
				}
			}
			resp.Body.Close()
			rec := e.recs.wait(t, 1)[0]
			want := tc.prompt
			if tc.estimated {
				want = int64(len(tc.input)+len(`"be brief and kind"`)+3) / 4
			}
			if rec.Outcome != llmflow.OutcomeClientGone || rec.Estimated != tc.estimated || rec.PromptTokens != want ||
				rec.CompletionTokens < int64(deltas) || rec.CompletionTokens > 2000 {
				t.Fatalf("record %+v after %d deltas read, want prompt %d", rec, deltas, want)
			}
			gatewaytest.WaitFor(t, func() bool { return sim.Stats().Aborted == 1 })
			t.Logf("charged %d completion tokens, the engine generated %d", rec.CompletionTokens, sim.Stats().GenerationTokens)
		})
	}
}

func TestResponsesMessages(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"input":"hi","instructions":"be brief"}`, `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`},
		{`{"input":[{"role":"user","content":"a"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]}]}`,
			`[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"b"}]}]`},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, ``},
		{`{"input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`, ``},
		{`{"input":[{"content":"no role"}]}`, ``},
		{`{"input":5}`, ``},
		{`{"instructions":7,"input":"x"}`, ``},
		{`{"input":null}`, ``},
	} {
		rq, err := parseRequest([]byte(`{"model":"m",`+tc.body[1:]), engine.Responses)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(rq.responsesMessages()); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.body, got, tc.want)
		}
	}
}

// An engine that streams past the max_output_tokens it was sent is cut: a
// Responses error event ends the client's stream, no terminal event.
func TestResponsesEngineOverruns(t *testing.T) {
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"model\":\"sim/llama\",\"usage\":null}}\n\n")
		for i := range 50 {
			fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"delta\":\"x\"}\n\n", i+1)
		}
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	events := readResponsesStream(t, e.post(t, "/v1/responses", `{"model":"m","input":"hello","max_output_tokens":3,"stream":true}`))
	last := events[len(events)-1]
	if last.name != "error" || last.data["type"] != "error" || len(events) != 1+3+2+1 { // created, 3 tokens + 2 spare, error
		t.Fatalf("%d events, last %s %v", len(events), last.name, last.data)
	}
	rec := e.recs.wait(t, 1)[0]
	if rec.Outcome != llmflow.OutcomeUpstreamError || rec.CompletionTokens > 5 {
		t.Fatalf("record %+v", rec)
	}
}
