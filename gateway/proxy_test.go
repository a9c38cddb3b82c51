package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// recorded is one request as the fake upstream saw it.
type recorded struct {
	path   string
	header http.Header
	body   []byte
}

// recordingUpstream records every request and answers with respond.
type recordingUpstream struct {
	mu      sync.Mutex
	got     []recorded
	respond func(w http.ResponseWriter, r *http.Request)
	srv     *httptest.Server
}

func newRecordingUpstream(t testing.TB, respond func(w http.ResponseWriter, r *http.Request)) *recordingUpstream {
	u := &recordingUpstream{respond: respond}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/health" {
			u.mu.Lock()
			u.got = append(u.got, recorded{path: r.URL.Path, header: r.Header.Clone(), body: b})
			u.mu.Unlock()
		}
		if u.respond != nil {
			u.respond(w, r)
			return
		}
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *recordingUpstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.got...)
}

func TestSmugglingNeverReachesUpstream(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")

	bodies := map[string]string{
		"plain":           `{"model":"m","messages":[{"role":"user","content":"hi"}],"priority":-100}`,
		"escaped key":     `{"model":"m","messages":[],"\u0070riority":-100,"\u0063ache_salt":"stolen"}`,
		"duplicate keys":  `{"model":"m","priority":-5,"messages":[],"priority":-100}`,
		"extra_body":      `{"model":"m","messages":[],"extra_body":{"priority":-100,"cache_salt":"x"}}`,
		"engine fields":   `{"model":"m","messages":[],"request_id":"evil","kv_transfer_params":{"do_remote_prefill":true},"ec_transfer_params":{},"vllm_xargs":{"session_id":"s"},"session_id":"s","id_slot":0,"cache_salt":"other-org"}`,
		"escaped dup mix": `{"model":"m","messages":[],"pri\u006frity":-1,"priority":-2,"PRIORITY":7}`,
	}
	evilHeaders := []string{
		"X-Vllm-Priority", "-100",
		"X-Request-Id", "evil-id",
		"X-Session-ID", "evil-session",
		"X-data-parallel-rank", "3",
		"X-Forwarded-For", "10.9.9.9",
		"X-Forwarded-Host", "evil",
		"x-pass-authorization", "Bearer stolen",
		"Cookie", "a=b",
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			resp := e.post(t, "/v1/chat/completions", body, evilHeaders...)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			got := up.requests()
			r := got[len(got)-1]
			// Headers are built from scratch: exactly these, nothing else.
			allowed := map[string]string{
				"Content-Type":    "application/json",
				"Accept":          "application/json",
				"Authorization":   "Bearer " + gatewaytest.UpstreamKey,
				"X-Vllm-Priority": "0",
				"User-Agent":      "llmflow/dev",
				"Content-Length":  "",
			}
			for k, v := range r.header {
				want, ok := allowed[k]
				if !ok {
					t.Errorf("header %s: %q reached the upstream", k, v)
					continue
				}
				if want != "" && (len(v) != 1 || v[0] != want) {
					t.Errorf("header %s = %q, want %q", k, v, want)
				}
			}
			// The body was re-encoded: decode it with a decoder that sees
			// every key, including duplicates, and check each.
			dec := json.NewDecoder(strings.NewReader(string(r.body)))
			dec.Token() // {
			seen := map[string]int{}
			var vals = map[string]json.RawMessage{}
			for dec.More() {
				tok, _ := dec.Token()
				k := tok.(string)
				var v json.RawMessage
				dec.Decode(&v)
				seen[k]++
				vals[k] = v
			}
			for k, n := range seen {
				if n > 1 {
					t.Errorf("key %q appears %d times upstream", k, n)
				}
			}
			for _, f := range []string{"extra_body", "request_id", "kv_transfer_params", "ec_transfer_params", "vllm_xargs", "session_id", "id_slot"} {
				if _, ok := seen[f]; ok {
					t.Errorf("field %q reached the upstream", f)
				}
			}
			// Member names are case-sensitive (in vLLM's pydantic models
			// too): "PRIORITY" is not the priority, and is relayed as the
			// client sent it, like any member the gateway does not own.
			if strings.Contains(body, `"PRIORITY"`) && string(vals["PRIORITY"]) != "7" {
				t.Errorf("PRIORITY = %q, want the client's 7 relayed untouched", vals["PRIORITY"])
			}
			if string(vals["priority"]) != "0" {
				t.Errorf("priority = %s, want the gateway's 0", vals["priority"])
			}
			if string(vals["model"]) != `"sim/llama"` {
				t.Errorf("model = %s, want the upstream model", vals["model"])
			}
			if want, _ := json.Marshal(e.gw.CacheSalt("etabA")); string(vals["cache_salt"]) != string(want) {
				t.Errorf("cache_salt = %s, want the organisation's %s", vals["cache_salt"], want)
			}
			if strings.Contains(string(r.body), "evil") || strings.Contains(string(r.body), "stolen") || strings.Contains(string(r.body), "-100") {
				t.Errorf("smuggled value reached the upstream: %s", r.body)
			}
		})
	}
}

