package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/vllmsim"
)

// e2e is a real gateway (serve, SQLite file, real HTTP) in front of a
// simulated vLLM.
type e2e struct {
	base   string // gateway URL
	key    string // client key of lab-nlp
	sim    *vllmsim.Server
	dbPath string
	dir    string // holds master.key
	stop   func() // shuts the gateway down and waits (accounting drained)
	gw     *gateway.Gateway
}

func startE2E(t *testing.T) *e2e { t.Helper(); return startE2EWith(t, "", nil) }

// startE2EWith starts the gateway of startE2E with extra appended to its
// configuration, after prepare has written what extra names into dir.
func startE2EWith(t *testing.T, extra string, prepare func(dir string)) *e2e {
	t.Helper()
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: time.Millisecond})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(func() { simSrv.Close(); sim.Close() })

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "master.key"), []byte("master-e2e-0123456789abcdef0123456789\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "vllm.key"), []byte("sim-secret\n"), 0o600)
	src := fmt.Sprintf(`
master_key_file = "master.key"
org "etabA" {
  share = 0.8125
  team "lab-nlp" {}
}
org "etabB" {
  share = 0.1875
  team "lab-chem" {}
}
pool "sim" { capacity = 16 }
model "sim-llama" {
  upstream_model = "sim/llama"
  pool           = "sim"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.20
  }
  upstream "sim0" { base_url = %q }
}
store {
  path           = "llmflow.db"
  flush_interval = "20ms"
}
`, simSrv.URL) + extra
	if prepare != nil {
		prepare(dir)
	}
	cfgPath := filepath.Join(dir, "gateway.hcl")
	os.WriteFile(cfgPath, []byte(src), 0o600)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &e2e{sim: sim, dbPath: cfg.Store.Path, dir: dir}
	readyc := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, "127.0.0.1:0", slog.New(slog.DiscardHandler), func(addr string, gw *gateway.Gateway, adm *admin.Handler) {
			_, e.key, err = adm.CreateKey(ctx,
				admin.KeyRequest{Team: "lab-nlp", Name: "e2e"}, admin.Principal{Name: "t", Role: admin.RoleProxyAdmin})
			e.base = "http://" + addr
			e.gw = gw
			close(readyc)
		})
	}()
	select {
	case <-readyc:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not start")
	}
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(e.stop)
	return e
}

// waitWritten waits until the gateway has written n accounting records
// to its store, failing the test after 10 seconds.
func (e *e2e) waitWritten(t *testing.T, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		written, failed, dropped := e.gw.Recorder().Counts()
		if written >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d accounting records written after 10s, want %d (failed %d, dropped %d)", written, n, failed, dropped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *e2e) records(t *testing.T) []llmflow.Record {
	t.Helper()
	e.stop()
	db, err := store.OpenSQLite(context.Background(), e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, err := db.Records(context.Background(), time.Unix(0, 0), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestOpenAIGoSDK(t *testing.T) {
	e := startE2E(t)
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey(e.key), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "sim-llama" {
		t.Fatalf("models: %v %+v", err, models)
	}

	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "sim-llama",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there")},
		MaxTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	if chat.Choices[0].Message.Content == "" || chat.Usage.CompletionTokens != 4 {
		t.Errorf("chat: %q usage %+v", chat.Choices[0].Message.Content, chat.Usage)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "sim-llama",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		MaxTokens:     openai.Int(6),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Usage.CompletionTokens != 6 || acc.Choices[0].Message.Content == "" || chunks < 7 {
		t.Errorf("stream: %d chunks, content %q, usage %+v", chunks, acc.Choices[0].Message.Content, acc.Usage)
	}

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "sim-llama",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")},
	})
	if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings: %v %+v", err, emb)
	}

	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-9", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type != "invalid_request_error" {
		t.Errorf("unknown model: %v", err)
	}

	bad := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey("llmf-nope"), option.WithMaxRetries(0))
	_, err = bad.Models.List(ctx)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("bad key: %v", err)
	}

	// What reached the engine: the gateway's own key, the upstream model
	// name, a cache salt and a priority.
	for _, r := range e.sim.Received() {
		if r.Header.Get("Authorization") != "Bearer sim-secret" || r.Model != "sim/llama" {
			t.Errorf("engine saw Authorization %q model %q", r.Header.Get("Authorization"), r.Model)
		}
		if r.Path != "/v1/embeddings" {
			if s, _ := r.Body["cache_salt"].(string); len(s) != 43 {
				t.Errorf("engine saw cache_salt %q", s)
			}
		}
	}

	// chat, stream, embeddings; the unknown model's 404 (a known key) is
	// recorded as rejected, the bad key's 401 is not recorded
	recs := e.records(t)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4: %+v", len(recs), recs)
	}
	var served []llmflow.Record
	for _, r := range recs {
		if r.Outcome == llmflow.OutcomeRejected {
			if r.Status != 404 || r.Team != "lab-nlp" || r.Model != "" || r.PromptTokens != 0 || r.GPUHours != 0 {
				t.Errorf("rejected record %+v", r)
			}
			continue
		}
		served = append(served, r)
	}
	if len(served) != 3 {
		t.Fatalf("%d served records, want 3: %+v", len(served), recs)
	}
	for _, r := range served {
		if r.Org != "etabA" || r.Team != "lab-nlp" || r.Model != "sim-llama" || r.Pool != "sim" || r.Upstream != "sim0" || r.Status != 200 || r.Outcome != llmflow.OutcomeOK || r.Estimated {
			t.Errorf("record %+v", r)
		}
		if r.PromptTokens == 0 || r.GPUHours <= 0 {
			t.Errorf("record without usage: %+v", r)
		}
	}
}

