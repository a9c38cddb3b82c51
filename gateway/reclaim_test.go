package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/sse"
	"github.com/go-llmflow/llmflow/vllmsim"
)

// reclaimEnv is a gateway with a pool of capacity 4 (etabA holds 3, etabB
// 1) in front of vllmsim behaving as vLLM V1 at max_num_seqs = 4 with KV to
// spare: it never preempts a running request for a waiting one of higher
// priority, so only the gateway can give etabA its slots back at once.
func reclaimEnv(t *testing.T, reclaim engine.Reclaim, headroom int, mod ...func(*Options)) (*testEnv, *vllmsim.Server) {
	t.Helper()
	sim := vllmsim.New(vllmsim.Config{APIKey: gatewaytest.UpstreamKey, StepInterval: 2 * time.Millisecond,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 4, KVBlocks: 1 << 16}})
	hs := httptest.NewServer(sim)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		sim.Close()
		hs.Close()
	})
	e := newEnv(t, []string{hs.URL}, "", append([]func(*Options){func(o *Options) {
		o.Config.Pools[0].Capacity = 4
		o.Config.Pools[0].Reclaim, o.Config.Pools[0].Headroom = reclaim, headroom
	}}, mod...)...)
	return e, sim
}

// who labels the engine's requests by their user message.
func who(r *vllmsim.Received) string {
	switch {
	case bytes.Contains(r.RawBody, []byte(`"owner`)):
		return "owner"
	case bytes.Contains(r.RawBody, []byte(`"borrower`)):
		return "borrower"
	}
	return "other"
}

// answer is what a client got for one request.
type answer struct {
	status          int
	text            string
	ids, created    map[string]bool
	models          map[string]bool
	roles, finishes int
	usage           *struct{ PromptTokens, CompletionTokens int64 }
	done            bool
	raw             string
}

// ask sends body to path with key and reads the whole answer (streamed or
// not).
func ask(t *testing.T, e *testEnv, key, path, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, ids: map[string]bool{}, created: map[string]bool{}, models: map[string]bool{}}
	type usage = struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	}
	type chunk struct {
		ID      string          `json:"id"`
		Created json.RawMessage `json:"created"`
		Model   string          `json:"model"`
		Choices []struct {
			Delta *struct {
				Role    *string `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			Message *struct {
				Content string `json:"content"`
			} `json:"message"`
			Text         *string `json:"text"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	take := func(c chunk) {
		a.ids[c.ID], a.created[string(c.Created)], a.models[c.Model] = true, true, true
		for _, ch := range c.Choices {
			switch {
			case ch.Delta != nil:
				if ch.Delta.Role != nil {
					a.roles++
				}
				if ch.Delta.Content != nil {
					a.text += *ch.Delta.Content
				}
			case ch.Message != nil:
				a.text += ch.Message.Content
			case ch.Text != nil:
				a.text += *ch.Text
			}
			if ch.FinishReason != nil {
				a.finishes++
			}
		}
		if c.Usage != nil {
			a.usage = &struct{ PromptTokens, CompletionTokens int64 }{c.Usage.PromptTokens, c.Usage.CompletionTokens}
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		a.raw = string(b)
		var c chunk
		if err := json.Unmarshal(b, &c); err != nil {
			t.Errorf("answer %q: %v", b, err)
		}
		take(c)
		a.done = true
		return a
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			a.done = true
			break
		}
		var c chunk
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Errorf("chunk %q: %v", line, err)
			continue
		}
		take(c)
	}
	return a
}

// tokens is the text vllmsim generates for an answer of n tokens.
func tokens(from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, "tok%d ", i)
	}
	return b.String()
}

