package vllmsim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const testModel = "sim/llama"

// newTestServer starts a Server behind httptest with a 1 ms step and closes
// both at the end of the test.
func newTestServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.StepInterval == 0 {
		cfg.StepInterval = time.Millisecond
	}
	s := New(cfg)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		hs.Close()
	})
	return s, hs
}

func post(t *testing.T, ctx context.Context, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	defer resp.Body.Close()
	var v T
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

// readSSE returns the data payloads of an event stream, [DONE] included.
func readSSE(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// eventually polls cond every millisecond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
}

// 40 bytes of content: 10 prompt tokens.
const chatBody40 = `{"model":"sim/llama","messages":[{"role":"user","content":"0123456789012345678901234567890123456789"}]`

func TestChatNonStream(t *testing.T) {
	s, hs := newTestServer(t, Config{})
	resp := post(t, t.Context(), hs.URL+"/v1/chat/completions", chatBody40+`,"max_tokens":3}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := decode[chatResp](t, resp)
	if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Model != testModel || got.Created == 0 {
		t.Fatalf("envelope: %+v", got)
	}
	if len(got.Choices) != 1 || got.Choices[0].Message.Role != "assistant" ||
		got.Choices[0].Message.Content != "tok0 tok1 tok2 " || *got.Choices[0].FinishReason != "length" {
		t.Fatalf("choices: %+v", got.Choices)
	}
	if diff := cmp.Diff(&usageJSON{PromptTokens: 10, CompletionTokens: 3, TotalTokens: 13}, got.Usage); diff != "" {
		t.Fatalf("usage (-want +got):\n%s", diff)
	}
	st := s.Stats()
	if st.Completed != 1 || st.Served != 1 || st.UsedBlocks != 0 || st.Running != 0 {
		t.Fatalf("stats %+v", st)
	}
	// No max_tokens: DefaultMaxTokens and finish_reason "stop".
	got = decode[chatResp](t, post(t, t.Context(), hs.URL+"/v1/chat/completions", chatBody40+`}`, nil))
	if got.Usage.CompletionTokens != 16 || *got.Choices[0].FinishReason != "stop" {
		t.Fatalf("default max tokens: %+v %+v", got.Usage, got.Choices)
	}
}

func TestCompletionsNonStream(t *testing.T) {
	_, hs := newTestServer(t, Config{DefaultMaxTokens: 2})
	resp := post(t, t.Context(), hs.URL+"/v1/completions",
		`{"model":"sim/llama","prompt":"abcdefghijklmnop","max_completion_tokens":4}`, nil)
	got := decode[chatResp](t, resp)
	if !strings.HasPrefix(got.ID, "cmpl-") || got.Object != "text_completion" ||
		got.Choices[0].Text != "tok0 tok1 tok2 tok3 " || *got.Choices[0].FinishReason != "length" {
		t.Fatalf("completion: %+v", got)
	}
	if got.Usage.PromptTokens != 4 || got.Usage.CompletionTokens != 4 || got.Usage.TotalTokens != 8 {
		t.Fatalf("usage %+v", got.Usage)
	}
}

func TestStreamIncludeUsage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      string
		force     bool
		wantUsage bool
	}{
		{"absent", ``, false, false},
		{"empty object", `,"stream_options":{}`, false, true},
		{"null", `,"stream_options":null`, false, false},
		{"include_usage false", `,"stream_options":{"include_usage":false}`, false, false},
		{"include_usage true", `,"stream_options":{"include_usage":true}`, false, true},
		{"forced", ``, true, true},
	} {
		for _, chat := range []bool{true, false} {
			name := tc.name + "/completions"
			if chat {
				name = tc.name + "/chat"
			}
			t.Run(name, func(t *testing.T) {
				_, hs := newTestServer(t, Config{ForceIncludeUsage: tc.force})
				url, body := hs.URL+"/v1/completions", `{"model":"sim/llama","prompt":"0123456789012345678901234567890123456789"`
				if chat {
					url, body = hs.URL+"/v1/chat/completions", chatBody40
				}
				resp := post(t, t.Context(), url, body+`,"max_tokens":3,"stream":true`+tc.opts+`}`, nil)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				events := readSSE(t, resp)
				if events[len(events)-1] != "[DONE]" {
					t.Fatalf("last event %q", events[len(events)-1])
				}
				var chunks []chatResp
				for _, e := range events[:len(events)-1] {
					var c chatResp
					if err := json.Unmarshal([]byte(e), &c); err != nil {
						t.Fatalf("chunk %q: %v", e, err)
					}
					wantObj := "text_completion"
					if chat {
						wantObj = "chat.completion.chunk"
					}
					if c.Object != wantObj || c.Model != testModel || c.ID == "" || c.ID != chunksID(chunks, c.ID) {
						t.Fatalf("chunk envelope %q", e)
					}
					chunks = append(chunks, c)
				}
				if chat {
					first := chunks[0].Choices[0].Delta
					if first == nil || first.Role == nil || *first.Role != "assistant" || first.Content == nil || *first.Content != "" {
						t.Fatalf("first chunk %+v", chunks[0])
					}
					chunks = chunks[1:]
				}
				var text strings.Builder
				for i := range 3 {
					c := chunks[i]
					if c.Choices[0].FinishReason != nil || c.Usage != nil {
						t.Fatalf("content chunk %d: %+v", i, c)
					}
					if chat {
						text.WriteString(*c.Choices[0].Delta.Content)
					} else {
						text.WriteString(c.Choices[0].Text)
					}
				}
				if text.String() != "tok0 tok1 tok2 " {
					t.Fatalf("streamed text %q", text.String())
				}
				fin := chunks[3]
				if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "length" {
					t.Fatalf("finish chunk %+v", fin)
				}
				rest := chunks[4:]
				if !tc.wantUsage {
					if len(rest) != 0 {
						t.Fatalf("unexpected chunks after finish: %+v", rest)
					}
					return
				}
				if len(rest) != 1 || len(rest[0].Choices) != 0 || rest[0].Usage == nil {
					t.Fatalf("usage chunk: %+v", rest)
				}
				if diff := cmp.Diff(&usageJSON{PromptTokens: 10, CompletionTokens: 3, TotalTokens: 13}, rest[0].Usage); diff != "" {
					t.Fatalf("usage (-want +got):\n%s", diff)
				}
				if !strings.Contains(events[len(events)-2], `"choices":[]`) {
					t.Fatalf("usage chunk without empty choices: %s", events[len(events)-2])
				}
			})
		}
	}
}

// chunksID returns the id all earlier chunks share (or id for the first).
func chunksID(chunks []chatResp, id string) string {
	if len(chunks) == 0 {
		return id
	}
	return chunks[0].ID
}

type errResp struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}

func TestValidationErrors(t *testing.T) {
	_, hs := newTestServer(t, Config{Models: []string{"a", "b"}})
	for _, tc := range []struct {
		name, path, body string
		status           int
		typ, msg         string
	}{
		{"unknown model", "/v1/chat/completions", `{"model":"zzz","messages":[{"role":"user","content":"hi"}]}`,
			404, "NotFoundError", "The model `zzz` does not exist."},
		{"unknown model embeddings", "/v1/embeddings", `{"model":"zzz","input":"hi"}`,
			404, "NotFoundError", "The model `zzz` does not exist."},
		{"bad json", "/v1/chat/completions", `{"model":`, 400, "BadRequestError", ""},
		{"stream options without stream", "/v1/chat/completions",
			`{"model":"a","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`,
			400, "BadRequestError", "Stream options can only be defined when `stream=True`."},
		{"stream options stream false", "/v1/completions",
			`{"model":"b","prompt":"hi","stream":false,"stream_options":{}}`,
			400, "BadRequestError", "Stream options can only be defined when `stream=True`."},
		{"empty cache_salt", "/v1/chat/completions", `{"model":"a","messages":[{"role":"user","content":"hi"}],"cache_salt":""}`,
			400, "BadRequestError", "Parameter 'cache_salt' must be a non-empty string if provided."},
		{"numeric cache_salt", "/v1/completions", `{"model":"a","prompt":"hi","cache_salt":5}`,
			400, "BadRequestError", "Parameter 'cache_salt' must be a non-empty string if provided."},
		{"too long", "/v1/completions", `{"model":"a","prompt":"hi","max_tokens":100000}`, 400, "BadRequestError", ""},
		{"zero max_tokens", "/v1/completions", `{"model":"a","prompt":"hi","max_tokens":0}`, 400, "BadRequestError", ""},
		{"no messages", "/v1/chat/completions", `{"model":"a","messages":[]}`, 400, "BadRequestError", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, t.Context(), hs.URL+tc.path, tc.body, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			e := decode[errResp](t, resp)
			if e.Error.Type != tc.typ || e.Error.Code != tc.status || e.Error.Param != nil ||
				(tc.msg != "" && e.Error.Message != tc.msg) || e.Error.Message == "" {
				t.Fatalf("error %+v", e.Error)
			}
		})
	}
}

