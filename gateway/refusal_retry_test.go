package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// TestBudgetRefusalRetry: a 429 of an exhausted budget says whether
// retrying can help. While a request in flight holds part of the budget
// (it may settle for less), Retry-After is short and the code is
// rate_limit_exceeded; when nothing is held, only the period's end helps:
// x-should-retry: false (the OpenAI SDKs retry a 429 twice otherwise), the
// insufficient_quota type and code, and Retry-After until the period
// ends. In memory and with the ledger in Redis.
func TestBudgetRefusalRetry(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", redis), func(t *testing.T) {
			release := make(chan struct{})
			up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				select { // the first request stays in flight until released
				case <-release:
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
			})
			var mods []func(*Options)
			if redis {
				mods = append(mods, sharedRedis(t))
			}
			e, _ := budgetEnv(t, []string{up.srv.URL}, "", mods...)
			k, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: "lab-nlp", Name: "retry"}, Principal{})
			if err != nil {
				t.Fatal(err)
			}
			// 0.001 GPU-hours: one request of max_tokens 90 holds nearly all
			putBudget(t, e, fmt.Sprintf(`{"kind":"key","name":%q,"period":"month","max_cost":0.001}`, k.ID))
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":90}`
			first := make(chan int)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					first <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				first <- resp.StatusCode
			}()
			sc := budgets.Scope{Kind: budgets.KindKey, Name: k.ID}
			deadline := time.Now().Add(10 * time.Second)
			for len(up.requests()) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the first request never reached the engine")
				}
				time.Sleep(time.Millisecond)
			}
			check := func(what, wantCode, wantRetry string, wantAfter func(int) bool) {
				t.Helper()
				resp := gatewaytest.Post(t, e.srv, secret, "/v1/chat/completions", body)
				var eb errorBody
				gatewaytest.DecodeJSON(t, resp, &eb)
				after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
				if resp.StatusCode != http.StatusTooManyRequests || eb.Error.Code != wantCode || eb.Error.Type != map[string]string{
					"rate_limit_exceeded": "rate_limit_error", "insufficient_quota": "insufficient_quota"}[wantCode] ||
					resp.Header.Get("X-Should-Retry") != wantRetry || !wantAfter(after) {
					t.Fatalf("%s: %d %+v Retry-After %q x-should-retry %q; want 429 %s, x-should-retry %q",
						what, resp.StatusCode, eb.Error, resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"), wantCode, wantRetry)
				}
			}
			check("held", "rate_limit_exceeded", "", func(s int) bool { return s == int(heldRetry/time.Second) })
			close(release)
			if s := <-first; s != http.StatusOK {
				t.Fatalf("first request: %d", s)
			}
			settled(t, e, sc)
			// what is left (about 0.001 - 0.000085) pays for no max_tokens 90
			// request in full, but for a lowered one: spend it all
			putBudget(t, e, fmt.Sprintf(`{"kind":"key","name":%q,"period":"month","max_cost":0.0001}`, k.ID))
			untilReset := int(time.Until(budgets.Month.End(budgets.Month.Start(time.Now()))) / time.Second)
			check("exhausted", "insufficient_quota", "false", func(s int) bool { return s >= untilReset-5 && s <= untilReset+5 })
		})
	}
}