// reclaimRun has etabB fill all four slots (one within its reservation,
// three borrowed from etabA) with answers of n tokens, then etabA return
// with three short requests; it returns etabB's answers (the within one
// first) once everything ended, after checking that etabA reached its
// reservation while etabB's borrowers still ran.
func reclaimRun(t *testing.T, e *testEnv, sim *vllmsim.Server, path, body func(who string, n int) string, n int) []answer {
	t.Helper()
	keyB := e.newKey(t, "lab-chem")
	var wg sync.WaitGroup
	answers := make([]answer, 4)
	var borrowersDone atomic.Int32
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = ask(t, e, keyB, path("borrower", n), body("borrower", n))
			borrowersDone.Add(1)
		}()
		// one at a time: the first is within etabB's reservation
		gatewaytest.WaitFor(t, func() bool { return sim.RunningBy(who)["borrower"] == i+1 })
	}
	owners := make([]answer, 3)
	var ownersDone atomic.Int32
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owners[i] = ask(t, e, e.key, path("owner", 100), body("owner", 100))
			ownersDone.Add(1)
		}()
	}
	// etabA runs its three slots while etabB's long answers are under way
	gatewaytest.WaitFor(t, func() bool { return sim.RunningBy(who)["owner"] == 3 || ownersDone.Load() > 0 })
	if st, done := sim.Stats(), borrowersDone.Load(); sim.RunningBy(who)["owner"] != 3 || done > 0 {
		t.Fatalf("etabA ran its reservation of 3 only after %d of etabB's answers ended (engine %+v)", done, st)
	}
	wg.Wait()
	for i, a := range owners {
		if a.status != http.StatusOK || !a.done || a.text != tokens(0, 100) {
			t.Errorf("owner %d: status %d done %v text %q", i, a.status, a.done, a.text)
		}
	}
	return answers
}

func reclaimChat(stream bool) func(who string, n int) string {
	return func(who string, n int) string {
		return fmt.Sprintf(`{"model":"m","stream":%v,"stream_options":%s,"max_tokens":%d,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":%q}]}`,
			stream, map[bool]string{true: `{"include_usage":true}`, false: "null"}[stream], n, who)
	}
}

func fixedPath(p string) func(string, int) string { return func(string, int) string { return p } }

// checkResumed checks etabB's answers against one it got alone, and the
// records: the borrowers were preempted and resumed, the request within
// etabB's reservation and etabA's never; nothing is left held.
func checkResumed(t *testing.T, e *testEnv, answers []answer, ref answer) {
	t.Helper()
	for i, a := range answers {
		if a.status != http.StatusOK || !a.done {
			t.Errorf("borrower %d: status %d, done %v: %s", i, a.status, a.done, a.raw)
			continue
		}
		if a.text != ref.text {
			t.Errorf("borrower %d: text differs from the unpreempted answer:\n got %.200q…\nwant %.200q…", i, a.text, ref.text)
		}
		if len(a.ids) != 1 || len(a.created) != 1 || len(a.models) != 1 || !a.models["m"] {
			t.Errorf("borrower %d: ids %v created %v models %v: want one each, model m", i, a.ids, a.created, a.models)
		}
		if a.roles > 1 || a.finishes != 1 {
			t.Errorf("borrower %d: %d role chunks, %d finish reasons: want at most 1 and 1", i, a.roles, a.finishes)
		}
		if a.usage == nil || ref.usage == nil || *a.usage != *ref.usage {
			t.Errorf("borrower %d: usage %+v, unpreempted %+v", i, a.usage, ref.usage)
		}
	}
	recs := e.recs.wait(t, 4+3+1)
	preempted := 0
	for _, r := range recs {
		switch {
		case r.Team == "lab-nlp" && r.Preemptions > 0:
			t.Errorf("etabA's request %s was preempted", r.RequestID)
		case r.Team == "lab-chem" && r.Priority < fairshare.PriorityBorrowBase && r.Preemptions > 0:
			t.Errorf("etabB's request within its reservation %s (priority %d) was preempted", r.RequestID, r.Priority)
		case r.Preemptions > 0:
			preempted++
			if r.RecomputedTokens <= 0 {
				t.Errorf("preempted %s: recomputed %d tokens", r.RequestID, r.RecomputedTokens)
			}
			if r.Outcome != llmflow.OutcomeOK || r.Estimated || r.PromptTokens != ref.usage.PromptTokens || r.CompletionTokens != ref.usage.CompletionTokens {
				t.Errorf("preempted %s: record %+v: want ok, exact usage %+v", r.RequestID, r, ref.usage)
			}
		}
	}
	if preempted != 3 {
		t.Errorf("%d of etabB's 3 borrowers preempted", preempted)
	}
	gatewaytest.WaitFor(t, func() bool {
		q := e.gw.pools["p"].queue
		in, waiting := q.lengths()
		q.mu.Lock()
		pending := q.pending
		q.mu.Unlock()
		return in == 0 && waiting == 0 && pending == 0 && e.gw.FairshareReport().Pools[0].InFlight == 0
	})
}

