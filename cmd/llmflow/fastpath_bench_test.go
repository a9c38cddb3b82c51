package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkFastPath measures issue 25's goals over real loopback sockets
// between real processes, all in one run:
//
//	scripts/bench-fastpath.sh        # or:
//	go test -run '^$' -bench '^BenchmarkFastPath$' -benchtime 5000x -timeout 30m ./cmd/llmflow/
//
// An instant upstream (nginx: `return 200` of a chat completion with a
// usage object, and of a short SSE stream: role, content, usage, [DONE])
// and in front of it, each its own process: nginx as a reverse proxy
// (keep-alive upstream pool), a bare httputil.ReverseProxy, `llmflow
// serve` (SQLite store, accounting, fair share, a budget on the key and
// on its organisation, RPM, TPM and max_inflight on the key, metrics), and
// with Redis up (or startable) `llmflow serve` with a redis block, and
// two such replicas behind nginx round robin. The direct path client →
// upstream is the baseline: a target's added latency is its time minus
// the direct request's of the same round.
//
//   - c=1: interleaved rounds (one per b.Loop iteration: -benchtime
//     5000x is 5000 rounds), each one request to the upstream and one to
//     each target in a rotating order, over the same persistent
//     connections: added p50 and p99.
//   - streaming: as many rounds, in the same iterations, of a streamed
//     request: time to the first body byte of the SSE answer, added over
//     the direct one.
//   - c=16: LLMFLOW_FASTPATH_ROUNDS (3) rounds of LLMFLOW_FASTPATH_SECONDS
//     (3) s per target, alternating, 16 connections each: the median
//     requests/s.
//
// LLMFLOW_FASTPATH_REDIS=off leaves the Redis targets out,
// LLMFLOW_FASTPATH_REPLICAS=off only the two replicas. The load generator
// is a minimal HTTP/1.1 client in this process (rawClient). It prints a
// table and the ratios with their goals, PASS or FAIL; they
// measure, they never fail the benchmark. What fails it: a request that
// does not get a 200, an answer the gateway did not record, an upstream
// request that is not what llmflow should send.
func BenchmarkFastPath(b *testing.B) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		b.Skip("nginx is not installed (apt-get install nginx-light, or scripts/bench-fastpath.sh)")
	}
	rounds := envInt("LLMFLOW_FASTPATH_ROUNDS", 3)
	seconds := time.Duration(envFloat("LLMFLOW_FASTPATH_SECONDS", 3) * float64(time.Second))
	const conc = 16

	dir := b.TempDir()
	up := freeAddr(b)
	startNginx(b, nginx, dir, "upstream", up, fmt.Sprintf(`    server {
        listen %s;
        location = /v1/chat/completions {
            default_type application/json;
            return 200 '%s';
        }
        location = /sse/v1/chat/completions {
            default_type text/event-stream;
            return 200 '%s';
        }
        location ~ /health$ {
            default_type text/plain;
            return 200 'ok';
        }
        location / {
            return 404;
        }
    }`, up, fastAnswer, nginxEscape(fastStream)))

	ngx := freeAddr(b)
	startNginx(b, nginx, dir, "proxy", ngx, nginxProxy(ngx, up))
	rp := freeAddr(b)
	startBenchHelper(b, dir, "reverseproxy", rp, "LLMFLOW_BENCH_UPSTREAM=http://"+up)
	hp := freeAddr(b)
	startBenchHelper(b, dir, "h1proxy", hp, "LLMFLOW_BENCH_UPSTREAM=http://"+up)
	fp := freeAddr(b)
	startBenchHelper(b, dir, "fasthttpproxy", fp, "LLMFLOW_BENCH_UPSTREAM=http://"+up)

	rec := newUpstreamRecorder(b)
	single := startFastGateway(b, filepath.Join(dir, "llmflow"), up, rec.URL, "", 1)
	gws := []*fastGateway{single}
	var redis, reps *fastGateway
	if os.Getenv("LLMFLOW_FASTPATH_REDIS") != "off" {
		if raddr, why := benchRedis(b); raddr == "" {
			fmt.Printf("BenchmarkFastPath: no Redis targets: %s\n", why)
		} else {
			prefix := fmt.Sprintf("llmflow-fastpath:%d", time.Now().UnixNano())
			b.Cleanup(func() { dropRedisKeys(raddr, prefix+":*") }) // after the gateways stopped
			redis = startFastGateway(b, filepath.Join(dir, "llmflow-redis"), up, rec.URL,
				fmt.Sprintf("redis {\n  address    = %q\n  key_prefix = %q\n}\n", raddr, prefix+":1:"), 1)
			gws = append(gws, redis)
			if os.Getenv("LLMFLOW_FASTPATH_REPLICAS") != "off" {
				reps = startFastGateway(b, filepath.Join(dir, "llmflow-replicas"), up, rec.URL,
					fmt.Sprintf("redis {\n  address    = %q\n  key_prefix = %q\n  replicas   = 2\n}\n", raddr, prefix+":2:"), 2)
				gws = append(gws, reps)
			}
		}
	}

	// The targets, direct first. The bodies are the same bytes for all;
	// the proxies pass the path through, llmflow routes by model.
	direct := newFastTarget("direct", up, "/v1/chat/completions", "/sse/v1/chat/completions", "sim-secret", nil)
	targets := []*fastTarget{
		direct,
		newFastTarget("nginx", ngx, "/v1/chat/completions", "/sse/v1/chat/completions", "sim-secret", nil),
		newFastTarget("proxy", rp, "/v1/chat/completions", "/sse/v1/chat/completions", "sim-secret", nil),
		newFastTarget("fasthttp", fp, "/v1/chat/completions", "/sse/v1/chat/completions", "sim-secret", nil),
		newFastTarget("h1proxy", hp, "/v1/chat/completions", "/sse/v1/chat/completions", "sim-secret", nil),
		newFastTarget("llmflow", single.addrs[0], "/v1/chat/completions", "/v1/chat/completions", single.key, single),
	}
	if redis != nil {
		targets = append(targets, newFastTarget("redis", redis.addrs[0], "/v1/chat/completions", "/v1/chat/completions", redis.key, redis))
	}
	if reps != nil {
		front := freeAddr(b)
		startNginx(b, nginx, dir, "replicas-front", front, nginxProxy(front, reps.addrs...))
		targets = append(targets, newFastTarget("redis-x2", front, "/v1/chat/completions", "/v1/chat/completions", reps.key, reps))
	}

	// What llmflow sends upstream, and that every target answers both
	// kinds of request in full.
	checkStart := time.Now()
	for _, g := range gws {
		g.checkUpstreamRequests(b, rec)
	}
	checkIDs := map[*fastGateway][]string{}
	for _, t := range targets {
		for _, stream := range []bool{false, true} {
			req := t.plain
			if stream {
				req = t.stream
			}
			a, err := newRawClient(t.addr).do(req, true)
			if err != nil || a.status != http.StatusOK || !bytes.Contains(a.body, []byte("Hello there.")) ||
				stream && (!bytes.Contains(a.body, []byte("data: [DONE]")) || !bytes.Contains(a.body, []byte(`"prompt_tokens":21`))) {
				b.Fatalf("%s (stream %v): %v, status %d, body %q", t.name, stream, err, a.status, a.body)
			}
			if t.gw != nil {
				t.ok.Add(1)
				checkIDs[t.gw] = append(checkIDs[t.gw], a.id)
			}
		}
	}
	checkEnd := time.Now()

	// Warm every connection (and the gateways' key caches).
	for _, t := range targets {
		for range 100 {
			t.one(t.plain)
			t.one(t.stream)
		}
		t.conns = make([]*rawClient, conc)
		for i := range t.conns {
			t.conns[i] = newRawClient(t.addr)
			for range 5 {
				t.load(t.conns[i], t.plain)
			}
		}
	}

	// c=1 and streaming: b.Loop's iterations are interleaved rounds, the
	// order rotating.
	samples := 0
	got := make([]rawAnswer, len(targets))
	for b.Loop() {
		interleave(targets, samples, false, got)
		interleave(targets, samples, true, got)
		samples++
	}
	// c=16: alternating rounds per target.
	for r := range rounds {
		for i := range targets {
			t := targets[(r+i)%len(targets)]
			t.rps = append(t.rps, t.throughput(seconds))
		}
	}

	// The gateways' own view: refusals, errors, then every answer recorded.
	var odd []string
	for _, g := range gws {
		odd = append(odd, g.metricsSummary()...)
		odd = append(odd, g.logProblems()...)
	}
	for _, g := range gws {
		g.stop()
	}
	for _, g := range gws {
		answered := g.checked
		for _, t := range targets {
			if t.gw == g {
				answered += t.ok.Load()
			}
		}
		recorded, recs := g.records(b, checkStart, checkEnd)
		if recorded != answered {
			b.Errorf("%s: %d answers with status 200, %d records", g.name, answered, recorded)
		}
		byID := map[string]llmflow.Record{}
		for _, r := range recs {
			byID[r.RequestID] = r
		}
		for _, id := range checkIDs[g] {
			r, ok := byID[id]
			if !ok || r.Status != http.StatusOK || r.PromptTokens != 21 || r.CompletionTokens != 3 || r.Estimated {
				b.Errorf("%s: request %s: record %+v (found %v), want status 200, 21 + 3 tokens from the engine", g.name, id, r, ok)
			}
		}
		odd = append(odd, fmt.Sprintf("%s: %d answers, %d records", g.name, answered, recorded))
	}

	fastReport(b, targets, samples, rounds, seconds, conc, odd)
	b.ReportMetric(0, "ns/op")
}

