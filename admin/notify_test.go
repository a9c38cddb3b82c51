package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-llmflow/llmflow"
)

// fakeNotifier records the announcements, in order.
type fakeNotifier struct {
	mu  sync.Mutex
	got []string
}

func (f *fakeNotifier) add(s string) {
	f.mu.Lock()
	f.got = append(f.got, s)
	f.mu.Unlock()
}

func (f *fakeNotifier) KeyChanged(_ context.Context, hash [32]byte) {
	f.add(fmt.Sprintf("key %x", hash[:4]))
}
func (f *fakeNotifier) AdminChanged(context.Context) { f.add("admin") }
func (f *fakeNotifier) TreeChanged(context.Context)  { f.add("tree") }

// take returns what was announced since the last take.
func (f *fakeNotifier) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.got
	f.got = nil
	return out
}

// TestNotifierAfterEachCommit: every stored write is announced once it is
// stored (a key's change as the key, an account's as the tree, anything
// else as an admin change); a refused write announces nothing.
func TestNotifierAfterEachCommit(t *testing.T) {
	n := &fakeNotifier{}
	e := newAdminEnv(t, "", func(o *envOptions) { o.Notifier = n })
	n.take() // the fixture's own writes
	key := func(k llmflow.Key) string { return fmt.Sprintf("key %x", k.Hash[:4]) }
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               []string
	}{
		{"PUT", "/admin/keys/" + e.keyA.ID + "/limits", `{"rpm":5}`, 200, []string{key(e.keyA), "admin"}},
		{"PUT", "/admin/keys/" + e.keyA.ID + "/active", `{"active":false}`, 200, []string{key(e.keyA), "admin"}},
		{"PUT", "/admin/keys/" + e.keyA.ID + "/limits", `{"rpm":-1}`, 400, nil},
		{"DELETE", "/admin/keys/" + e.keyOwn.ID, "", 200, []string{key(e.keyOwn), "admin"}},
		{"POST", "/admin/users", `{"name":"n1"}`, 201, []string{"admin"}},
		{"POST", "/admin/users", `{"name":"n1"}`, 409, nil},
		{"PUT", "/admin/teams/lab-nlp/models", `{"models":["m"]}`, 200, []string{"admin"}},
		{"PUT", "/admin/budgets", `{"kind":"team","name":"lab-nlp","period":"day","max_cost":1}`, 200, []string{"admin"}},
		{"PUT", "/admin/aliases/fast", `{"model":"m"}`, 201, []string{"admin"}},
		{"POST", "/admin/orgs", `{"name":"etabN"}`, 201, []string{"tree"}},
		// disabling a team revokes its keys: each is announced, then the tree
		{"DELETE", "/admin/teams/lab-chem", "", 200, []string{key(e.keyB), "tree"}},
	} {
		e.must(t, tc.method, tc.path, "master", tc.body, tc.status)
		if got := n.take(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s %s %s: announced %v, want %v", tc.method, tc.path, tc.body, got, tc.want)
		}
	}
}

// TestWithComposes: With serves /admin/* from the admin handler and the
// rest from the data plane, each answering unknown paths and methods in
// the OpenAI error shape as the gateway did alone.
func TestWithComposes(t *testing.T) {
	e := newEnv(t, []string{"http://127.0.0.1:1"}, "")
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/admin/nope", 404, `"message":"no route GET /admin/nope"`},
		{"GET", "/admin", 404, `"message":"no route GET /admin"`},
		{"GET", "/nope", 404, `"message":"no route GET /nope"`},
		{"PATCH", "/admin/keys", 405, `"message":"method PATCH not allowed on /admin/keys"`},
		{"PATCH", "/v1/models", 405, `"message":"method PATCH not allowed on /v1/models"`},
		{"GET", "/admin/whoami", 200, `"kind":"master_key"`},
		{"GET", "/healthz", 200, `"status":"ok"`},
	} {
		code, b := e.do(t, tc.method, tc.path, e.master, "")
		if code != tc.status || !strings.Contains(b, tc.body) {
			t.Errorf("%s %s: %d %s, want %d with %s", tc.method, tc.path, code, b, tc.status, tc.body)
		}
	}
	req, _ := http.NewRequest("PATCH", e.srv.URL+"/admin/budgets", nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Allow"); got != "DELETE, GET, PUT" {
		t.Errorf("Allow %q", got)
	}
}