func TestCacheSaltDiffersPerOrganisation(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	bKey := e.newKey(t, "lab-chem")
	salt := func(key string) string {
		e.key = key
		resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
		resp.Body.Close()
		got := up.requests()
		var body struct {
			CacheSalt string `json:"cache_salt"`
		}
		json.Unmarshal(got[len(got)-1].body, &body)
		return body.CacheSalt
	}
	a1, b1 := salt(e.key), salt(bKey)
	if a1 == "" || b1 == "" || a1 == b1 {
		t.Fatalf("salts A %q, B %q: want two different non-empty salts", a1, b1)
	}
	if len(a1) != 43 {
		t.Errorf("salt length %d, want 43 (256 bits base64url)", len(a1))
	}
	if strings.Contains(a1, gatewaytest.MasterKey) {
		t.Error("salt reveals the secret")
	}
}

func TestBatchClassAndPriorityVia(t *testing.T) {
	for _, tc := range []struct {
		via        string
		wantHeader string // "" = absent
		wantBody   string // "" = absent
	}{
		{"both", "1", "1"},
		{"header", "1", ""},
		{"body", "", "1"},
	} {
		t.Run(tc.via, func(t *testing.T) {
			up := newRecordingUpstream(t, nil)
			e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) {
				o.Config.Pools[0].Engine, _ = engine.For("priority", tc.via)
			})
			resp := e.post(t, "/v1/chat/completions", `{"model":"batchm","messages":[]}`)
			resp.Body.Close()
			r := up.requests()[0]
			if got := r.header.Get("X-Vllm-Priority"); got != tc.wantHeader {
				t.Errorf("X-Vllm-Priority = %q, want %q", got, tc.wantHeader)
			}
			var body map[string]json.RawMessage
			json.Unmarshal(r.body, &body)
			if got := string(body["priority"]); got != tc.wantBody {
				t.Errorf("body priority = %q, want %q", got, tc.wantBody)
			}
		})
	}
}

func TestFCFSPoolSendsNoPriority(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *Options) { o.Config.Pools[0].Engine, _ = engine.For("fcfs", "") })
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"priority":3}`, "X-Vllm-Priority", "4")
	resp.Body.Close()
	r := up.requests()[0]
	if _, ok := r.header["X-Vllm-Priority"]; ok {
		t.Error("X-Vllm-Priority sent to an fcfs pool")
	}
	if strings.Contains(string(r.body), "priority") {
		t.Errorf("priority in body sent to an fcfs pool: %s", r.body)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	var targetHits int
	var targetAuth []string
	var mu sync.Mutex
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		targetHits++
		targetAuth = append(targetAuth, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer target.Close()
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/steal", http.StatusTemporaryRedirect)
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	if resp.Header.Get("Location") != "" {
		t.Error("Location header forwarded to the client")
	}
	if strings.Contains(string(b), target.URL) || strings.Contains(string(b), gatewaytest.UpstreamKey) {
		t.Errorf("error body leaks: %s", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if targetHits != 0 {
		t.Fatalf("redirect target was called %d times (Authorization %q)", targetHits, targetAuth)
	}
}

// sseHandler streams events, waiting on gate (if set) before the second.
func sseHandler(events []string, gate <-chan struct{}) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i, ev := range events {
			if i == 1 && gate != nil {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
			io.WriteString(w, ev)
			if rc.Flush() != nil {
				return
			}
		}
	}
}

var vllmEvents = []string{
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"},\"finish_reason\":\"stop\"}]}\n\n",
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":14,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n",
	"data: [DONE]\n\n",
}

func TestFirstEventArrivesBeforeUpstreamSendsSecond(t *testing.T) {
	gate := make(chan struct{})
	up := newRecordingUpstream(t, sseHandler(vllmEvents, gate))
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	first := make(chan string, 1)
	br := bufio.NewReader(resp.Body)
	go func() {
		line, _ := br.ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if !strings.Contains(line, `"role":"assistant"`) {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		close(gate)
		t.Fatal("the first event did not reach the client while the upstream held the second: buffered")
	}
	close(gate)
	rest, _ := io.ReadAll(br)
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("stream did not end with [DONE]: %q", rest)
	}
}

func TestUsageChunkStrippedUnlessAsked(t *testing.T) {
	up := newRecordingUpstream(t, sseHandler(vllmEvents, nil))
	e := newEnv(t, []string{up.srv.URL}, "")
	for _, tc := range []struct {
		name      string
		opts      string
		wantUsage bool
	}{
		{"absent", ``, false},
		{"false", `,"stream_options":{"include_usage":false}`, false},
		{"true", `,"stream_options":{"include_usage":true}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true`+tc.opts+`}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			has := strings.Contains(string(b), `"usage":{"prompt_tokens":12`)
			if has != tc.wantUsage {
				t.Errorf("usage chunk forwarded = %v, want %v:\n%s", has, tc.wantUsage, b)
			}
			if !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				t.Errorf("missing [DONE]")
			}
			// The engine was always asked for usage, and vLLM for its
			// running count in every chunk.
			got := up.requests()
			if !strings.Contains(string(got[len(got)-1].body), `"stream_options":{"include_usage":true,"continuous_usage_stats":true}`) {
				t.Errorf("upstream body lacks include_usage: %s", got[len(got)-1].body)
			}
		})
	}
	recs := e.recs.wait(t, 3)
	for _, r := range recs {
		if r.PromptTokens != 12 || r.CompletionTokens != 2 || r.CachedTokens != 4 || r.Estimated || r.Outcome != llmflow.OutcomeOK {
			t.Errorf("record %+v: want usage 12/2/4 from the usage chunk, ok, not estimated", r)
		}
		// ((12-4)*1 + 4*0.1 + 2*10) / 1e6
		if want := 28.4 / 1e6; r.GPUHours < want*0.999999 || r.GPUHours > want*1.000001 {
			t.Errorf("GPU-hours %g, want %g", r.GPUHours, want)
		}
	}
}