// fastAnswer is the instant upstream's chat completion, fastStream its
// streamed one (role, content, usage, [DONE]).
const fastAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"bench/upstream","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":21,"completion_tokens":3,"total_tokens":24}}`

const fastStream = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"bench/upstream","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n" +
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"bench/upstream","choices":[{"index":0,"delta":{"content":"Hello there."},"finish_reason":"stop"}]}` + "\n\n" +
	`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"bench/upstream","choices":[],"usage":{"prompt_tokens":21,"completion_tokens":3,"total_tokens":24}}` + "\n\n" +
	"data: [DONE]\n\n"

const (
	fastBody       = `{"model":"%s","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in two words."}],"max_tokens":16,"temperature":0}`
	fastStreamBody = `{"model":"%s","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in two words."}],"max_tokens":16,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`
)

// nginxEscape writes s's newlines as nginx's \n in a quoted string.
func nginxEscape(s string) string { return strings.ReplaceAll(s, "\n", `\n`) }

// nginxProxy is the http block of nginx as a reverse proxy on listen to
// the servers (round robin), with a pool of kept-alive upstream
// connections and no buffering (as examples/nginx-llmflow.conf).
func nginxProxy(listen string, servers ...string) string {
	var s strings.Builder
	s.WriteString("    upstream backends {\n")
	for _, a := range servers {
		fmt.Fprintf(&s, "        server %s;\n", a)
	}
	fmt.Fprintf(&s, `        keepalive 64;
        keepalive_requests 1000000000;
        keepalive_timeout 600s;
    }
    server {
        listen %s;
        location / {
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }`, listen)
	return s.String()
}