// A returning owner takes its slots back from streaming borrowers at once;
// each borrower's stream only pauses and ends exactly as it would have.
func TestReclaimPreemptsAndResumesStreams(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimPreempt, 1)
	const n = 300
	resumedAsAlone(t, e, sim, "/v1/chat/completions", reclaimChat(true), n)
	// the resumed requests continued the answer as vLLM's chat API does
	var sent int
	for _, r := range sim.Received() {
		if who(&r) == "borrower" {
			sent++
		}
		if r.Body["continue_final_message"] == true && r.Body["add_generation_prompt"] == false {
			msgs := r.Body["messages"].([]any)
			last := msgs[len(msgs)-1].(map[string]any)
			if last["role"] != "assistant" || !strings.HasPrefix(tokens(0, n), last["content"].(string)) {
				t.Errorf("resumed with final message %v", last)
			}
		}
	}
	// the one alone, the four, and the three preempted sent again (with
	// the text so far to continue, or as they were if preempted before
	// their first token)
	if sent < 1+4+3 {
		t.Errorf("%d borrower requests reached the engine, want ≥ 8", sent)
	}
}

// On an engine without priorities (llama-server: scheduler = "gateway")
// the owners wait in the gateway's queue, and take the borrowers' slots
// from there.
func TestReclaimGatewayQueue(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimPreempt, 1, func(o *Options) {
		o.Config.Pools[0].Engine, _ = engine.For("gateway", "")
	})
	const n = 300
	resumedAsAlone(t, e, sim, "/v1/chat/completions", reclaimChat(true), n)
}

// resumedAsAlone has etabB ask alone for an answer of n tokens (within
// its reservation: never preempted), then runs reclaimRun, and checks that
// every preempted borrower's answer equals that one.
func resumedAsAlone(t *testing.T, e *testEnv, sim *vllmsim.Server, path string, body func(string, int) string, n int) {
	t.Helper()
	keyB := e.newKey(t, "lab-chem")
	ref := ask(t, e, keyB, path, body("borrower", n))
	if ref.text != tokens(0, n) || ref.usage == nil {
		t.Fatalf("unpreempted answer %q, usage %+v", ref.text, ref.usage)
	}
	e.recs.wait(t, 1)
	checkResumed(t, e, reclaimRun(t, e, sim, fixedPath(path), body, n), ref)
}

// A client that did not stream gets one normal answer, the same as
// unpreempted.
func TestReclaimPreemptsAndResumesUnary(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimPreempt, 1)
	const n = 300
	resumedAsAlone(t, e, sim, "/v1/chat/completions", reclaimChat(false), n)
}

// Completions resume with the prompt followed by the text so far.
func TestReclaimPreemptsAndResumesCompletions(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimPreempt, 1)
	body := func(who string, n int) string {
		return fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"prompt":%q}`, n, who+": once upon a time")
	}
	resumedAsAlone(t, e, sim, "/v1/completions", body, 300)
}

// Borrowers the gateway cannot resume (here: log probabilities asked) are
// never preempted; they leave the headroom free instead, so an owner
// finds that many slots at once.
func TestReclaimNeverPreemptsWhatCannotResume(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimPreempt, 1)
	keyB := e.newKey(t, "lab-chem")
	body := `{"model":"m","stream":true,"logprobs":true,"max_tokens":400,"messages":[{"role":"user","content":"borrower"}]}`
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); ask(t, e, keyB, "/v1/chat/completions", body) }()
	}
	// one within etabB's reservation and two borrowed: the fourth waits,
	// the headroom (1) stays free
	gatewaytest.WaitFor(t, func() bool {
		_, w := e.gw.pools["p"].queue.lengths()
		return w == 1 && sim.RunningBy(who)["borrower"] == 3
	})
	time.Sleep(20 * time.Millisecond) // nothing more gets through
	if got := sim.RunningBy(who)["borrower"]; got != 3 {
		t.Fatalf("%d borrowers run, want 3 (capacity 4 less headroom 1)", got)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		ask(t, e, e.key, "/v1/chat/completions", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"owner"}]}`)
	}()
	gatewaytest.WaitFor(t, func() bool { return sim.RunningBy(who)["owner"] == 1 })
	wg.Wait()
	for _, r := range e.recs.wait(t, 5) {
		if r.Preemptions != 0 {
			t.Errorf("%s (%s) preempted: it could not be resumed", r.RequestID, r.Team)
		}
	}
}