func TestModelsHealthEmbeddings(t *testing.T) {
	s, hs := newTestServer(t, Config{Models: []string{"m1", "m2"}, Sched: SchedConfig{KVBlocks: 100, BlockSize: 16}})
	resp, err := http.Get(hs.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	models := decode[struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, OwnedBy, Root string
			Created                   int64
			MaxModelLen               int `json:"max_model_len"`
		} `json:"data"`
	}](t, resp)
	if models.Object != "list" || len(models.Data) != 2 || models.Data[1].ID != "m2" ||
		models.Data[0].Object != "model" || models.Data[0].MaxModelLen != 1600 || models.Data[0].Created == 0 {
		t.Fatalf("models %+v", models)
	}
	if s.MaxModelLen() != 1600 {
		t.Fatalf("MaxModelLen %d", s.MaxModelLen())
	}
	resp, err = http.Get(hs.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("health %d %q", resp.StatusCode, b)
	}

	emb := decode[struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage map[string]int `json:"usage"`
	}](t, post(t, t.Context(), hs.URL+"/v1/embeddings", `{"model":"m2","input":["abcdefgh","abcd"]}`, nil))
	if emb.Object != "list" || emb.Model != "m2" || len(emb.Data) != 2 || emb.Data[1].Index != 1 ||
		emb.Data[0].Object != "embedding" || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings %+v", emb)
	}
	if diff := cmp.Diff(map[string]int{"prompt_tokens": 3, "total_tokens": 3}, emb.Usage); diff != "" {
		t.Fatalf("usage (-want +got):\n%s", diff)
	}
	again := decode[struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}](t, post(t, t.Context(), hs.URL+"/v1/embeddings", `{"model":"m1","input":"abcdefgh"}`, nil))
	if !cmp.Equal(again.Data[0].Embedding, emb.Data[0].Embedding) {
		t.Fatal("embeddings not deterministic")
	}
}

