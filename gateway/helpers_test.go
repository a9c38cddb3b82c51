package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/store"
)

// fakeKeys is a hand-written in-memory KeyStore that counts lookups.
type fakeKeys struct {
	mu      sync.Mutex
	byHash  map[[32]byte]llmflow.Key
	lookups atomic.Int64
	fail    error // returned by every call when set
}

func newFakeKeys() *fakeKeys { return &fakeKeys{byHash: make(map[[32]byte]llmflow.Key)} }

func (f *fakeKeys) KeyByHash(ctx context.Context, h [32]byte) (llmflow.Key, error) {
	f.lookups.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return llmflow.Key{}, f.fail
	}
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

// fakeRecords collects accounting records.
type fakeRecords struct {
	mu   sync.Mutex
	recs []llmflow.Record
	got  chan struct{}
}

func newFakeRecords() *fakeRecords { return &fakeRecords{got: make(chan struct{}, 1024)} }

func (f *fakeRecords) WriteRecords(ctx context.Context, recs []llmflow.Record) error {
	f.mu.Lock()
	f.recs = append(f.recs, recs...)
	f.mu.Unlock()
	for range recs {
		select {
		case f.got <- struct{}{}:
		default:
		}
	}
	return nil
}

// wait returns the first n records, failing the test after a timeout.
func (f *fakeRecords) wait(t *testing.T, n int) []llmflow.Record {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		if len(f.recs) >= n {
			out := append([]llmflow.Record(nil), f.recs...)
			f.mu.Unlock()
			return out
		}
		f.mu.Unlock()
		select {
		case <-f.got:
		case <-deadline:
			t.Fatalf("timed out waiting for %d accounting records", n)
		}
	}
}

// testEnv is a gateway on a real HTTP server in front of upstream.
type testEnv struct {
	gw     *Gateway
	srv    *httptest.Server
	keys   *fakeKeys
	recs   *fakeRecords
	key    string // a valid client key of team lab-nlp
	master string
	cfg    *config.Config
	db     *store.SQLite // budgetEnv's store
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

// newEnv starts a gateway in front of the given upstream base URLs.
func newEnv(t testing.TB, upstreams []string, extra string, mod ...func(*Options)) *testEnv {
	t.Helper()
	cfg, err := config.Load(writeConfig(t, upstreams, extra))
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{keys: newFakeKeys(), recs: newFakeRecords(), master: testMasterKey, cfg: cfg}
	o := Options{Config: cfg, Keys: e.keys, Records: e.recs}
	for _, f := range mod {
		f(&o)
	}
	e.gw, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.gw)
	t.Cleanup(func() {
		// A test that failed may leave requests held upstream: cut the
		// clients off so Close does not wait for them forever.
		e.srv.CloseClientConnections()
		e.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.gw.Close(ctx)
	})
	e.key = e.newKey(t, "lab-nlp")
	return e
}

// KeyRequest and Principal stand in for package admin's in the gateway's
// own tests: CreateKey puts a key in the store as POST /admin/keys does.
type KeyRequest struct {
	Team, Project, Name, Owner string
	RPM, TPM, MaxInFlight      int
	Tags                       []string
}

type Principal struct {
	Name string
	Role string
}

const RoleProxyAdmin = "proxy_admin"

// CreateKey creates a key of req's team (in the tree served now) in the
// gateway's key store and returns it with its secret.
func (g *Gateway) CreateKey(ctx context.Context, req KeyRequest, _ Principal) (llmflow.Key, string, error) {
	team, ok := g.accts.Load().team(req.Team)
	if !ok {
		return llmflow.Key{}, "", llmflow.Errorf(llmflow.ENOTFOUND, "unknown team %q", req.Team)
	}
	secret, hash, hint := llmflow.NewKeySecret()
	k := llmflow.Key{ID: llmflow.NewID("key_"), Hash: hash, Hint: hint, Name: req.Name, Org: team.Parent, Team: team.Name,
		Project: req.Project, Owner: req.Owner, RPM: req.RPM, TPM: req.TPM, MaxInFlight: req.MaxInFlight, Tags: req.Tags,
		CreatedAt: g.now().UTC()}
	ks, ok := g.keys.(interface { // the tests' stores create keys too
		CreateKey(ctx context.Context, k llmflow.Key) error
	})
	if !ok {
		return llmflow.Key{}, "", fmt.Errorf("key store %T cannot create keys", g.keys)
	}
	if err := ks.CreateKey(ctx, k); err != nil {
		return llmflow.Key{}, "", err
	}
	g.ForgetKey(hash)
	return k, secret, nil
}

var errStoreDown = errors.New("store down")

func decodeJSON(t testing.TB, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func (e *testEnv) newKey(t testing.TB, team string) string {
	t.Helper()
	_, secret, err := e.gw.CreateKey(t.Context(), KeyRequest{Team: team, Name: "test"}, Principal{Name: "test", Role: RoleProxyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// post sends a JSON body to the gateway with the env's client key.
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

func writeSecret(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