// Holdback: borrowers fill only capacity − headroom slots, resumable or
// not; an owner finds the headroom at once.
func TestReclaimHoldback(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimHoldback, 2)
	keyB := e.newKey(t, "lab-chem")
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); ask(t, e, keyB, "/v1/chat/completions", reclaimChat(true)("borrower", 200)) }()
	}
	gatewaytest.WaitFor(t, func() bool {
		_, w := e.gw.pools["p"].queue.lengths()
		return w == 2 && sim.RunningBy(who)["borrower"] == 2
	})
	time.Sleep(20 * time.Millisecond) // nothing more gets through
	if got := sim.RunningBy(who)["borrower"]; got != 2 {
		t.Fatalf("%d borrowers run, want 2 (capacity 4 less headroom 2)", got)
	}
	for range 2 {
		wg.Add(1)
		// 100 tokens (200 ms): long enough for both to be seen running
		// together on a loaded machine (5 tokens ended before the second began)
		go func() { defer wg.Done(); ask(t, e, e.key, "/v1/chat/completions", reclaimChat(true)("owner", 100)) }()
	}
	gatewaytest.WaitFor(t, func() bool { return sim.RunningBy(who)["owner"] == 2 })
	wg.Wait()
	for _, r := range e.recs.wait(t, 6) {
		if r.Preemptions != 0 || r.Outcome != llmflow.OutcomeOK {
			t.Errorf("%s: %d preemptions, outcome %s", r.RequestID, r.Preemptions, r.Outcome)
		}
	}
}

// A borrower whose client leaves while it waits to resume gives back
// everything it held.
func TestReclaimClientLeavesWhileParked(t *testing.T) {
	e, sim := reclaimEnv(t, engine.ReclaimPreempt, 1)
	keyB := e.newKey(t, "lab-chem")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(reclaimChat(true)("borrower", 2000)))
			req.Header.Set("Authorization", "Bearer "+keyB)
			if resp, err := e.srv.Client().Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		gatewaytest.WaitFor(t, func() bool { return sim.RunningBy(who)["borrower"] == i+1 })
	}
	owners := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-owners
			ask(t, e, e.key, "/v1/chat/completions", reclaimChat(true)("owner", 300))
		}()
	}
	close(owners)
	gatewaytest.WaitFor(t, func() bool { _, w := e.gw.pools["p"].queue.lengths(); return w == 3 }) // parked borrowers
	cancel()                                                                                       // etabB's clients leave
	wg.Wait()
	recs := e.recs.wait(t, 7)
	gone := 0
	for _, r := range recs {
		if r.Team == "lab-chem" && r.Outcome == llmflow.OutcomeClientGone {
			gone++
		}
	}
	if gone != 4 {
		t.Errorf("%d of etabB's requests recorded client_gone, want 4", gone)
	}
	gatewaytest.WaitFor(t, func() bool {
		in, waiting := e.gw.pools["p"].queue.lengths()
		return in == 0 && waiting == 0 && e.gw.FairshareReport().Pools[0].InFlight == 0
	})
}

func TestVictimFor(t *testing.T) {
	for _, tc := range []struct {
		prio        int
		org         string
		vprio       int
		vorg        string
		want        bool
		description string
	}{
		{0, "a", 10, "b", true, "within takes from another organisation's borrower"},
		{1, "a", 35, "a", true, "batch within takes from a borrower of any organisation"},
		{5, "a", 12, "b", true, "sibling borrower within its organisation takes from another organisation's borrower"},
		{0, "a", 0, "b", false, "never a request within its reservation"},
		{0, "a", 1, "a", false, "never a batch request within its reservation"},
		{10, "a", 20, "b", false, "a borrower never preempts"},
		{0, "a", 4, "a", true, "within its account takes from its organisation's sibling borrower"},
		{0, "a", 4, "b", false, "another organisation's sibling borrowing is within that organisation"},
		{3, "a", 5, "a", false, "sibling borrowers do not preempt each other"},
		{0, "a", fairshare.PriorityUnknown, "", true, "an organisation not in the tree borrows"},
	} {
		if got := victimFor(tc.prio, tc.org, tc.vprio, tc.vorg); got != tc.want {
			t.Errorf("%s: victimFor(%d, %s, %d, %s) = %v", tc.description, tc.prio, tc.org, tc.vprio, tc.vorg, got)
		}
	}
}