// TestNodeOpenAISDK drives the gateway with the official npm package. It
// needs node and testdata/sdk/node/node_modules (npm ci there); set
// LLMFLOW_SKIP_NODE_SDK=1 to skip it explicitly.
func TestNodeOpenAISDK(t *testing.T) {
	if os.Getenv("LLMFLOW_SKIP_NODE_SDK") == "1" {
		t.Skip("LLMFLOW_SKIP_NODE_SDK=1: skipping the npm openai SDK test as asked")
	}
	dir, _ := filepath.Abs("../../testdata/sdk/node")
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is not installed: install Node.js, or set LLMFLOW_SKIP_NODE_SDK=1 to skip this test explicitly")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Fatalf("the openai npm package is missing: run `npm ci` in %s (or set LLMFLOW_SKIP_NODE_SDK=1)", dir)
	}
	e := startE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(dir, "sdk.mjs"))
	cmd.Env = append(os.Environ(), "LLMFLOW_BASE_URL="+e.base+"/v1", "LLMFLOW_KEY="+e.key, "LLMFLOW_MODEL=sim-llama")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var got struct {
		Models []string `json:"models"`
		Chat   struct {
			Content string `json:"content"`
			Usage   struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		} `json:"chat"`
		Stream struct {
			Text   string `json:"text"`
			Chunks int    `json:"chunks"`
			Usage  *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		} `json:"stream"`
		UnknownModel struct {
			Status int    `json:"status"`
			Type   string `json:"type"`
		} `json:"unknownModel"`
		Retrieved struct {
			ID, Object string
		} `json:"retrieved"`
		RetrieveUnknown struct {
			Status int `json:"status"`
		} `json:"retrieveUnknown"`
		Response struct {
			Model, Text, Status string
			Usage               struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			}
		} `json:"response"`
		ResponseStream struct {
			Types []string
			Text  string
			Model string
			Usage struct {
				OutputTokens int `json:"output_tokens"`
			}
		} `json:"responseStream"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Models) != 1 || got.Chat.Usage.CompletionTokens != 4 || got.Chat.Content == "" {
		t.Errorf("models/chat: %s", out)
	}
	if got.Stream.Usage == nil || got.Stream.Usage.CompletionTokens != 5 || !strings.Contains(got.Stream.Text, "tok") || got.Stream.Chunks < 6 {
		t.Errorf("stream: %s", out)
	}
	if got.UnknownModel.Status != 404 {
		t.Errorf("unknown model: %s", out)
	}
	if got.Retrieved.ID != "sim-llama" || got.Retrieved.Object != "model" || got.RetrieveUnknown.Status != 404 {
		t.Errorf("models.retrieve: %s", out)
	}
	if r := got.Response; r.Model != "sim-llama" || r.Text != "tok0 tok1 tok2 " || r.Status != "incomplete" ||
		r.Usage.InputTokens != 4 || r.Usage.OutputTokens != 3 {
		t.Errorf("responses.create: %s", out)
	}
	if s := got.ResponseStream; s.Model != "sim-llama" || s.Text != "tok0 tok1 tok2 tok3 tok4 " || s.Usage.OutputTokens != 5 ||
		len(s.Types) != 13 || s.Types[0] != "response.created" || s.Types[12] != "response.incomplete" {
		t.Errorf("responses.create streamed: %s", out)
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.hcl")
	os.WriteFile(filepath.Join(dir, "k"), []byte("secret-0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(good, []byte(`master_key_file = "k"
org "a" {
  share = 1
  team "t" {}
}
pool "p" { capacity = 4 }
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:1" }
}
`), 0o600)
	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(bad, []byte(`master_key_file = "missing.key"
pool "p" { capacity = 0 }
`), 0o600)
	empty := filepath.Join(dir, "empty-secret.hcl")
	os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600)
	os.WriteFile(empty, []byte(`master_key_file = "empty"
`), 0o600)

	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run("check-config", "-c", good); code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("good: %d %q %q", code, out, errs)
	}
	code, _, errs := run("check-config", "-c", bad)
	if code != 1 || !strings.Contains(errs, bad+":2:") {
		t.Errorf("bad: %d %q: want exit 1 and %s:2:col", code, errs, bad)
	}
	for _, line := range strings.Split(strings.TrimSpace(errs), "\n") {
		if !strings.HasPrefix(line, bad+":") {
			t.Errorf("diagnostic line %q lacks file:line:col", line)
		}
	}
	code, _, errs = run("check-config", "-c", empty)
	if code != 1 || !strings.Contains(errs, empty+":1:") || !strings.Contains(errs, "empty") {
		t.Errorf("empty secret: %d %q", code, errs)
	}
	t.Setenv("LLMFLOW_CONFIG", good)
	if code, _, errs := run("check-config"); code != 0 {
		t.Errorf("LLMFLOW_CONFIG: %d %q", code, errs)
	}
	if code, out, _ := run("version"); code != 0 || !strings.HasPrefix(out, "llmflow ") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestServeShutsDownAndDrains(t *testing.T) {
	e := startE2E(t)
	for range 5 {
		req, _ := http.NewRequest("POST", e.base+"/v1/completions", strings.NewReader(`{"model":"sim-llama","prompt":"hi","max_tokens":2}`))
		req.Header.Set("Authorization", "Bearer "+e.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := len(e.records(t)); n != 5 {
		t.Errorf("%d records after shutdown, want 5: the queue was not drained", n)
	}
}
