package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// shapeRun is what a burst of one request shape did against a budget.
type shapeRun struct {
	served, refused, other int
	completion             int64 // completion tokens the engine reported to clients
	firstOther             string
}

// burst sends n copies of body concurrently with secret and reads every
// answer, summing the completion tokens the engine reported.
func burst(t *testing.T, e *testEnv, secret, path, body string, n int) shapeRun {
	t.Helper()
	var mu sync.Mutex
	var run shapeRun
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp := gatewaytest.Post(t, e.srv, secret, path, body)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var completion int64
			for _, d := range strings.Split(string(raw), "\n") {
				d = strings.TrimPrefix(d, "data: ")
				var a chatAnswer
				if json.Unmarshal([]byte(d), &a) == nil && a.Usage.CompletionTokens > 0 {
					completion = a.Usage.CompletionTokens
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case http.StatusOK:
				run.served++
				run.completion += completion
			case http.StatusTooManyRequests:
				run.refused++
			default:
				run.other++
				if run.firstOther == "" {
					run.firstOther = fmt.Sprintf("%d %s", resp.StatusCode, raw)
				}
			}
		})
	}
	wg.Wait()
	return run
}

// settled waits (10 s at most) until nothing is held on the budget of sc
// any more, and a key budget's key has nothing in flight (in Redis too: a
// client has its answer a moment before the gateway settles it), and
// returns its status.
func settled(t *testing.T, e *testEnv, sc budgets.Scope) budgets.Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := budgetStatus(t, e, sc)
		if st.Held == 0 && (sc.Kind != budgets.KindKey || e.gw.bud.mem.Key(sc.Name).InFlight() == 0) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget %v still holds %v after 10 s", sc, st.Held)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBudgetHoldsEveryShape: n, best_of and lists of prompts make the
// engine (vllmsim, which generates every sequence as vLLM does) generate
// several sequences per request; the hold and the lowered output limit
// count each one, so a burst of any shape on a key budget of 0.01
// GPU-hours never spends more than it, by the gateway's figures or by the
// engine's reported usage; in memory and with the ledger in Redis. Before
// the hold counted sequences, n=8 spent about 8 times the budget.
func TestBudgetHoldsEveryShape(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", redis), func(t *testing.T) { testBudgetHoldsEveryShape(t, redis) })
	}
}

func testBudgetHoldsEveryShape(t *testing.T, redis bool) {
	_, hs := simUpstream(t, time.Millisecond)
	var mods []func(*Options)
	if redis {
		mods = append(mods, sharedRedis(t))
	}
	e, _ := budgetEnv(t, []string{hs.URL}, "", mods...)
	const limit = 0.01
	prompts := func(k int) string {
		p := make([]string, k)
		for i := range p {
			p[i] = fmt.Sprintf("%q", fmt.Sprintf("prompt number %d", i))
		}
		return "[" + strings.Join(p, ",") + "]"
	}
	chat := `"messages":[{"role":"user","content":"Tell me a story."}]`
	for _, tc := range []struct {
		name, path, body string
	}{
		{"chat n=8 stream", "/v1/chat/completions", `{"model":"m",` + chat + `,"n":8,"max_tokens":100,"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat n=8", "/v1/chat/completions", `{"model":"m",` + chat + `,"n":8,"max_tokens":100}`},
		{"chat n=8 no limit", "/v1/chat/completions", `{"model":"m",` + chat + `,"n":8}`},
		{"completions 50 prompts", "/v1/completions", `{"model":"m","prompt":` + prompts(50) + `,"max_tokens":20}`},
		{"completions best_of=8", "/v1/completions", `{"model":"m","prompt":"Once upon a time","best_of":8,"max_tokens":100}`},
		{"completions 5 prompts n=3 stream", "/v1/completions", `{"model":"m","prompt":` + prompts(5) + `,"n":3,"max_tokens":40,"stream":true,"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: tc.name}, Principal{})
			if err != nil {
				t.Fatal(err)
			}
			sc := budgets.Scope{Kind: budgets.KindKey, Name: k.ID}
			putBudget(t, e, fmt.Sprintf(`{"kind":"key","name":%q,"period":"day","max_cost":%v}`, k.ID, limit))
			run := burst(t, e, secret, tc.path, tc.body, 40)
			st := settled(t, e, sc)
			// what the engine reported generating, at 10 GPU-hours per
			// million output tokens: a lower bound of the real spend
			engine := float64(run.completion) * 10 / 1e6
			t.Logf("%s: served %d, refused %d; spent %.5f of %v (%.1f %%), engine's output alone %.5f",
				tc.name, run.served, run.refused, st.Spent, limit, 100*st.Spent/limit, engine)
			if run.other > 0 || run.served == 0 || run.refused == 0 {
				t.Fatalf("served %d refused %d, %d others (%s): want served and refused only", run.served, run.refused, run.other, run.firstOther)
			}
			if st.Held != 0 || st.Spent > limit || engine > limit {
				t.Fatalf("spent %v (engine's output %v), held %v: over the limit %v", st.Spent, engine, st.Held, limit)
			}
		})
	}
}

// TestParseSequences: the sequences the engine generates for a body, and
// the n or best_of the gateway cannot bound it by.
func TestParseSequences(t *testing.T) {
	for _, tc := range []struct {
		ep            engine.Endpoint
		body          string
		prompts, seqs int64
		bad           string
	}{
		{engine.ChatCompletions, `{"model":"m","messages":[]}`, 1, 1, ""},
		{engine.ChatCompletions, `{"model":"m","messages":[],"n":8}`, 1, 8, ""},
		{engine.ChatCompletions, `{"model":"m","messages":[],"n":null}`, 1, 1, ""},
		{engine.ChatCompletions, `{"model":"m","messages":[],"n":0}`, 1, 1, "n"},
		{engine.ChatCompletions, `{"model":"m","messages":[],"n":2.5}`, 1, 1, "n"},
		{engine.Completions, `{"model":"m","prompt":"x","n":2,"best_of":5}`, 1, 5, ""},
		{engine.Completions, `{"model":"m","prompt":"x","best_of":"5"}`, 1, 1, "best_of"},
		{engine.Completions, `{"model":"m","prompt":["a", "b" ,"c"],"n":2}`, 3, 6, ""},
		{engine.Completions, `{"model":"m","prompt":[[1,2],[3]]}`, 2, 2, ""},
		{engine.Completions, `{"model":"m","prompt":[1,2,3]}`, 1, 1, ""},
		{engine.Completions, `{"model":"m","prompt":[]}`, 1, 1, ""},
		{engine.Embeddings, `{"model":"m","input":["a","b"],"n":4}`, 2, 1, ""},
	} {
		rq, err := parseRequest([]byte(tc.body), tc.ep)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if rq.prompts != tc.prompts || rq.seqs != tc.seqs || rq.badSeqs != tc.bad {
			t.Errorf("%s: prompts %d seqs %d bad %q, want %d %d %q", tc.body, rq.prompts, rq.seqs, rq.badSeqs, tc.prompts, tc.seqs, tc.bad)
		}
	}
}
