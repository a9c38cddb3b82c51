package admin

import (
	"bufio"
	"context"
	"encoding/json"
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
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/store"
)

// engine is a fake OpenAI-compatible engine over real HTTP: it answers
// with the model it was asked for (as vLLM does), streaming when asked,
// and counts the inference requests it got and their Authorization.
type fakeEngine struct {
	srv   *httptest.Server
	n     atomic.Int64
	mu    sync.Mutex
	auths map[string]int
}

func newEngine(t testing.TB) *fakeEngine {
	e := &fakeEngine{auths: map[string]int{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		e.n.Add(1)
		e.mu.Lock()
		e.auths[r.Header.Get("Authorization")]++
		e.mu.Unlock()
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", req.Model, i)
			}
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3,\"total_tokens\":6}}\n\ndata: [DONE]\n\n", req.Model)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":%q,"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}`, req.Model)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// runningGateway is a started gateway (health probes on) on a SQLite
// file, served over loopback HTTP, that a test can stop and start again
// on the same file.
type runningGateway struct {
	*testEnv
	db *store.SQLite
}

func startGateway(t *testing.T, dbPath string, configured []string, extra string) *runningGateway {
	t.Helper()
	cfg, err := config.Load(gatewaytest.WriteConfig(t, configured, extra+fmt.Sprintf("store {\n  path = %q\n  flush_interval = \"10ms\"\n}\nhealth {\n  interval = \"20ms\"\n  cooldown = \"50ms\"\n}\n", dbPath)))
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.OpenSQLite(t.Context(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	rg := &runningGateway{testEnv: &testEnv{master: gatewaytest.MasterKey, cfg: cfg}, db: db}
	changes, err := db.AdminAccounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rg.gw, err = gateway.New(gateway.Options{Config: cfg, Keys: db, Records: db, AccountChanges: changes})
	if err != nil {
		t.Fatal(err)
	}
	rg.adm, err = New(Options{Gateway: rg.gw, Keys: db, KeyLimits: db, Admin: db, Routing: db, Spend: db})
	if err != nil {
		t.Fatal(err)
	}
	rg.gw.Start(context.Background())
	rg.srv = httptest.NewServer(rg.adm.With(rg.gw))
	rg.key = rg.newKey(t, "lab-nlp")
	t.Cleanup(rg.stop)
	return rg
}

func (rg *runningGateway) stop() {
	if rg.srv == nil {
		return
	}
	rg.srv.CloseClientConnections()
	rg.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rg.gw.Close(ctx)
	rg.db.Close()
	rg.srv = nil
}

// chat sends n chat requests for model and checks each answer is 200 and
// names model.
func (rg *runningGateway) chat(t *testing.T, model string, n int) {
	t.Helper()
	for range n {
		code, b := rg.do(t, "POST", "/v1/chat/completions", rg.key, fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model))
		if code != 200 {
			t.Fatalf("chat %s: %d %s", model, code, b)
		}
		var got struct{ Model string }
		json.Unmarshal([]byte(b), &got)
		if got.Model != model {
			t.Fatalf("answer names model %q, want %q: %s", got.Model, model, b)
		}
	}
}

type upstreamList struct {
	Data []upstreamView `json:"data"`
}

func (rg *runningGateway) upstreams(t *testing.T) upstreamList {
	t.Helper()
	code, b := rg.do(t, "GET", "/admin/models/m/upstreams", gatewaytest.MasterKey, "")
	if code != 200 {
		t.Fatalf("list: %d %s", code, b)
	}
	var l upstreamList
	if err := json.Unmarshal([]byte(b), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l upstreamList) find(name string) (upstreamView, bool) {
	for _, v := range l.Data {
		if v.Name == name {
			return v, true
		}
	}
	return upstreamView{}, false
}

// TestRuntimeUpstreamLifecycle adds an upstream at runtime, sees traffic
// reach it, restarts the gateway on the same store (it is still there and
// still served), removes it and sees its traffic stop.
func TestRuntimeUpstreamLifecycle(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	dbPath := filepath.Join(t.TempDir(), "llmflow.db")
	rg := startGateway(t, dbPath, []string{a.srv.URL}, "")

	rg.chat(t, "m", 4)
	if b.n.Load() != 0 {
		t.Fatal("b got traffic before it was added")
	}
	code, body := rg.do(t, "PUT", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, fmt.Sprintf(`{"base_url":%q}`, b.srv.URL+"/"))
	if code != 201 {
		t.Fatalf("add: %d %s", code, body)
	}
	if code, body = rg.do(t, "PUT", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, fmt.Sprintf(`{"base_url":%q}`, b.srv.URL)); code != 200 {
		t.Fatalf("replace: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, func() bool { v, _ := rg.upstreams(t).find("b"); return v.Healthy != nil && *v.Healthy })
	rg.chat(t, "m", 20)
	if b.n.Load() == 0 {
		t.Fatal("no traffic reached the runtime upstream")
	}
	// registered without inherit_key: the engine, whoever runs it, gets
	// no key (it got the model's key_file)
	b.mu.Lock()
	if b.auths[""] != int(b.n.Load()) {
		t.Errorf("runtime upstream without inherit_key got Authorization %v, want none every time", b.auths)
	}
	b.mu.Unlock()
	// inheriting is an explicit choice, and in the audit trail
	if code, body = rg.do(t, "PUT", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, fmt.Sprintf(`{"base_url":%q,"inherit_key":true}`, b.srv.URL)); code != 200 || !strings.Contains(body, `"inherit_key":true`) {
		t.Fatalf("inherit the key: %d %s", code, body)
	}
	if _, audit := rg.do(t, "GET", "/admin/audit?limit=1", gatewaytest.MasterKey, ""); !strings.Contains(audit, `"action":"upstream.update"`) || !strings.Contains(audit, `"inherit_key":true`) {
		t.Errorf("the audit trail does not show the key inherited: %s", audit)
	}
	withoutKey := b.n.Load()
	gatewaytest.WaitFor(t, func() bool { v, _ := rg.upstreams(t).find("b"); return v.Healthy != nil && *v.Healthy })
	rg.chat(t, "m", 20)
	b.mu.Lock()
	if got := b.auths["Bearer "+gatewaytest.UpstreamKey]; got != int(b.n.Load()-withoutKey) || got == 0 {
		t.Errorf("runtime upstream with inherit_key got Authorization %v, want the model's key_file every time since (%d requests)", b.auths, b.n.Load()-withoutKey)
	}
	b.mu.Unlock()
	if code, body := rg.do(t, "GET", "/healthz", gatewaytest.MasterKey, ""); !strings.Contains(body, `"healthy_upstreams":2`) {
		t.Errorf("healthz does not count the runtime upstream: %d %s", code, body)
	}

	// restart on the same store: still there, still served
	rg.stop()
	rg = startGateway(t, dbPath, []string{a.srv.URL}, "")
	v, ok := rg.upstreams(t).find("b")
	if !ok || v.Source != "admin" || !v.Served || v.BaseURL != b.srv.URL || v.By != "master" {
		t.Fatalf("after restart: %+v %v", v, ok)
	}
	gatewaytest.WaitFor(t, func() bool { v, _ := rg.upstreams(t).find("b"); return v.Healthy != nil && *v.Healthy })
	before := b.n.Load()
	rg.chat(t, "m", 20)
	if b.n.Load() == before {
		t.Fatal("after restart no traffic reached the runtime upstream")
	}

	if code, body := rg.do(t, "DELETE", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, ""); code != 200 {
		t.Fatalf("remove: %d %s", code, body)
	}
	before = b.n.Load()
	rg.chat(t, "m", 20)
	if b.n.Load() != before {
		t.Fatalf("the removed upstream still got %d requests", b.n.Load()-before)
	}
	if _, ok := rg.upstreams(t).find("b"); ok {
		t.Fatal("removed upstream still listed")
	}
	if code, body := rg.do(t, "DELETE", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, ""); code != 404 {
		t.Fatalf("remove again: %d %s, want 404", code, body)
	}

	// the trail: create, update, delete, by the master key, no secret
	code, body = rg.do(t, "GET", "/admin/audit", gatewaytest.MasterKey, "")
	for _, want := range []string{`"upstream.create"`, `"upstream.update"`, `"upstream.delete"`, `"target":"upstream m/b"`} {
		if !strings.Contains(body, want) {
			t.Errorf("audit lacks %s: %d %s", want, code, body)
		}
	}
	if strings.Contains(body, gatewaytest.UpstreamKey) {
		t.Errorf("audit shows the upstream key: %s", body)
	}
}

// TestRuntimeUpstreamRefused: the configuration is authoritative, and a
// runtime URL follows the configuration's SSRF rules; errors never echo
// credentials.
func TestRuntimeUpstreamRefused(t *testing.T) {
	e := newAdminEnv(t, "")
	for _, tc := range []struct {
		method, path, body string
		want               int
		bad                string // must not appear in the answer
	}{
		{"PUT", "/admin/models/m/upstreams/u0", `{"base_url":"http://10.0.0.1:8000"}`, 409, ""},
		{"DELETE", "/admin/models/m/upstreams/u0", ``, 409, ""},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"http://user:hunter2@10.0.0.1"}`, 400, "hunter2"},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"http://10.0.0.1/?token=hunter2"}`, 400, "hunter2"},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"http://10.0.0.1/#hunter2"}`, 400, "hunter2"},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"file:///etc/passwd"}`, 400, "passwd"},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"gopher://10.0.0.1"}`, 400, ""},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"http:///nohost"}`, 400, ""},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"http://10.0.0.1","key_file":"/etc/llmflow/master.key"}`, 400, ""},
		{"POST", "/admin/models/m/upstreams", `{"name":"x","base_url":"http://10.0.0.1","api_key":"hunter2"}`, 400, "hunter2"},
		{"POST", "/admin/models/m/upstreams", `{"name":"../x","base_url":"http://10.0.0.1"}`, 400, ""},
		{"POST", "/admin/models/m/upstreams", `{"name":"","base_url":"http://10.0.0.1"}`, 400, ""},
		{"POST", "/admin/models/nope/upstreams", `{"name":"x","base_url":"http://10.0.0.1"}`, 404, ""},
		{"POST", "/admin/models/m/upstreams", fmt.Sprintf(`{"name":"x","base_url":%q}`, e.cfg.Models[0].Upstreams[0].BaseURL), 409, ""}, // a configured engine again
		{"PUT", "/admin/aliases/m", `{"model":"batchm"}`, 409, ""},
		{"DELETE", "/admin/aliases/m", ``, 409, ""},
		{"PUT", "/admin/aliases/fast", `{"model":"nope"}`, 400, ""},
		{"PUT", "/admin/aliases/has%20space", `{"model":"m"}`, 400, ""},
		{"DELETE", "/admin/aliases/none", ``, 404, ""},
	} {
		code, b := e.do(t, tc.method, tc.path, gatewaytest.MasterKey, tc.body)
		if code != tc.want || (tc.bad != "" && strings.Contains(b, tc.bad)) {
			t.Errorf("%s %s %s: %d %s, want %d without %q", tc.method, tc.path, tc.body, code, b, tc.want, tc.bad)
		}
	}
	// a model name with a slash travels escaped in one path segment
	if code, b := e.do(t, "GET", "/admin/models/org%2Fllama/upstreams", gatewaytest.MasterKey, ""); code != 404 || !strings.Contains(b, `no configured model \"org/llama\"`) {
		t.Errorf("escaped model name: %d %s", code, b)
	}
	// the same name in the pool for another engine is refused (it labels
	// the upstream's metrics); POST of a taken name is 409
	e.must(t, "POST", "/admin/models/m/upstreams", "master", `{"name":"gpu9","base_url":"http://10.0.0.9"}`, 201)
	e.must(t, "POST", "/admin/models/m/upstreams", "master", `{"name":"gpu9","base_url":"http://10.0.0.9"}`, 409)
	e.must(t, "POST", "/admin/models/batchm/upstreams", "master", `{"name":"gpu9","base_url":"http://10.0.0.8"}`, 409)
	e.must(t, "POST", "/admin/models/batchm/upstreams", "master", `{"name":"gpu9","base_url":"http://10.0.0.9"}`, 201) // the same engine
	e.must(t, "POST", "/admin/models/m/upstreams", "master", `{"name":"gpu8","base_url":"http://10.0.0.9"}`, 409)      // the same engine twice on m
	// nothing refused was stored
	var l upstreamList
	json.Unmarshal([]byte(e.must(t, "GET", "/admin/upstreams", "master", "", 200)), &l)
	var admin []string
	for _, v := range l.Data {
		if v.Source == "admin" {
			admin = append(admin, v.Model+"/"+v.Name)
		}
	}
	if strings.Join(admin, ",") != "m/gpu9,batchm/gpu9" {
		t.Errorf("stored runtime upstreams %v", admin)
	}
}