// fastTarget is one thing measured: its requests, a connection for the
// c=1 rounds, 16 for c=16, and what was measured.
type fastTarget struct {
	name          string
	addr          string
	plain, stream []byte
	gw            *fastGateway // llmflow targets
	c1            *rawClient
	conns         []*rawClient

	lat, added, ttfb, ttfbAdded []time.Duration
	rps                         []float64

	ok       atomic.Int64 // answers with status 200
	mu       sync.Mutex
	non200   map[int]int
	errs     int
	firstErr string
}

func newFastTarget(name, addr, path, streamPath, bearer string, gw *fastGateway) *fastTarget {
	return &fastTarget{name: name, addr: addr, gw: gw, c1: newRawClient(addr), non200: map[int]int{},
		plain:  rawPost(addr, path, bearer, fmt.Sprintf(fastBody, "bench")),
		stream: rawPost(addr, streamPath, bearer, fmt.Sprintf(fastStreamBody, "bench-stream"))}
}

// one sends req on the c=1 connection.
func (t *fastTarget) one(req []byte) (rawAnswer, bool) { return t.load(t.c1, req) }

// load sends req on c and counts the outcome.
func (t *fastTarget) load(c *rawClient, req []byte) (rawAnswer, bool) {
	a, err := c.do(req, false)
	if err == nil && a.status == http.StatusOK {
		t.ok.Add(1)
		return a, true
	}
	t.mu.Lock()
	if err != nil {
		t.errs++
		if t.firstErr == "" {
			t.firstErr = err.Error()
		}
	} else {
		t.non200[a.status]++
	}
	t.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // no spinning on failures
	return a, false
}

