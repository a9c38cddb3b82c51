package admin

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

// The admin tests run the admin API as serve does: a gateway and its
// admin handler composed on one test server (Handler.With), over HTTP.

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
	Sessions    Sessions
	SelfService SelfService
}

// testEnv is a gateway and its admin API on a real HTTP server in front
// of upstream.
type testEnv struct {
	gw     *gateway.Gateway
	adm    *Handler
	srv    *httptest.Server
	keys   *gatewaytest.Keys
	key    string // a valid client key of team lab-nlp
	master string
	cfg    *config.Config
}

// newEnv starts a gateway and its admin API in front of the given
// upstream base URLs.
func newEnv(t testing.TB, upstreams []string, extra string, mod ...func(*envOptions)) *testEnv {
	t.Helper()
	cfg, err := config.Load(gatewaytest.WriteConfig(t, upstreams, extra))
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{keys: gatewaytest.NewKeys(), master: gatewaytest.MasterKey, cfg: cfg}
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
	ao := Options{Gateway: e.gw, Keys: o.Keys, Admin: o.Admin, Spend: o.Spend, SyncHistory: o.SyncHistory, Notifier: o.Notifier,
		Sessions: o.Sessions, SelfService: o.SelfService}
	if kl, ok := o.Keys.(KeyLimitStore); ok {
		ao.KeyLimits = kl
	}
	if kr, ok := o.Keys.(KeyRotateStore); ok {
		ao.KeyRotation = kr
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
	return gatewaytest.Post(t, e.srv, e.key, path, body, hdr...)
}

// do sends a request with bearer token tok ("" for none) and returns the
// status and body.
func (e *testEnv) do(t testing.TB, method, path, tok, body string) (int, string) {
	t.Helper()
	return gatewaytest.Do(t, e.srv, method, path, tok, body)
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
