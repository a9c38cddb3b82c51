package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
)

// The admin tests run the admin API as serve does: a gateway and its
// admin handler composed on one test server (Handler.With), over HTTP.

// fakeKeys is a hand-written in-memory key store.
type fakeKeys struct {
	mu     sync.Mutex
	byHash map[[32]byte]llmflow.Key
}

func newFakeKeys() *fakeKeys { return &fakeKeys{byHash: make(map[[32]byte]llmflow.Key)} }

func (f *fakeKeys) KeyByHash(ctx context.Context, h [32]byte) (llmflow.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.byHash[h]
	if !ok {
		return llmflow.Key{}, llmflow.ErrNotFound
	}
	return k, nil
}

func (f *fakeKeys) CreateKey(ctx context.Context, k llmflow.Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byHash[k.Hash] = k
	return nil
}

func (f *fakeKeys) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.byHash {
		if k.ID == id {
			return k, nil
		}
	}
	return llmflow.Key{}, llmflow.ErrNotFound
}

func (f *fakeKeys) ListKeys(ctx context.Context, flt llmflow.KeyFilter) ([]llmflow.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []llmflow.Key
	for _, k := range f.byHash {
		if (flt.Team == "" || k.Team == flt.Team) && (flt.IncludeRevoked || k.Active()) {
			out = append(out, k)
		}
	}
	return out, nil
}

func (f *fakeKeys) RevokeKey(ctx context.Context, id string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for h, k := range f.byHash {
		if k.ID == id {
			k.RevokedAt = at
			f.byHash[h] = k
			return nil
		}
	}
	return llmflow.ErrNotFound
}

// testKeyStore is what a test environment's key store must be: the
// gateway's lookups and the admin API's writes.
type testKeyStore interface {
	gateway.KeyLookup
	KeyStore
}

// envOptions configure a test environment: the gateway's options, and
// the stores the admin handler gets (each store capability the test's
// store has; assertions are fine in tests).
type envOptions struct {
	gateway.Options
	Keys        testKeyStore
	Admin       AdminStore
	Spend       SpendReader
	SyncHistory SyncHistory
	Notifier    Notifier
}

// testEnv is a gateway and its admin API on a real HTTP server in front
// of upstream.
type testEnv struct {
	gw     *gateway.Gateway
	adm    *Handler
	srv    *httptest.Server
	keys   *fakeKeys
	key    string // a valid client key of team lab-nlp
	master string
	cfg    *config.Config
}

const (
	testMasterKey   = "master-secret-for-tests-0123456789abcdef"
	testUpstreamKey = "internal-upstream-key"
)

// writeConfig writes an HCL file naming upstreams and returns its path.
// extra is appended inside the file (limits, health …).
func writeConfig(t testing.TB, upstreams []string, extra string) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "master.key"), []byte(testMasterKey+"\n"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "vllm.key"), []byte(testUpstreamKey+"\n"), 0o600))
	var ups strings.Builder
	for i, u := range upstreams {
		fmt.Fprintf(&ups, "  upstream \"u%d\" { base_url = %q }\n", i, u)
	}
	src := fmt.Sprintf(`
master_key_file = "master.key"
org "etabA" {
  share = 0.75
  team "lab-nlp" {}
}
org "etabB" {
  share = 0.25
  team "lab-chem" {}
}
pool "p" { capacity = 16 }
model "m" {
  upstream_model = "sim/llama"
  pool           = "p"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 1
    output_per_mtok = 10
    cached_per_mtok = 0.1
  }
%s}
model "batchm" {
  upstream_model = "sim/llama"
  pool           = "p"
  class          = "batch"
  key_file       = "vllm.key"
%s}
%s
`, ups.String(), ups.String(), extra)
	if !strings.Contains(extra, "store {") {
		src += "store {\n  path = \"test.db\"\n  flush_interval = \"10ms\"\n}\n"
	}
	path := filepath.Join(dir, "gateway.hcl")
	must(os.WriteFile(path, []byte(src), 0o600))
	return path
}

// newEnv starts a gateway and its admin API in front of the given
// upstream base URLs.
func newEnv(t testing.TB, upstreams []string, extra string, mod ...func(*envOptions)) *testEnv {
	t.Helper()
	cfg, err := config.Load(writeConfig(t, upstreams, extra))
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{keys: newFakeKeys(), master: testMasterKey, cfg: cfg}
	o := envOptions{Options: gateway.Options{Config: cfg}, Keys: e.keys}
	for _, f := range mod {
		f(&o)
	}
	o.Options.Keys = o.Keys
	if o.Admin != nil {
		if cs, err := o.Admin.AdminAccounts(t.Context()); err == nil {
			o.AccountChanges = cs // as serve does
		}
	}
	e.gw, err = gateway.New(o.Options)
	if err != nil {
		t.Fatal(err)
	}
	ao := Options{Gateway: e.gw, Keys: o.Keys, Admin: o.Admin, Spend: o.Spend, SyncHistory: o.SyncHistory, Notifier: o.Notifier}
	if kl, ok := o.Keys.(KeyLimitStore); ok {
		ao.KeyLimits = kl
	}
	if rs, ok := o.Admin.(RoutingStore); ok {
		ao.Routing = rs
	}
	if bw, ok := o.Budgets.(BudgetWriter); ok {
		ao.Budgets = bw
	}
	if e.adm, err = New(ao); err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.adm.With(e.gw))
	t.Cleanup(func() {
		e.srv.CloseClientConnections()
		e.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.gw.Close(ctx)
	})
	e.key = e.newKey(t, "lab-nlp")
	return e
}

func (e *testEnv) newKey(t testing.TB, team string) string {
	t.Helper()
	_, secret, err := e.adm.CreateKey(t.Context(), KeyRequest{Team: team, Name: "test"}, Principal{Name: "test", Role: RoleProxyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// post sends a JSON body with the env's client key.
func (e *testEnv) post(t testing.TB, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// do sends a request with bearer token tok ("" for none) and returns the
// status and body.
func (e *testEnv) do(t testing.TB, method, path, tok, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// upstream is a test engine that answers every request with a small
// chat completion (respond, when set, answers instead).
type upstream struct{ srv *httptest.Server }

func newRecordingUpstream(t testing.TB, respond func(w http.ResponseWriter, r *http.Request)) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if respond != nil {
			respond(w, r)
			return
		}
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// errorBody is OpenAI's error shape.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// testClock is a clock tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Unix(1_800_000_000, 0)} }

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const chatBody = `{"model":"m","messages":[]}`

// metricsText is the /metrics exposition (the master key's network is
// not throttled by reading it: no metrics token is configured).
func (e *testEnv) metricsText(t testing.TB) string {
	t.Helper()
	code, b := e.do(t, http.MethodGet, "/metrics", "", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, b)
	}
	return b
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
