package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/internal/redact"
)

func TestScrubber_String(t *testing.T) {
	s := &scrubber{prio: "12", upstream: "sim/llama", client: "m"}
	s.addSecret("k3y<&>é")
	s.addSecret("SALTsalt")
	for _, c := range []struct {
		name, in, want string
	}{
		{"Nothing", "max_tokens must be at most 12", "max_tokens must be at most 12"},
		{"Key", "Authorization: Bearer k3y<&>é", "Authorization: Bearer [redacted]"},
		{"KeyGoJSON", `"Bearer k3y\u003c\u0026\u003eé"`, `"Bearer [redacted]"`},
		{"KeyPythonJSON", `"Bearer k3y<&>\u00e9"`, `"Bearer [redacted]"`},
		{"Salt", `"cache_salt":"SALTsalt"`, `"cache_salt":"[redacted]"`},
		{"BodyPriority", `{"priority":12,"max_tokens":12}`, `{"priority":[redacted],"max_tokens":12}`},
		{"SpacedPriority", `'priority': 12`, `'priority': [redacted]`},
		{"EscapedJSON", `{\"priority\":12}`, `{\"priority\":[redacted]}`},
		{"Header", "X-Vllm-Priority: 12\r\nX-Other: 12", "X-Vllm-Priority: [redacted]\r\nX-Other: 12"},
		{"GoHeaderMap", "map[X-Vllm-Priority:[12]]", "map[X-Vllm-Priority:[[redacted]]]"},
		{"JSONHeaderMap", `{"X-Vllm-Priority":["12"]}`, `{"X-Vllm-Priority":["[redacted]"]}`},
		{"Words", "Got priority 12 but Priority scheduling is not enabled.", "Got priority [redacted] but Priority scheduling is not enabled."},
		{"OtherNumber", "priority 123, priority 1.5, priority 12.0", "priority 123, priority 1.5, priority 12.0"},
		{"OtherMember", `"priority_level":12`, `"priority_level":12`},
		{"FarAway", `priority is wrong; got 12`, `priority is wrong; got 12`},
		{"AtEnd", "priority=12", "priority=[redacted]"},
		{"Every", "priority=12 priority=12", "priority=[redacted] priority=[redacted]"},
		{"Model", "model sim/llama does not exist", "model m does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := s.String(c.in); got != c.want {
				t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
	var zero *scrubber
	if got := zero.String("priority 12"); got != "priority 12" {
		t.Errorf("nil scrubber changed the text: %q", got)
	}
}

// The upstream name is replaced only where it stands as a whole name: a
// short one never cuts into words, a client name holding it is not
// replaced again.
func TestReplaceName(t *testing.T) {
	for _, c := range []struct {
		upstream, client, in, want string
	}{
		{"llama", "llama-chat", "llama-chat is not llama", "llama-chat is not llama-chat"},
		{"llama-70b", "llama", "llama-70b, llama", "llama, llama"},
		{"sim/llama", "m", "sim/llama sim/llama", "m m"},
		{"m", "my-model", "the model m is missing: max_tokens", "the model my-model is missing: max_tokens"},
		{"m", "x", `{"model":"m","message":"m m"}`, `{"model":"x","message":"x x"}`},
		{"gpt", "llama", "gpt-4 gpt4 gpt. gpt", "gpt-4 gpt4 llama. llama"},
		{"up", "m", "model up: no; models/up, up.json", "model m: no; models/up, up.json"},
	} {
		if got := replaceName(c.in, c.upstream, c.client); got != c.want {
			t.Errorf("upstream %q, client %q: %q → %q, want %q", c.upstream, c.client, c.in, got, c.want)
		}
	}
}

// An error event inside a stream is scrubbed like an error answer, and
// stays JSON whatever the client's model name.
func TestScrubberJSON(t *testing.T) {
	s := &scrubber{prio: "12", upstream: "up", client: `my "model"`}
	s.addSecret("SALTsalt")
	got := s.json([]byte(`{"error":{"message":"model up: priority 12, cache_salt SALTsalt","type":"InternalServerError","code":500}}`))
	want := `{"error":{"message":"model my \"model\": priority [redacted], cache_salt [redacted]","type":"InternalServerError","code":500}}`
	if string(got) != want || !json.Valid(got) {
		t.Errorf("json = %s\nwant   %s", got, want)
	}
}

func TestUpstreamMessageShapes(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"OpenAI", `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`, "bad"},
		{"VLLMNew", `{"error":{"message":"bad","type":"BadRequestError","param":null,"code":400}}`, "bad"},
		{"VLLMOld", `{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}`, "bad"},
		{"LlamaServer", `{"error":{"code":400,"message":"bad","type":"invalid_request_error"}}`, "bad"},
		{"ErrorString", `{"error":"bad"}`, "bad"},
		{"FastAPI", `{"detail":"bad"}`, "bad"},
		{"FastAPIList", `{"detail":[{"loc":["body"],"msg":"bad"}]}`, "the engine refused the request"},
		{"NotJSON", `Bad Request`, "the engine refused the request"},
		{"Empty", `{}`, "the engine refused the request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := upstreamMessage([]byte(c.body), nil); got != c.want {
				t.Errorf("upstreamMessage(%s) = %q, want %q", c.body, got, c.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a slog handler and a test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// echoingEngine is an engine that answers every request with status and
// an error body of shape whose message echoes the headers and the body it
// received, in the spellings engines and frameworks print them. It records
// what it received.
func echoingEngine(t *testing.T, status int, shape string) (*httptest.Server, func() recorded) {
	var mu sync.Mutex
	var last recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		last = recorded{path: r.URL.Path, header: r.Header.Clone(), body: body}
		mu.Unlock()
		hj, _ := json.Marshal(r.Header)
		var py strings.Builder
		for k, v := range r.Header {
			fmt.Fprintf(&py, "'%s': '%s', ", strings.ToLower(k), v[0])
		}
		msg := fmt.Sprintf("cannot serve this. headers %v; as JSON %s; as Python {%s}; body %s", r.Header, hj, py.String(), body)
		var out any
		switch shape {
		case "openai":
			out = map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "param": nil, "code": status}}
		case "vllm-object":
			out = map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "param": nil, "code": status}
		case "string":
			out = map[string]any{"error": msg}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv, func() recorded {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// TestEngineErrorsAreScrubbed: an engine that echoes what it received into
// its error message shows the client neither the engine key nor the
// cache_salt nor the gateway's priority, and the client's model name in
// place of the upstream one; the gateway's log holds neither secret.
func TestEngineErrorsAreScrubbed(t *testing.T) {
	const clientBody = `{"model":"batchm","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"priority":9,"cache_salt":"mine"}`
	for _, status := range []int{http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge, http.StatusInternalServerError, http.StatusNotFound} {
		for _, shape := range []string{"openai", "vllm-object", "string"} {
			t.Run(fmt.Sprintf("%d/%s", status, shape), func(t *testing.T) {
				up, received := echoingEngine(t, status, shape)
				var logs syncBuffer
				e := newEnv(t, []string{up.URL}, "", func(o *Options) {
					o.Config.Pools[0].Engine, _ = engine.For("priority", "both")
					o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				})
				resp := e.post(t, "/v1/chat/completions", clientBody)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				got := string(b)

				sent := received()
				var ub struct {
					CacheSalt string `json:"cache_salt"`
					Priority  *int   `json:"priority"`
				}
				if err := json.Unmarshal(sent.body, &ub); err != nil || ub.CacheSalt == "" || ub.Priority == nil {
					t.Fatalf("upstream body %s: want cache_salt and priority (err %v)", sent.body, err)
				}
				if sent.header.Get("Authorization") != "Bearer "+gatewaytest.UpstreamKey {
					t.Fatalf("upstream Authorization %q", sent.header.Get("Authorization"))
				}
				prio := fmt.Sprint(*ub.Priority)
				for _, leak := range []string{gatewaytest.UpstreamKey, ub.CacheSalt, `"priority":` + prio, `Priority:[` + prio, `priority': '` + prio, `Priority":["` + prio, "sim/llama"} {
					if strings.Contains(got, leak) {
						t.Errorf("client error contains %q:\n%s", leak, got)
					}
				}
				if l := logs.String(); strings.Contains(l, gatewaytest.UpstreamKey) || strings.Contains(l, ub.CacheSalt) {
					t.Errorf("log contains the engine key or the salt:\n%s", l)
				}
				switch status {
				case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
					// The engine's words reach the client, scrubbed.
					for _, want := range []string{"cannot serve this", redact.Mask, `\"model\":\"batchm\"`, `\"max_tokens\":1`} {
						if !strings.Contains(got, want) {
							t.Errorf("client error lacks %q:\n%s", want, got)
						}
					}
				case http.StatusInternalServerError:
					// The client gets a generic message; the log gets the
					// engine's words, scrubbed.
					if strings.Contains(got, "cannot serve this") {
						t.Errorf("engine text of a %d reached the client:\n%s", status, got)
					}
					if l := logs.String(); !strings.Contains(l, "cannot serve this") || !strings.Contains(l, redact.Mask) {
						t.Errorf("log lacks the scrubbed engine answer:\n%s", l)
					}
				}
			})
		}
	}
}

// An error event in the middle of a stream reaches the client scrubbed as
// an error answer is: no engine key, cache_salt, priority or upstream
// model name.
func TestStreamErrorEventScrubbed(t *testing.T) {
	up := newRecordingUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Salt     string `json:"cache_salt"`
			Priority int    `json:"priority"`
		}
		json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, vllmEvents[0])
		fmt.Fprintf(w, "data: {\"error\":{\"message\":\"model sim/llama failed: %s salt %s priority %d\",\"type\":\"InternalServerError\",\"code\":500}}\n\ndata: [DONE]\n\n",
			r.Header.Get("Authorization"), req.Salt, req.Priority)
	})
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := e.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := string(got)
	if strings.Contains(s, gatewaytest.UpstreamKey) || strings.Contains(s, "sim/llama") || !strings.Contains(s, "model m failed: Bearer [redacted] salt ") || !strings.Contains(s, "priority [redacted]") {
		t.Errorf("client got %s", s)
	}
	for _, line := range strings.Split(s, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" && !json.Valid([]byte(d)) {
			t.Errorf("not JSON: %s", d)
		}
	}
}