func TestCacheSaltPrefixCaching(t *testing.T) {
	_, hs := newTestServer(t, Config{Sched: SchedConfig{BlockSize: 4}})
	// 60 bytes: 15 prompt tokens; cached = whole blocks of the first 14 = 12.
	body := func(salt string) string {
		return `{"model":"sim/llama","prompt":"` + strings.Repeat("x", 60) + `","max_tokens":1,"cache_salt":"` + salt + `"}`
	}
	cached := func(salt string) int {
		u := decode[chatResp](t, post(t, t.Context(), hs.URL+"/v1/completions", body(salt), nil)).Usage
		if u.PromptTokens != 15 {
			t.Fatalf("prompt tokens %d", u.PromptTokens)
		}
		if u.PromptTokensDetails == nil {
			return 0
		}
		if u.PromptTokensDetails.CachedTokens == 0 {
			t.Fatal("cached_tokens present but 0")
		}
		return u.PromptTokensDetails.CachedTokens
	}
	if c := cached("tenant-a"); c != 0 {
		t.Fatalf("first request cached %d", c)
	}
	if c := cached("tenant-a"); c != 12 {
		t.Fatalf("repeat cached %d, want 12", c)
	}
	if c := cached("tenant-b"); c != 0 {
		t.Fatalf("other salt cached %d", c)
	}
}