// interleave runs round i: one request (stream or not) to every target,
// the direct one included, in an order rotating with i, and keeps each
// target's time and its difference to the direct one's (nothing when any
// request failed).
func interleave(targets []*fastTarget, i int, stream bool, got []rawAnswer) {
	failed := false
	for j := range targets {
		k := (i + j) % len(targets)
		t := targets[k]
		req := t.plain
		if stream {
			req = t.stream
		}
		a, ok := t.one(req)
		got[k], failed = a, failed || !ok
	}
	if failed {
		return
	}
	d := got[0]
	for k, t := range targets {
		a := got[k]
		if stream {
			t.ttfb = append(t.ttfb, a.ttfb)
			t.ttfbAdded = append(t.ttfbAdded, a.ttfb-d.ttfb)
		} else {
			t.lat = append(t.lat, a.total)
			t.added = append(t.added, a.total-d.total)
		}
	}
}

// throughput keeps the target's 16 connections busy for d and returns the
// answers (status 200) per second.
func (t *fastTarget) throughput(d time.Duration) float64 {
	var stop atomic.Bool
	counts := make([]int64, len(t.conns))
	var wg sync.WaitGroup
	t0 := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for i, c := range t.conns {
		wg.Go(func() {
			for !stop.Load() {
				if _, ok := t.load(c, t.plain); ok {
					counts[i]++
				}
			}
		})
	}
	wg.Wait()
	var n int64
	for _, c := range counts {
		n += c
	}
	return float64(n) / time.Since(t0).Seconds()
}

// fastGateway is `llmflow serve` (replicas: that many processes on one
// store and Redis, each with its spool and admin listener) and its key.
type fastGateway struct {
	name   string
	dir    string
	db     string
	procs  []*childProc
	addrs  []string // client listeners
	admins []string // admin listeners
	key    string
	// checked counts the answers of checkUpstreamRequests, to be
	// recorded as well.
	checked int64
}

// startFastGateway writes the configuration of a gateway in dir (models
// "bench" and "bench-stream" on the instant upstream, "bench-check" on the
// recorder; SQLite store; fair share between two organisations on a pool
// of 4096; extra blocks, e.g. redis) and starts n processes of it, then
// makes a key of lab-nlp with RPM, TPM and max_inflight far from reached
// and budgets on the key and on its organisation.
func startFastGateway(b *testing.B, dir, up, recorder, extra string, n int) *fastGateway {
	b.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	g := &fastGateway{name: filepath.Base(dir), dir: dir, db: filepath.Join(dir, "llmflow.db")}
	os.WriteFile(filepath.Join(dir, "master.key"), []byte(procMasterKey+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "vllm.key"), []byte("sim-secret\n"), 0o600)
	model := func(name, upstream, base string) string {
		return fmt.Sprintf(`model %q {
  upstream_model = "bench/upstream"
  pool           = "bench"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.20
  }
  upstream %q { base_url = %q }
}
`, name, upstream, base)
	}
	for i := range n {
		admin := freeAddr(b)
		src := `master_key_file = "master.key"
org "etabA" {
  share = 0.75
  team "lab-nlp" {}
}
org "etabB" {
  share = 0.25
  team "lab-chem" {}
}
pool "bench" { capacity = 4096 }
` + model("bench", "nginx", "http://"+up) + model("bench-stream", "nginx-sse", "http://"+up+"/sse") + model("bench-check", "recorder", recorder) +
			fmt.Sprintf("store {\n  path = %q\n}\nadmin {\n  listen = %q\n}\n", g.db, admin) + extra
		cfg := filepath.Join(dir, fmt.Sprintf("gateway-%d.hcl", i))
		if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
			b.Fatal(err)
		}
		p, addr := startBenchServe(b, fmt.Sprintf("%s-%d", g.name, i), cfg, filepath.Join(dir, fmt.Sprintf("serve-%d.log", i)), admin,
			"LLMFLOW_SPOOL_DIR="+filepath.Join(dir, fmt.Sprintf("spool-%d", i)))
		g.procs, g.addrs, g.admins = append(g.procs, p), append(g.addrs, addr), append(g.admins, admin)
	}
	var k struct{ ID, Key string }
	if s := benchAdmin(b, http.MethodPost, "http://"+g.admins[0]+"/admin/keys",
		`{"team":"lab-nlp","name":"bench","rpm":100000000,"tpm":1000000000,"max_inflight":100000}`, &k); s != http.StatusOK && s != http.StatusCreated || k.Key == "" {
		b.Fatalf("%s: create key: %d", g.name, s)
	}
	g.key = k.Key
	for _, budget := range []string{
		`{"kind":"key","name":"` + k.ID + `","period":"month","max_cost":1000000}`,
		`{"kind":"org","name":"etabA","period":"month","max_cost":1000000}`,
	} {
		if s := benchAdmin(b, http.MethodPut, "http://"+g.admins[0]+"/admin/budgets", budget, nil); s != http.StatusOK {
			b.Fatalf("%s: budget %s: %d", g.name, budget, s)
		}
	}
	return g
}