func TestResumable(t *testing.T) {
	chat := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	for _, tc := range []struct {
		ep   engine.Endpoint
		body string
		want bool
	}{
		{engine.ChatCompletions, chat(``), true},
		{engine.ChatCompletions, chat(`,"n":1,"logprobs":false,"tools":[],"response_format":{"type":"text"},"temperature":0.7,"seed":3`), true},
		{engine.ChatCompletions, chat(`,"n":2`), false},
		{engine.ChatCompletions, chat(`,"logprobs":true`), false},
		{engine.ChatCompletions, chat(`,"top_logprobs":2`), false},
		{engine.ChatCompletions, chat(`,"tools":[{"type":"function","function":{"name":"f"}}]`), false},
		{engine.ChatCompletions, chat(`,"tool_choice":"none"`), false},
		{engine.ChatCompletions, chat(`,"response_format":{"type":"json_object"}`), false},
		{engine.ChatCompletions, chat(`,"guided_json":{}`), false},
		{engine.ChatCompletions, chat(`,"continue_final_message":true`), false},
		{engine.ChatCompletions, chat(`,"echo":true`), false},
		{engine.ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, false},
		{engine.ChatCompletions, `{"model":"m","messages":[]}`, false},
		{engine.ChatCompletions, `{"model":"m","messages":"x"}`, false},
		{engine.Completions, `{"model":"m","prompt":"once"}`, true},
		{engine.Completions, `{"model":"m","prompt":["a","b"]}`, false},
		{engine.Completions, `{"model":"m","prompt":"a","best_of":3}`, false},
		{engine.Completions, `{"model":"m","prompt":"a","suffix":"z"}`, false},
		{engine.Completions, `{"model":"m","prompt":"a","logprobs":2}`, false},
		{engine.Embeddings, `{"model":"m","input":"a"}`, false},
	} {
		rq, err := parseRequest([]byte(tc.body), tc.ep)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got := rq.resumable(tc.ep); got != tc.want {
			t.Errorf("resumable(%s) = %v, want %v", tc.body, got, tc.want)
		}
	}
}

func TestResumedRequest(t *testing.T) {
	rq, err := parseRequest([]byte(`{"model":"m","stream":false,"min_tokens":10,"max_tokens":50,"messages":[{"role":"user","content":"hi"} ]}`), engine.ChatCompletions)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := engine.For("priority", "header")
	b := rq.resumed(true, []byte(`tok0 "q" `), 4, true).encode(upstreamBody{engine: &d, model: "up", outputLimit: 46})
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	msgs := got["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	if len(msgs) != 2 || last["role"] != "assistant" || last["content"] != `tok0 "q" ` {
		t.Errorf("messages %v", msgs)
	}
	so := got["stream_options"].(map[string]any)
	if got["stream"] != true || got["continue_final_message"] != true || got["add_generation_prompt"] != false ||
		so["include_usage"] != true || so["continuous_usage_stats"] != true || got["max_tokens"] != 46.0 || got["min_tokens"] != 6.0 {
		t.Errorf("resumed body %s", b)
	}
	// the first attempt: streamed, nothing to continue
	b = rq.resumed(true, nil, 0, false).encode(upstreamBody{engine: &d, model: "up"})
	if bytes.Contains(b, []byte("continue_final_message")) || !bytes.Contains(b, []byte(`"stream":true`)) || bytes.Contains(b, []byte("continuous")) {
		t.Errorf("first attempt %s", b)
	}
}