// TestStoredRowsConfigWins: rows a later configuration shadows are kept
// in the store but not served, and listed with the reason.
func TestStoredRowsConfigWins(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	dbPath := filepath.Join(t.TempDir(), "llmflow.db")
	db, err := store.OpenSQLite(t.Context(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, u := range []llmflow.RuntimeUpstream{
		{Model: "m", Name: "u0", BaseURL: b.srv.URL, CreatedAt: now, UpdatedAt: now},             // now configured
		{Model: "gone", Name: "x", BaseURL: b.srv.URL, CreatedAt: now, UpdatedAt: now},           // model removed
		{Model: "m", Name: "ok", BaseURL: "http://u:p@10.0.0.1", CreatedAt: now, UpdatedAt: now}, // written behind the API's back
	} {
		if err := db.PutUpstream(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	for _, al := range []llmflow.ModelAlias{{Name: "m", Model: "batchm", UpdatedAt: now}, {Name: "old", Model: "gone", UpdatedAt: now}, {Name: "fast", Model: "m", UpdatedAt: now}} {
		if err := db.PutAlias(t.Context(), al); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	rg := startGateway(t, dbPath, []string{a.srv.URL}, "")
	rg.chat(t, "m", 10)
	rg.chat(t, "fast", 2)
	if b.n.Load() != 0 {
		t.Fatalf("a shadowed stored upstream got %d requests", b.n.Load())
	}
	code, body := rg.do(t, "GET", "/admin/upstreams", gatewaytest.MasterKey, "")
	if code != 200 || strings.Count(body, `"reason"`) != 3 || strings.Contains(body, "u:p@") {
		t.Errorf("listing: %d %s", code, body)
	}
	code, body = rg.do(t, "GET", "/admin/aliases", gatewaytest.MasterKey, "")
	if code != 200 || strings.Count(body, `"served":false`) != 2 || !strings.Contains(body, `"name":"fast","model":"m","served":true`) {
		t.Errorf("aliases: %d %s", code, body)
	}
}

// TestAliasSwitchUnderLoad switches an alias between two models (two
// engines) while clients send streamed and plain requests for it: no
// answer is a 5xx (or anything but 200), every answer and every stream
// chunk names the alias, and after the last switch the traffic goes to
// the new model's engine.
func TestAliasSwitchUnderLoad(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	dbPath := filepath.Join(t.TempDir(), "llmflow.db")
	extra := fmt.Sprintf("model \"m2\" {\n  upstream_model = \"sim/other\"\n  pool = \"p\"\n  upstream \"b\" { base_url = %q }\n}\n", b.srv.URL)
	rg := startGateway(t, dbPath, []string{a.srv.URL}, extra)
	if code, body := rg.do(t, "PUT", "/admin/aliases/team/fast", gatewaytest.MasterKey, `{"model":"m"}`); code != 201 {
		t.Fatalf("alias: %d %s", code, body)
	}
	code, body := rg.do(t, "GET", "/v1/models", rg.key, "")
	if code != 200 || !strings.Contains(body, `"id":"team/fast"`) {
		t.Fatalf("/v1/models: %d %s", code, body)
	}
	if code, body := rg.do(t, "GET", "/v1/models/team/fast", rg.key, ""); code != 200 {
		t.Fatalf("/v1/models/team/fast: %d %s", code, body)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, bad atomic.Int64
	var firstBad atomic.Value
	fail := func(s string) {
		bad.Add(1)
		firstBad.CompareAndSwap(nil, s)
	}
	client := rg.srv.Client()
	for w := range 4 {
		stream := w%2 == 0
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				req, _ := http.NewRequest("POST", rg.srv.URL+"/v1/chat/completions",
					strings.NewReader(fmt.Sprintf(`{"model":"team/fast","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)))
				req.Header.Set("Authorization", "Bearer "+rg.key)
				resp, err := client.Do(req)
				if err != nil {
					fail(err.Error())
					continue
				}
				if resp.StatusCode != 200 {
					b, _ := io.ReadAll(resp.Body)
					fail(fmt.Sprintf("%d %s", resp.StatusCode, b))
					resp.Body.Close()
					continue
				}
				if !stream {
					var got struct{ Model string }
					json.NewDecoder(resp.Body).Decode(&got)
					if got.Model != "team/fast" {
						fail("answer model " + got.Model)
					}
					resp.Body.Close()
					continue
				}
				sc := bufio.NewScanner(resp.Body)
				chunks := 0
				for sc.Scan() {
					line, ok := strings.CutPrefix(sc.Text(), "data: ")
					if !ok || line == "[DONE]" {
						continue
					}
					chunks++
					var got struct{ Model string }
					json.Unmarshal([]byte(line), &got)
					if got.Model != "team/fast" {
						fail("chunk model " + got.Model + ": " + line)
					}
				}
				if chunks == 0 {
					fail("empty stream")
				}
				resp.Body.Close()
			}
		})
	}
	models := []string{"m2", "m"}
	for i := range 40 {
		if code, body := rg.do(t, "PUT", "/admin/aliases/team/fast", gatewaytest.MasterKey, fmt.Sprintf(`{"model":%q}`, models[i%2])); code != 200 {
			t.Errorf("switch %d: %d %s", i, code, body)
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d requests failed during alias switches; first: %v", bad.Load(), sent.Load(), firstBad.Load())
	}
	if a.n.Load() == 0 || b.n.Load() == 0 {
		t.Fatalf("switches did not move traffic: engine a %d, b %d", a.n.Load(), b.n.Load())
	}
	// the last switch named m: from now on only a serves the alias
	before := b.n.Load()
	rg.chat(t, "team/fast", 10)
	if b.n.Load() != before {
		t.Errorf("after switching back to m, engine b got %d requests", b.n.Load()-before)
	}
	// accounting counts the model, not the alias (per-model budgets hold)
	if code, body := rg.do(t, "DELETE", "/admin/aliases/team/fast", gatewaytest.MasterKey, ""); code != 200 {
		t.Fatalf("delete alias: %d %s", code, body)
	}
	if code, body := rg.do(t, "POST", "/v1/chat/completions", rg.key, `{"model":"team/fast","messages":[]}`); code != 404 {
		t.Errorf("removed alias: %d %s, want 404", code, body)
	}
	t.Logf("%d requests during 40 switches", sent.Load())
}

// TestRoutingAcrossGatewaysPostgres: two gateways on one PostgreSQL store.
// An upstream and an alias written through one are served by the other
// after its reload (every 5 s while serving); a removal too.
func TestRoutingAcrossGatewaysPostgres(t *testing.T) {
	db := pgAdminStore(t)
	eng := newEngine(t)
	withDB := func(o *envOptions) { o.Keys, o.Admin = db, db }
	a := newEnv(t, []string{"http://127.0.0.1:1"}, "", withDB)
	b := newEnv(t, []string{"http://127.0.0.1:1"}, "", withDB)
	if code, out := a.do(t, "PUT", "/admin/models/m/upstreams/live", a.master, fmt.Sprintf(`{"base_url":%q}`, eng.srv.URL)); code != 201 {
		t.Fatalf("put upstream: %d %s", code, out)
	}
	if code, out := a.do(t, "PUT", "/admin/aliases/fast", a.master, `{"model":"m"}`); code != 201 {
		t.Fatalf("put alias: %d %s", code, out)
	}
	if code, _ := b.do(t, "POST", "/v1/chat/completions", b.key, `{"model":"fast","messages":[]}`); code != http.StatusNotFound {
		t.Fatalf("b serves the alias before its reload: %d", code)
	}
	if _, err := b.adm.reloadAdmin(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	// the configured upstream is unreachable: every answer comes from the
	// runtime one (a connection error is retried on it)
	for range 4 {
		if code, out := b.do(t, "POST", "/v1/chat/completions", b.key, `{"model":"fast","messages":[]}`); code != 200 || !strings.Contains(out, `"model":"fast"`) {
			t.Fatalf("b after reload: %d %s", code, out)
		}
	}
	if code, out := a.do(t, "DELETE", "/admin/models/m/upstreams/live", a.master, ""); code != 200 {
		t.Fatalf("delete: %d %s", code, out)
	}
	if _, err := b.adm.reloadAdmin(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	n := eng.n.Load()
	b.do(t, "POST", "/v1/chat/completions", b.key, `{"model":"fast","messages":[]}`)
	if eng.n.Load() != n {
		t.Error("b still routes to the removed upstream after its reload")
	}
}

// TestAliasModelListsAndAccounting: an alias is as visible as its model
// (a team model list hiding the model hides the alias: 404 and not in
// /v1/models), and a request through an alias is accounted to the model.
func TestAliasModelListsAndAccounting(t *testing.T) {
	e := newAdminEnv(t, "")
	e.must(t, "PUT", "/admin/aliases/fast", "master", `{"model":"m"}`, 201)
	e.must(t, "PUT", "/admin/teams/lab-nlp/models", "master", `{"models":["batchm"]}`, 200)
	if code, b := e.do(t, "POST", "/v1/chat/completions", e.key, `{"model":"fast","messages":[]}`); code != 404 {
		t.Errorf("alias of a hidden model: %d %s, want 404", code, b)
	}
	if _, b := e.do(t, "GET", "/v1/models", e.key, ""); strings.Contains(b, `"fast"`) || !strings.Contains(b, `"batchm"`) {
		t.Errorf("/v1/models with the alias's model hidden: %s", b)
	}
	e.must(t, "PUT", "/admin/aliases/fast", "master", `{"model":"batchm"}`, 200)
	if _, b := e.do(t, "GET", "/v1/models", e.key, ""); !strings.Contains(b, `"id":"fast"`) {
		t.Errorf("/v1/models after the switch: %s", b)
	}
	code, b := e.do(t, "POST", "/v1/chat/completions", e.key, `{"model":"fast","messages":[]}`)
	if code != 200 {
		t.Fatalf("alias of a visible model: %d %s", code, b)
	}
	id := ""
	gatewaytest.WaitFor(t, func() bool {
		recs, err := e.db.Records(t.Context(), time.Now().Add(-time.Minute), time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Status == 200 {
				id = r.Model
				return true
			}
		}
		return false
	})
	if id != "batchm" {
		t.Errorf("the request through the alias is accounted to %q, want the model batchm", id)
	}
}

// A runtime upstream can bring its own engine key: a file named by
// key_name in the configuration's upstream_key_dir, never a path (an admin
// must not make the gateway read the master key), readable by its owner
// only; the listing and the trail show the name, never the key.
func TestRuntimeUpstreamOwnKey(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	os.Mkdir(keys, 0o700)
	os.WriteFile(filepath.Join(keys, "gpu02.key"), []byte("own-engine-key\n"), 0o600)
	os.WriteFile(filepath.Join(keys, "open.key"), []byte("shared\n"), 0o644)
	rg := startGateway(t, filepath.Join(dir, "llmflow.db"), []string{a.srv.URL}, fmt.Sprintf("upstream_key_dir = %q\n", keys))
	for _, tc := range []struct{ body, want string }{
		{`"key_name":"../master.key"`, "is not a file name of upstream_key_dir"},
		{`"key_name":"/etc/passwd"`, "is not a file name of upstream_key_dir"},
		{`"key_name":".hidden"`, "is not a file name of upstream_key_dir"},
		{`"key_name":"nope.key"`, "no key file"},
		{`"key_name":"open.key"`, "may be read by others"},
		{`"key_name":"gpu02.key","inherit_key":true`, "not both"},
	} {
		code, body := rg.do(t, "PUT", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, fmt.Sprintf(`{"base_url":%q,%s}`, b.srv.URL, tc.body))
		if code != 400 || !strings.Contains(body, tc.want) || !strings.Contains(body, `"param":"key_name"`) {
			t.Errorf("%s: %d %s, want 400 %q", tc.body, code, body, tc.want)
		}
	}
	code, body := rg.do(t, "PUT", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, fmt.Sprintf(`{"base_url":%q,"key_name":"gpu02.key"}`, b.srv.URL))
	if code != 201 || !strings.Contains(body, `"key_name":"gpu02.key"`) || strings.Contains(body, "own-engine-key") {
		t.Fatalf("add with its own key: %d %s", code, body)
	}
	gatewaytest.WaitFor(t, func() bool { v, _ := rg.upstreams(t).find("b"); return v.Healthy != nil && *v.Healthy })
	rg.chat(t, "m", 20)
	b.mu.Lock()
	if got := b.auths["Bearer own-engine-key"]; got == 0 || got != int(b.n.Load()) {
		t.Errorf("runtime upstream with key_name got Authorization %v, want its own key every time", b.auths)
	}
	b.mu.Unlock()
	if _, audit := rg.do(t, "GET", "/admin/audit?limit=1", gatewaytest.MasterKey, ""); !strings.Contains(audit, `"key_name":"gpu02.key"`) || strings.Contains(audit, "own-engine-key") {
		t.Errorf("the trail: %s", audit)
	}
	// without upstream_key_dir, no runtime upstream has a key of its own
	rg2 := startGateway(t, filepath.Join(dir, "other.db"), []string{a.srv.URL}, "")
	if code, body := rg2.do(t, "PUT", "/admin/models/m/upstreams/b", gatewaytest.MasterKey, fmt.Sprintf(`{"base_url":%q,"key_name":"gpu02.key"}`, b.srv.URL)); code != 400 || !strings.Contains(body, "no upstream_key_dir") {
		t.Errorf("key_name without upstream_key_dir: %d %s", code, body)
	}
}
