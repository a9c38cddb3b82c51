package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"github.com/go-llmflow/llmflow/internal/h1/h1test"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/store"
)

const benchAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"sim/llama","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":21,"completion_tokens":3,"total_tokens":24}}`

const benchBody = `{"model":"m","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in two words."}],"max_tokens":16,"temperature":0}`

// BenchmarkOverhead interleaves, on one client and its keep-alive
// connections, a request straight to an instant upstream, one through the
// gateway (SQLite store, auth, accounting and metrics on) and one through a
// bare httputil.ReverseProxy, and reports the percentiles of each and of
// what each adds to the direct request of the same iteration.
//
//	go test -run '^$' -bench Overhead -benchtime 20000x ./gateway
func BenchmarkOverhead(b *testing.B) {
	env := newBenchEnv(b)
	upstream, gw, key := env.upstream, env.gw, env.key
	ctx := context.Background()
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()

	target, _ := url.Parse(upstream.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rpSrv := httptest.NewServer(rp)
	defer rpSrv.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true}}
	do := func(u, auth string) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, u+"/v1/chat/completions", strings.NewReader(benchBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: status %d", u, resp.StatusCode)
		}
		return d
	}
	// warm every connection and the key cache
	for range 50 {
		do(upstream.URL, "Bearer bench-upstream")
		do(gwSrv.URL, "Bearer "+key)
		do(rpSrv.URL, "Bearer bench-upstream")
	}

	direct := make([]time.Duration, 0, b.N)
	viaGW := make([]time.Duration, 0, b.N)
	viaRP := make([]time.Duration, 0, b.N)
	addGW := make([]time.Duration, 0, b.N)
	addRP := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// rotate the order so no path always runs first
		var d, g, r time.Duration
		switch i % 3 {
		case 0:
			d = do(upstream.URL, "Bearer bench-upstream")
			g = do(gwSrv.URL, "Bearer "+key)
			r = do(rpSrv.URL, "Bearer bench-upstream")
		case 1:
			g = do(gwSrv.URL, "Bearer "+key)
			r = do(rpSrv.URL, "Bearer bench-upstream")
			d = do(upstream.URL, "Bearer bench-upstream")
		default:
			r = do(rpSrv.URL, "Bearer bench-upstream")
			d = do(upstream.URL, "Bearer bench-upstream")
			g = do(gwSrv.URL, "Bearer "+key)
		}
		direct, viaGW, viaRP = append(direct, d), append(viaGW, g), append(viaRP, r)
		addGW, addRP = append(addGW, g-d), append(addRP, r-d)
	}
	b.StopTimer()
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		p := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))]) / 1e3 }
		b.ReportMetric(p(0.50), name+"-p50-µs")
		b.ReportMetric(p(0.99), name+"-p99-µs")
	}
	report("direct", direct)
	report("gateway", viaGW)
	report("proxy", viaRP)
	report("gw-added", addGW)
	report("proxy-added", addRP)
	if err := gw.Close(ctx); err != nil {
		b.Fatal(err)
	}
	w, f, dr := gw.Recorder().Counts()
	if f != 0 || dr != 0 || w < uint64(b.N) {
		b.Fatalf("accounting: written %d failed %d dropped %d for %d requests", w, f, dr, b.N)
	}
}

// BenchmarkAccountingMemory sends b.N requests through the gateway (SQLite
// store, accounting on) and reports the live heap after a GC at the start,
// the middle and the end: the accounting queue is bounded and batches are
// reused, so the heap stays flat however many records are written.
//
//	go test -run '^$' -bench AccountingMemory -benchtime 200000x ./gateway
func BenchmarkAccountingMemory(b *testing.B) {
	env := newBenchEnv(b)
	gw, key := env.gw, env.key
	ctx := context.Background()
	heap := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapInuse) / (1 << 20)
	}
	var start, mid float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i == b.N/10 {
			b.StopTimer()
			start = heap()
			b.StartTimer()
		}
		if i == b.N/2 {
			b.StopTimer()
			mid = heap()
			b.StartTimer()
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(benchBody))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
	b.StopTimer()
	if err := gw.Close(ctx); err != nil {
		b.Fatal(err)
	}
	end := heap()
	w, f, d := gw.Recorder().Counts()
	b.ReportMetric(start, "heap-MiB-at-10%")
	b.ReportMetric(mid, "heap-MiB-at-50%")
	b.ReportMetric(end, "heap-MiB-at-end")
	if f != 0 || int(w+d) < b.N {
		b.Fatalf("written %d failed %d dropped %d of %d", w, f, d, b.N)
	}
	b.ReportMetric(float64(d), "dropped")
}

// benchEnv is an instant upstream and a gateway in front of it (SQLite
// store in a temporary directory, auth, accounting and metrics on) with a
// client key.
type benchEnv struct {
	upstream *httptest.Server
	gw       *gateway.Gateway
	db       *store.SQLite
	key      string
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	e := &benchEnv{}
	e.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, benchAnswer)
	}))
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "master.key"), []byte("bench-master-0123456789abcdef0123456789\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "vllm.key"), []byte("bench-upstream\n"), 0o600)
	src := fmt.Sprintf(`