// With MaxNumSeqs=1 and a long request holding the only slot, A (body
// priority 5) then B (body priority 10, header -1) queue; when the slot
// frees, B is served first.
func TestPriorityHeaderOverridesBody(t *testing.T) {
	s, hs := newTestServer(t, Config{Sched: SchedConfig{MaxNumSeqs: 1}})
	url := hs.URL + "/v1/chat/completions"
	blockCtx, cancelBlock := context.WithCancel(t.Context())
	blocker := make(chan struct{})
	go func() {
		defer close(blocker)
		resp, err := http.DefaultClient.Do(mustReq(blockCtx, url, chatBody40+`,"max_tokens":5000}`, nil))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	eventually(t, "blocker running", func() bool { return s.Stats().Running == 1 })

	type result struct {
		name string
		resp *http.Response
		err  error
	}
	results := make(chan result, 2)
	send := func(name, body string, hdr map[string]string) {
		go func() {
			resp, err := http.DefaultClient.Do(mustReq(t.Context(), url, body, hdr))
			results <- result{name, resp, err}
		}()
	}
	send("A", chatBody40+`,"max_tokens":2,"priority":5}`, nil)
	eventually(t, "A waiting", func() bool { return s.Stats().Waiting == 1 })
	send("B", chatBody40+`,"max_tokens":2,"priority":10}`, map[string]string{PriorityHeader: "-1"})
	eventually(t, "B waiting", func() bool { return s.Stats().Waiting == 2 })
	cancelBlock()
	<-blocker
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", r.name, r.resp.StatusCode)
		}
		r.resp.Body.Close()
	}

	recs := s.Received()
	if len(recs) != 3 {
		t.Fatalf("%d received", len(recs))
	}
	a, b := recs[1], recs[2]
	if a.Priority != 5 || b.Priority != -1 || b.Header.Get(PriorityHeader) != "-1" || b.Body["priority"] != float64(10) {
		t.Fatalf("received priorities: A %d, B %d (header %q, body %v)", a.Priority, b.Priority,
			b.Header.Get(PriorityHeader), b.Body["priority"])
	}
	if b.AdmittedStep == 0 || a.AdmittedStep == 0 || b.AdmittedStep >= a.AdmittedStep || b.FinishedStep >= a.AdmittedStep {
		t.Fatalf("B admitted at step %d (finished %d), A at %d: want B served first",
			b.AdmittedStep, b.FinishedStep, a.AdmittedStep)
	}
	if st := s.Stats(); st.Aborted != 1 || st.Completed != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func mustReq(ctx context.Context, url, body string, hdr map[string]string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func TestUnparsablePriorityHeaderIgnored(t *testing.T) {
	s, hs := newTestServer(t, Config{})
	for _, h := range []string{"high", "1.5", ""} {
		resp := post(t, t.Context(), hs.URL+"/v1/completions", `{"model":"sim/llama","prompt":"hi","max_tokens":1,"priority":3}`,
			map[string]string{PriorityHeader: h})
		if resp.StatusCode != 200 {
			t.Fatalf("header %q: status %d", h, resp.StatusCode)
		}
		resp.Body.Close()
	}
	for _, r := range s.Received() {
		if r.Priority != 3 {
			t.Fatalf("applied priority %d, want the body's 3", r.Priority)
		}
	}
}

func TestAuth(t *testing.T) {
	_, hs := newTestServer(t, Config{APIKey: "sekret"})
	body := `{"model":"sim/llama","prompt":"hi","max_tokens":1}`
	for _, auth := range []string{"", "Bearer wrong", "sekret", "Basic sekret"} {
		resp := post(t, t.Context(), hs.URL+"/v1/completions", body, map[string]string{"Authorization": auth})
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || strings.TrimSpace(string(b)) != `{"error":"Unauthorized"}` {
			t.Fatalf("auth %q: %d %s", auth, resp.StatusCode, b)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/models", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("models without key: %v %v", resp.StatusCode, err)
	}
	resp := post(t, t.Context(), hs.URL+"/v1/completions", body, map[string]string{"Authorization": "Bearer sekret"})
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with key: %d", resp.StatusCode)
	}
	for _, p := range []string{"/health", "/metrics"} {
		resp, err := http.Get(hs.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s without key: %v %v", p, resp.StatusCode, err)
		}
		resp.Body.Close()
	}
}

func TestFCFSRejectsNonZeroPriority(t *testing.T) {
	s, hs := newTestServer(t, Config{Sched: SchedConfig{Policy: PolicyFCFS}})
	url := hs.URL + "/v1/chat/completions"
	resp := post(t, t.Context(), url, chatBody40+`,"max_tokens":1,"priority":3}`, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if e := decode[errResp](t, resp); e.Error.Message != "Got priority 3 but Priority scheduling is not enabled." {
		t.Fatalf("message %q", e.Error.Message)
	}
	resp = post(t, t.Context(), url, chatBody40+`,"max_tokens":1}`, map[string]string{PriorityHeader: "-2"})
	if e := decode[errResp](t, resp); e.Error.Message != "Got priority -2 but Priority scheduling is not enabled." {
		t.Fatalf("header: message %q", e.Error.Message)
	}
	// Priority 0 (the header overriding a non-zero body) is fine.
	resp = post(t, t.Context(), url, chatBody40+`,"max_tokens":1,"priority":7}`, map[string]string{PriorityHeader: "0"})
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("priority 0: %d", resp.StatusCode)
	}
	if st := s.Stats(); st.Rejected != 2 || st.Completed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	for _, stream := range []bool{true, false} {
		name := "unary"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			s, hs := newTestServer(t, Config{})
			ctx, cancel := context.WithCancel(t.Context())
			body := chatBody40 + `,"max_tokens":5000}`
			if stream {
				body = chatBody40 + `,"max_tokens":5000,"stream":true}`
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := http.DefaultClient.Do(mustReq(ctx, hs.URL+"/v1/chat/completions", body, nil))
				if err != nil {
					return
				}
				defer resp.Body.Close()
				io.Copy(io.Discard, resp.Body) // until the test cancels
			}()
			eventually(t, "tokens generated", func() bool { return s.Stats().GenerationTokens >= 5 })
			if s.Stats().UsedBlocks == 0 {
				t.Fatal("no KV used while running")
			}
			cancel()
			<-done
			eventually(t, "abort", func() bool {
				st := s.Stats()
				return st.Aborted == 1 && st.Running == 0 && st.UsedBlocks == 0 && st.KVUsage == 0
			})
			if st := s.Stats(); st.Completed != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	_, hs := newTestServer(t, Config{Models: []string{"x/y"}})
	resp := post(t, t.Context(), hs.URL+"/v1/completions", `{"model":"x/y","prompt":"abcdefgh","max_tokens":3}`, nil)
	resp.Body.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`vllm:num_requests_running{engine="0",model_name="x/y"} 0`,
		`vllm:num_requests_waiting{engine="0",model_name="x/y"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="x/y"} 0`,
		`vllm:num_preemptions_total{engine="0",model_name="x/y"} 0`,
		`vllm:prompt_tokens_total{engine="0",model_name="x/y"} 2`,
		`vllm:generation_tokens_total{engine="0",model_name="x/y"} 3`,
		`# TYPE vllm:num_preemptions_total counter`,
		`# TYPE vllm:kv_cache_usage_perc gauge`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

// Preemptions under KV pressure show in Stats and in the per-priority count.
func TestServerPreemptionStats(t *testing.T) {
	s, hs := newTestServer(t, Config{Sched: SchedConfig{KVBlocks: 6, BlockSize: 4}})
	results := make(chan int, 3)
	for i, prio := range []string{"0", "7", "7"} {
		go func() {
			resp, err := http.DefaultClient.Do(mustReq(t.Context(), hs.URL+"/v1/completions",
				`{"model":"sim/llama","prompt":"abcdefgh","max_tokens":12}`, map[string]string{PriorityHeader: prio}))
			if err != nil {
				results <- -1
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}()
		eventually(t, "queued", func() bool { return s.Stats().Served == int64(i+1) })
	}
	for range 3 {
		if c := <-results; c != 200 {
			t.Fatalf("status %d", c)
		}
	}
	st := s.Stats()
	if st.Preemptions == 0 || st.PreemptionsByPriority[0] != 0 || st.PreemptionsByPriority[7] != st.Preemptions {
		t.Fatalf("preemptions %d by priority %v", st.Preemptions, st.PreemptionsByPriority)
	}
	if st.UsedBlocks != 0 || st.Completed != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestIdleServerDoesNotStep(t *testing.T) {
	s, hs := newTestServer(t, Config{})
	time.Sleep(20 * time.Millisecond)
	if n := s.Stats().Steps; n != 0 {
		t.Fatalf("%d steps with no request", n)
	}
	resp := post(t, t.Context(), hs.URL+"/v1/completions", `{"model":"sim/llama","prompt":"hi","max_tokens":3}`, nil)
	resp.Body.Close()
	after := s.Stats().Steps
	if after < 3 {
		t.Fatalf("%d steps for 3 tokens", after)
	}
	time.Sleep(30 * time.Millisecond)
	if n := s.Stats().Steps; n != after {
		t.Fatalf("steps grew from %d to %d while idle", after, n)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	s := New(Config{StepInterval: time.Millisecond})
	hs := httptest.NewServer(s)
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			body := chatBody40 + `,"max_tokens":5000}`
			if i%2 == 0 {
				body = chatBody40 + `,"max_tokens":5000,"stream":true}`
			}
			resp, err := http.DefaultClient.Do(mustReq(context.Background(), hs.URL+"/v1/chat/completions", body, nil))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	eventually(t, "running", func() bool { return s.Stats().Running == 4 })
	s.Close()
	for range 4 {
		select {
		case <-errs:
		case <-time.After(5 * time.Second):
			t.Fatal("request still open after Close")
		}
	}
	st := s.Stats()
	if st.Aborted != 4 || st.Running != 0 || st.Waiting != 0 || st.UsedBlocks != 0 {
		t.Fatalf("stats after Close %+v", st)
	}
	// After Close, new requests are refused.
	resp := post(t, context.Background(), hs.URL+"/v1/completions", `{"model":"sim/llama","prompt":"hi"}`, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %d", resp.StatusCode)
	}
	s.Close() // idempotent
	hs.Close()
	http.DefaultClient.CloseIdleConnections()
	eventually(t, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= base })
}

func TestServeUntilContextDone(t *testing.T) {
	base := runtime.NumGoroutine()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{StepInterval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	resp := post(t, context.Background(), url+"/v1/completions", `{"model":"sim/llama","prompt":"hi","max_tokens":2}`, nil)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	http.DefaultClient.CloseIdleConnections()
	eventually(t, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= base })

	s2 := New(Config{})
	defer s2.Close()
	if err := s2.ListenAndServe(context.Background(), "256.0.0.1:bad"); err == nil {
		t.Fatal("ListenAndServe on a bad address succeeded")
	}
}

func TestRunningBy(t *testing.T) {
	s, hs := newTestServer(t, Config{Sched: SchedConfig{MaxNumSeqs: 2}, StepInterval: 50 * time.Millisecond})
	for _, salt := range []string{"a", "a", "b"} {
		go func() {
			resp, err := http.Post(hs.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"`+testModel+`","prompt":"x","max_tokens":1000,"cache_salt":"`+salt+`"}`))
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	var got map[string]int
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got = s.RunningBy(func(r *Received) string { v, _ := r.Body["cache_salt"].(string); return v })
		if got["a"]+got["b"] == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got["a"]+got["b"] != 2 || s.Stats().Waiting != 1 {
		t.Fatalf("running by salt %v, waiting %d: want 2 running (MaxNumSeqs) and 1 waiting", got, s.Stats().Waiting)
	}
}