func TestClientLeavingCancelsUpstreamAndEstimates(t *testing.T) {
	upstreamGone := make(chan struct{})
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return // a health check of a slow run is not the request
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; ; i++ {
			_, err := io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n")
			if err == nil {
				err = rc.Flush()
			}
			if err != nil {
				close(upstreamGone)
				return
			}
			select {
			case <-r.Context().Done():
				close(upstreamGone)
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 400) + `"}],"stream":true}`
	resp := e.post(t, "/v1/chat/completions", body)
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3*2; i++ { // three events: data line + blank line each
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close() // the client leaves
	select {
	case <-upstreamGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled when the client left")
	}
	rec := e.recs.wait(t, 1)[0]
	if rec.Outcome != llmflow.OutcomeClientGone || rec.Status != statusClientGone || !rec.Estimated {
		t.Fatalf("record %+v: want client_gone, 499, estimated", rec)
	}
	if rec.PromptTokens < 100 || rec.CompletionTokens < 3 {
		t.Errorf("estimate prompt %d, completion %d: want ≥ 100 (bytes/4) and ≥ 3 deltas", rec.PromptTokens, rec.CompletionTokens)
	}
	if rec.GPUHours <= 0 {
		t.Errorf("estimated record charged nothing")
	}
}

func TestStreamWithoutDoneIsIncomplete(t *testing.T) {
	up := newRecordingUpstream(t, sseHandler(vllmEvents[:2], nil))
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rec := e.recs.wait(t, 1)[0]
	if rec.Outcome != llmflow.OutcomeIncomplete || !rec.Estimated {
		t.Errorf("record %+v: want incomplete and estimated", rec)
	}
}

func TestStreamErrorEventRecorded(t *testing.T) {
	up := newRecordingUpstream(t, sseHandler([]string{
		vllmEvents[0],
		"data: {\"error\":{\"message\":\"engine died\",\"type\":\"InternalServerError\",\"code\":500}}\n\n",
		"data: [DONE]\n\n",
	}, nil))
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"error"`) {
		t.Errorf("error event not forwarded: %s", b)
	}
	rec := e.recs.wait(t, 1)[0]
	if rec.Outcome != llmflow.OutcomeUpstreamError {
		t.Errorf("outcome %q, want upstream_error", rec.Outcome)
	}
}

// TestClientLeavingBeforeAnswerReachesEngine: a client that leaves while
// the engine has sent nothing yet (a long prefill, an answer not
// streamed) cancels the engine request: the gateway is blocked reading
// the engine, and only the listener's watch of the client connection can
// tell (internal/h1's epoll watcher).
func TestClientLeavingBeforeAnswerReachesEngine(t *testing.T) {
	inEngine, gone := make(chan struct{}), make(chan time.Time, 1)
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(inEngine)
		<-r.Context().Done()
		gone <- time.Now()
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", e.key, len(body), body)
	<-inEngine
	left := time.Now()
	c.Close()
	select {
	case at := <-gone:
		t.Logf("the engine saw the client leave %v after it closed", at.Sub(left))
	case <-time.After(30 * time.Second):
		t.Fatal("the engine request was not cancelled when the client left")
	}
	if rec := e.recs.wait(t, 1)[0]; rec.Outcome != llmflow.OutcomeClientGone {
		t.Errorf("outcome %s, want client_gone", rec.Outcome)
	}
}