// FuzzResume: whatever a client sends, a request found resumable is
// resumed as valid JSON with one of each member, the text to continue where
// the engine continues it.
func FuzzResume(f *testing.F) {
	for _, s := range append(rewriteSeeds,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"min_tokens":3,"stream":false}`,
		`{"model":"m","prompt":"once","max_tokens":9}`,
		`{"model":"m","messages":[ {"role":"user","content":"a"} , {"role":"tool","content":"b"} ] }`) {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	d, _ := engine.For("priority", "both")
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		ep := engine.Completions
		if chat {
			ep = engine.ChatCompletions
		}
		rq, err := parseRequest(body, ep)
		if err != nil || !rq.resumable(ep) {
			return
		}
		text := "tok0 \"q\" \u2028 "
		out := rq.resumed(chat, []byte(text), 2, true).encode(upstreamBody{engine: &d, model: "up", outputLimit: 5})
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("resumed %q from %q: %v", out, body, err)
		}
		keys, _ := topLevel(t, out)
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] {
				t.Fatalf("key %q twice in %s", k, out)
			}
			seen[k] = true
		}
		if chat {
			msgs, _ := got["messages"].([]any)
			last, _ := msgs[len(msgs)-1].(map[string]any)
			if last["role"] != "assistant" || last["content"] != text || got["continue_final_message"] != true {
				t.Fatalf("resumed chat %s", out)
			}
		} else if p, _ := got["prompt"].(string); !strings.HasSuffix(p, text) {
			t.Fatalf("resumed completion %s", out)
		}
	})
}

// FuzzResumeChunk: a chunk an engine sends is rewritten as one valid JSON
// object with the first attempt's id and created and the client's model.
func FuzzResumeChunk(f *testing.F) {
	f.Add([]byte(`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":2,"model":"up","choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
	f.Add([]byte(`{"choices":[],"model":7}`))
	f.Add([]byte(`{"id":"a","id":"b"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || len(bytes.TrimSpace(data)) == 0 || bytes.TrimSpace(data)[0] != '{' {
			return
		}
		if c, ok := scanChunk(data); ok { // an engine's chunk is read without panicking
			if txt, ok := appendText(nil, c.content); ok && !utf8.Valid(txt) && utf8.Valid(c.content) {
				t.Fatalf("content %q decoded to invalid UTF-8", c.content)
			}
		}
		rs := &resumeState{id: []byte(`"chatcmpl-1"`), created: []byte("1"), usage: sse.Usage{PromptTokens: 3}, attempts: 1, generated: 4, prompt: 3}
		x := &exchange{rq: &clientRequest{model: "m\u2028", continuousOK: true}}
		out := rs.rewrite(nil, data, x, appendJSONString(nil, x.rq.model), true)
		ev, ok := bytes.CutPrefix(out, []byte("data: "))
		if !ok || !bytes.HasSuffix(ev, []byte("\n\n")) {
			t.Fatalf("event %q", out)
		}
		var got map[string]any
		if err := json.Unmarshal(ev, &got); err != nil {
			t.Fatalf("rewrote %q into %q: %v", data, out, err)
		}
		if _, has := got["id"]; has && got["id"] != "chatcmpl-1" {
			t.Fatalf("id %v in %s", got["id"], out)
		}
		if _, has := got["model"]; has && got["model"] != "m\u2028" {
			t.Fatalf("model %v in %s", got["model"], out)
		}
	})
}

// A borrower's engine that generates past the output limit it was given is
// cut, as on the plain path: an error event, no [DONE], the usage bounded.
func TestResumableEngineIgnoresLimit(t *testing.T) {
	hold := make(chan struct{})
	var n atomic.Int32
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if n.Add(1) == 1 { // the first request is held
			io.WriteString(w, "data: {\"id\":\"h\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n")
			http.NewResponseController(w).Flush()
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		for i := range 1000 { // max_tokens 5, ignored
			if _, err := fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"sim/llama\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i); err != nil {
				return
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
		o.Config.Pools[0].Capacity = 4
		o.Config.Pools[0].Reclaim, o.Config.Pools[0].Headroom = engine.ReclaimPreempt, 1
	})
	keyB := e.newKey(t, "lab-chem")
	// etabB's reservation (1) is held, so its next request borrows and takes
	// the resumable path
	held := make(chan answer, 1)
	go func() {
		held <- ask(t, e, keyB, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hold"}]}`)
	}()
	gatewaytest.WaitFor(t, func() bool { return len(up.requests()) == 1 })
	got := ask(t, e, keyB, "/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"borrower"}]}`)
	if got.done || strings.Count(got.text, "t") > 7 {
		t.Errorf("a stream past its limit: done %v, text %q", got.done, got.text)
	}
	r := e.recs.wait(t, 1)[0]
	if r.Outcome != llmflow.OutcomeUpstreamError || r.CompletionTokens > 5 || r.Priority < fairshare.PriorityBorrowBase {
		t.Errorf("record %+v: want a borrower's upstream_error, at most 5 completion tokens", r)
	}
	close(hold)
	<-held
}