// benchAdmin sends an admin request with the master key and decodes the
// answer into v (when not nil); it returns the status.
func benchAdmin(tb testing.TB, method, url, body string, v any) int {
	tb.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// checkUpstreamRequests sends a chat completion and a stream of model
// "bench-check" through every process of g and checks what reached the
// recorder: POST /v1/chat/completions with the engine key, the upstream
// model name and, on the stream, stream_options.include_usage.
func (g *fastGateway) checkUpstreamRequests(b *testing.B, rec *upstreamRecorder) {
	b.Helper()
	for _, addr := range g.addrs {
		for _, stream := range []bool{false, true} {
			body := fmt.Sprintf(fastBody, "bench-check")
			if stream {
				body = fmt.Sprintf(fastStreamBody, "bench-check")
			}
			rec.reset()
			a, err := newRawClient(addr).do(rawPost(addr, "/v1/chat/completions", g.key, body), true)
			if err != nil || a.status != http.StatusOK {
				b.Fatalf("%s: bench-check (stream %v): %v %d %s", g.name, stream, err, a.status, a.body)
			}
			g.checked++
			got := rec.requests()
			if len(got) != 1 {
				b.Fatalf("%s: %d upstream requests for one (stream %v)", g.name, len(got), stream)
			}
			r := got[0]
			var v struct {
				Model         string
				Stream        bool
				StreamOptions map[string]any `json:"stream_options"`
			}
			json.Unmarshal(r.body, &v)
			if r.method != http.MethodPost || r.path != "/v1/chat/completions" || r.auth != "Bearer sim-secret" || v.Model != "bench/upstream" ||
				v.Stream != stream || stream && v.StreamOptions["include_usage"] != true {
				b.Fatalf("%s: upstream got %s %s (Authorization %q) %s", g.name, r.method, r.path, r.auth, r.body)
			}
			if stream && addr == g.addrs[0] {
				fmt.Printf("%s sends upstream: %s %s %s\n", g.name, r.method, r.path, r.body)
			}
		}
	}
}

// stop ends every process with SIGTERM (the accounting flushed).
func (g *fastGateway) stop() {
	for _, p := range g.procs {
		p.stop()
	}
}

// records counts the gateway's records (from its rollups) and reads those
// that arrived between from and to, once it is stopped.
func (g *fastGateway) records(b *testing.B, from, to time.Time) (int64, []llmflow.Record) {
	b.Helper()
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, g.db)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rolls, err := db.Rollups(ctx, allTime[0], allTime[1], llmflow.RollupFilter{})
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, r := range rolls {
		n += r.Requests
	}
	recs, err := db.Records(ctx, from.Add(-time.Second), to.Add(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return n, recs
}

// metricsSummary is every non-zero refusal, failure, drop and retry
// counter of the gateway's processes.
func (g *fastGateway) metricsSummary() []string {
	var out []string
	for i, addr := range g.addrs {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+procMasterKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out = append(out, fmt.Sprintf("%s-%d: /metrics: %v", g.name, i, err))
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 || f[1] == "0" {
				continue
			}
			for _, m := range []string{"llmflow_denied_total", "llmflow_connections_refused_total", "llmflow_accounting_dropped_total",
				"llmflow_accounting_failed_total", "llmflow_accounting_store_errors_total", "llmflow_upstream_retries_total",
				"llmflow_budget_refusals_total", "llmflow_usage_estimated_total", "llmflow_redis_failures_total"} {
				if strings.HasPrefix(f[0], m) {
					out = append(out, fmt.Sprintf("%s-%d: %s %s", g.name, i, f[0], f[1]))
				}
			}
		}
	}
	return out
}

// logProblems counts the warnings and errors in the gateway's logs and
// quotes the first.
func (g *fastGateway) logProblems() []string {
	var out []string
	for i, p := range g.procs {
		b, _ := os.ReadFile(p.log)
		n, first := 0, ""
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				if n++; first == "" {
					first = line
				}
			}
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s-%d: %d warnings or errors logged, the first: %s", g.name, i, n, tail(first, 400)))
		}
	}
	return out
}