master_key_file = "master.key"
org "a" {
  share = 1
  team "t" {}
}
pool "p" { capacity = 64 }
model "m" {
  upstream_model = "sim/llama"
  pool           = "p"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.2
  }
  upstream "u" { base_url = %q }
}
store { path = "bench.db" }
limits { auth_failures_per_minute = 0 }
`, e.upstream.URL)
	cfg, err := config.Parse(filepath.Join(dir, "gateway.hcl"), []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	if e.db, err = store.OpenSQLite(context.Background(), cfg.Store.Path); err != nil {
		b.Fatal(err)
	}
	// A project under the team (projects come from Slurm), so that the key
	// falls under a budget on every scope.
	accts := append(cfg.Accounts(), llmflow.Account{Name: "proj", Kind: llmflow.KindProject, Parent: "t", Shares: 1})
	opts := gateway.Options{Config: cfg, Keys: e.db, Records: e.db, Accounts: accts}
	budgetsOn := os.Getenv("LLMFLOW_BENCH_BUDGETS") == ""
	if budgetsOn {
		opts.Budgets = e.db
	}
	if os.Getenv("LLMFLOW_BENCH_LOG") == "json" {
		// what serve --log-format json does, minus the disk
		opts.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if e.gw, err = gateway.New(opts); err != nil {
		b.Fatal(err)
	}
	admin := gateway.Principal{Name: "bench", Role: gateway.RoleProxyAdmin}
	req := gateway.KeyRequest{Team: "t", Name: "bench"}
	switch os.Getenv("LLMFLOW_BENCH_BUDGETS") {
	case "off": // the key as before budgets: no project, no tag
	case "key-only": // the same key as with budgets, without budgets or limits
		req.Project, req.Tags = "proj", []string{"bench"}
	default: // budgets on every scope (and one per model), limits on the key
		req.Project, req.Tags = "proj", []string{"bench"}
		req.RPM, req.TPM, req.MaxInFlight = 1_000_000_000, 1_000_000_000, 1000
	}
	var k llmflow.Key
	k, e.key, err = e.gw.CreateKey(b.Context(), req, admin)
	if err != nil {
		b.Fatal(err)
	}
	if budgetsOn {
		for _, sc := range []budgets.Scope{{Kind: budgets.KindOrg, Name: "a"}, {Kind: budgets.KindTeam, Name: "t"},
			{Kind: budgets.KindTeam, Name: "t", Model: "m"}, {Kind: budgets.KindProject, Name: "proj"},
			{Kind: budgets.KindKey, Name: k.ID}, {Kind: budgets.KindTag, Name: "bench"}} {
			if err := e.db.PutBudget(b.Context(), budgets.Budget{Scope: sc, Period: budgets.Month, MaxCost: 1e6, SoftLimit: 1e5}); err != nil {
				b.Fatal(err)
			}
		}
		e.gw.Start(b.Context()) // loads them
		if n := gatewayBudgets(b, e); n != 6 {
			b.Fatalf("%d budgets in force, want 6", n)
		}
	}
	b.Cleanup(func() {
		e.gw.Close(context.Background())
		e.db.Close()
		e.upstream.Close()
	})
	return e
}

// gatewayBudgets returns how many budgets the gateway has in force.
func gatewayBudgets(_ *testing.B, e *benchEnv) int { return len(e.gw.BudgetTable().Status()) }

// BenchmarkThroughput sends requests from parallel kept-alive client
// connections through the gateway on internal/h1's server (what `serve`
// runs) to an instant engine: the CPU cost of a request, for profiles
// (-cpuprofile). BenchmarkFastPath in cmd/llmflow measures real processes.
func BenchmarkThroughput(b *testing.B) {
	env := newBenchEnv(b)
	srv := h1test.NewServer(env.gw)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + env.key +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(benchBody)) + "\r\n\r\n" + benchBody)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
