package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/go-llmflow/llmflow/internal/h1/h1test"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/store"
)

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
	srv    *h1test.Server
	keys   *gatewaytest.Keys
	recs   *fakeRecords
	key    string // a valid client key of team lab-nlp
	master string
	cfg    *config.Config
	db     *store.SQLite // budgetEnv's store
}

// newEnv starts a gateway in front of the given upstream base URLs.
func newEnv(t testing.TB, upstreams []string, extra string, mod ...func(*Options)) *testEnv {
	t.Helper()
	cfg, err := config.Load(gatewaytest.WriteConfig(t, upstreams, extra))
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{keys: gatewaytest.NewKeys(), recs: newFakeRecords(), master: gatewaytest.MasterKey, cfg: cfg}
	o := Options{Config: cfg, Keys: e.keys, Records: e.recs}
	for _, f := range mod {
		f(&o)
	}
	e.gw, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = h1test.NewServer(e.gw)
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
	return gatewaytest.Post(t, e.srv, e.key, path, body, hdr...)
}

func writeSecret(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