// upstreamRecorder is an upstream in this process that keeps the
// requests it gets and answers as the instant upstream does.
type upstreamRecorder struct {
	*httptest.Server
	mu  sync.Mutex
	got []recordedRequest
}

type recordedRequest struct {
	method, path, auth string
	body               []byte
}

func newUpstreamRecorder(b *testing.B) *upstreamRecorder {
	r := &upstreamRecorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if !strings.HasSuffix(req.URL.Path, "/chat/completions") {
			io.WriteString(w, "ok")
			return
		}
		r.mu.Lock()
		r.got = append(r.got, recordedRequest{req.Method, req.URL.Path, req.Header.Get("Authorization"), body})
		r.mu.Unlock()
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, fastStream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, fastAnswer)
	}))
	b.Cleanup(r.Close)
	return r
}

func (r *upstreamRecorder) reset() {
	r.mu.Lock()
	r.got = nil
	r.mu.Unlock()
}

func (r *upstreamRecorder) requests() []recordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// benchRedis is the address of a Redis answering PING
// (LLMFLOW_TEST_REDIS_ADDR, default 127.0.0.1:6379), started (without
// persistence, stopped with the benchmark) when none answers there; ""
// and why when there is none.
func benchRedis(b *testing.B) (addr, why string) {
	addr = os.Getenv("LLMFLOW_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	ping := func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, "PING\r\n")
		buf := make([]byte, 7)
		n, _ := io.ReadFull(c, buf)
		return string(buf[:n]) == "+PONG\r\n"
	}
	if ping() {
		return addr, ""
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", "nothing answers on " + addr + " and redis-server is not installed"
	}
	host, port, _ := net.SplitHostPort(addr)
	startChildProc(b, "redis-server", exec.Command(bin, "--bind", host, "--port", port, "--save", "", "--appendonly", "no"),
		filepath.Join(b.TempDir(), "redis.log"), syscall.SIGKILL)
	for range 300 {
		if ping() {
			return addr, ""
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", "redis-server on " + addr + " did not answer"
}

// dropRedisKeys deletes the keys matching pattern (the benchmark's own,
// under its key prefix) from the Redis at addr.
func dropRedisKeys(addr, pattern string) {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	it := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		rdb.Del(ctx, it.Val())
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if f, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && f > 0 {
		return f
	}
	return def
}

// pctl is the q-quantile of d in microseconds (d is sorted in place).
func pctl(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[int(q*float64(len(d)-1))]) / 1e3
}

func median(f []float64) float64 {
	if len(f) == 0 {
		return 0
	}
	s := slices.Clone(f)
	slices.Sort(s)
	return s[len(s)/2]
}

// fastReport prints the table and the ratios, and reports them.
func fastReport(b *testing.B, targets []*fastTarget, samples, rounds int, seconds time.Duration, conc int, odd []string) {
	var w strings.Builder
	fmt.Fprintf(&w, "\nBenchmarkFastPath: c=1 %d interleaved rounds; streaming %d rounds; c=%d %d rounds × %v per target (median)\n",
		samples, samples, conc, rounds, seconds)
	fmt.Fprintf(&w, "%-9s %9s %9s %11s %11s %11s %13s %11s\n", "target", "p50 µs", "p99 µs", "added p50", "added p99", "req/s c=16", "TTFB p50 µs", "TTFB added")
	type row struct{ p50, p99, add50, add99, rps, ttfb, ttfbAdd float64 }
	rows := map[string]row{}
	for _, t := range targets {
		r := row{pctl(t.lat, 0.5), pctl(t.lat, 0.99), pctl(t.added, 0.5), pctl(t.added, 0.99), median(t.rps), pctl(t.ttfb, 0.5), pctl(t.ttfbAdded, 0.5)}
		rows[t.name] = r
		fmt.Fprintf(&w, "%-9s %9.1f %9.1f %11.1f %11.1f %11.0f %13.1f %11.1f\n", t.name, r.p50, r.p99, r.add50, r.add99, r.rps, r.ttfb, r.ttfbAdd)
		if t.name != "direct" {
			b.ReportMetric(r.add50, t.name+"-added-p50-µs")
			b.ReportMetric(r.add99, t.name+"-added-p99-µs")
			b.ReportMetric(r.ttfbAdd, t.name+"-ttfb-added-µs")
		}
		b.ReportMetric(r.rps, t.name+"-req/s")
	}
	fmt.Fprintf(&w, "(added: the target's time minus the direct request's of the same round; TTFB: to the first body byte of the SSE answer)\n")
	for _, t := range targets {
		redials := t.c1.redials
		for _, c := range t.conns {
			redials += c.redials
		}
		if len(t.non200) > 0 || t.errs > 0 || redials > 0 {
			fmt.Fprintf(&w, "%s: non-200 %v, errors %d (first: %s), kept-alive connections closed by the server %d\n", t.name, t.non200, t.errs, t.firstErr, redials)
			if len(t.non200) > 0 || t.errs > 0 {
				b.Errorf("%s: non-200 answers %v, errors %d (first: %s)", t.name, t.non200, t.errs, t.firstErr)
			}
		}
	}
	for _, s := range odd {
		fmt.Fprintln(&w, s)
	}
	goal := func(name, label string, got, limit float64, atMost bool) {
		ok, op := got <= limit, "≤"
		if !atMost {
			ok, op = got >= limit, "≥"
		}
		verdict := "PASS"
		if !ok {
			verdict = "FAIL"
		}
		fmt.Fprintf(&w, "  %-58s %6.2f   goal %s %.2f   %s\n", label, got, op, limit, verdict)
		b.ReportMetric(got, name)
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	l, p, n := rows["llmflow"], rows["proxy"], rows["nginx"]
	fmt.Fprintf(&w, "issue 25, item 1 (llmflow: SQLite, accounting, fair share, budgets, key limits, metrics):\n")
	goal("p50-vs-proxy", "added p50, llmflow / httputil.ReverseProxy", ratio(l.add50, p.add50), 0.6, true)
	goal("p99-vs-proxy", "added p99, llmflow / httputil.ReverseProxy", ratio(l.add99, p.add99), 1, true)
	goal("rps-vs-nginx", fmt.Sprintf("requests/s at c=%d, llmflow / nginx", conc), ratio(l.rps, n.rps), 0.8, false)
	goal("ttfb-vs-nginx", "streaming TTFB added, llmflow / nginx", ratio(l.ttfbAdd, n.ttfbAdd), 2, true)
	if r, ok := rows["redis"]; ok {
		fmt.Fprintf(&w, "issue 25, item 2 (llmflow with a redis block, the same key limits and budgets, vs the single gateway):\n")
		goal("redis-p50-vs-single", "added p50, redis / single", ratio(r.add50, l.add50), 1.25, true)
		goal("redis-rps-vs-single", fmt.Sprintf("requests/s at c=%d, redis / single", conc), ratio(r.rps, l.rps), 0.8, false)
	}
	if r, ok := rows["redis-x2"]; ok {
		fmt.Fprintf(&w, "  (two Redis replicas behind nginx round robin: added p50 %.0f µs, %.0f requests/s; nginx alone adds %.0f µs)\n", r.add50, r.rps, n.add50)
	}
	fmt.Fprintf(&w, "numbers from shared CPUs are noisy: compare within one run\n")
	fmt.Print(w.String())
}
