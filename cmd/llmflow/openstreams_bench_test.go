package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkOpenStreams measures issue 25 item 3's memory: the resident set
// of a real `llmflow serve` process idle (started, one request answered)
// and with N streams open at once (LLMFLOW_BENCH_STREAMS, default 1000;
// the goal run is 10,000: 10,000 open streams in ≤ 300 MB), each to a
// slow streaming engine in a process of its own (a role chunk at once,
// then a content chunk every LLMFLOW_BENCH_STREAM_INTERVAL, default 5s,
// never ending), measured once every stream has received its first body
// byte and had time for one content chunk.
//
//	LLMFLOW_BENCH_STREAMS=10000 go test -run '^$' -bench '^BenchmarkOpenStreams$' -benchtime 1x -timeout 30m ./cmd/llmflow/
//
// The file limit is raised (soft and hard, as root) before any process
// starts, and the children inherit it. The client connections come from
// several 127.0.1.x addresses and the engine listens on four 127.0.0.x
// addresses, so that no address pair runs out of ephemeral ports. The
// gateway admits every stream: a pool of 2N+64 slots (all of them within
// lab-nlp's reservation), no connection caps, a key without limits.
func BenchmarkOpenStreams(b *testing.B) {
	n := envInt("LLMFLOW_BENCH_STREAMS", 1000)
	interval := os.Getenv("LLMFLOW_BENCH_STREAM_INTERVAL")
	if interval == "" {
		interval = "5s"
	}
	every, err := time.ParseDuration(interval)
	if err != nil {
		b.Fatal(err)
	}
	limit := raiseNofile(b, uint64(max(200000, 4*n+10000)))
	// The gateway holds two sockets per stream (client, engine) and some
	// files of its own: where the hard limit cannot be raised (a
	// container without CAP_SYS_RESOURCE), as many streams as fit, and
	// the 10,000 figure is projected from them.
	if fit := int(limit-200) / 2; n > fit {
		fmt.Printf("BenchmarkOpenStreams: %d streams do not fit in the file limit of %d (two sockets each in the gateway): %d\n", n, limit, fit)
		n = fit
	}
	dir := b.TempDir()

	// The slow engine: one port on four loopback addresses.
	_, port, _ := net.SplitHostPort(freeAddr(b))
	var engine []string
	for i := 1; i <= 4; i++ {
		engine = append(engine, fmt.Sprintf("127.0.0.%d:%s", i, port))
	}
	startBenchHelper(b, dir, "slowsse", strings.Join(engine, ","), "LLMFLOW_BENCH_INTERVAL="+interval)

	os.WriteFile(filepath.Join(dir, "master.key"), []byte(procMasterKey+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "vllm.key"), []byte("sim-secret\n"), 0o600)
	var ups strings.Builder
	for i, a := range engine {
		fmt.Fprintf(&ups, "  upstream \"slow%d\" { base_url = \"http://%s\" }\n", i, a)
	}
	admin := freeAddr(b)
	cfg := filepath.Join(dir, "gateway.hcl")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`master_key_file = "master.key"
org "etabA" {
  share = 0.75
  team "lab-nlp" {}
}
org "etabB" {
  share = 0.25
  team "lab-chem" {}
}
pool "slow" { capacity = %d }
model "slow" {
  upstream_model = "bench/upstream"
  pool           = "slow"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.20
  }
%s}
store {
  path = "llmflow.db"
}
admin {
  listen = %q
}
limits {
  max_connections             = 0
  max_connections_per_network = 0
}
`, 2*n+64, ups.String(), admin)), 0o600)
	p, addr := startBenchServe(b, "llmflow", cfg, filepath.Join(dir, "serve.log"), admin)
	var k struct{ Key string }
	if s := benchAdmin(b, http.MethodPost, "http://"+admin+"/admin/keys", `{"team":"lab-nlp","name":"streams"}`, &k); k.Key == "" {
		b.Fatalf("create key: %d", s)
	}

	// Idle: started, one request answered.
	if a, err := newRawClient(addr).do(rawPost(addr, "/v1/chat/completions", k.Key,
		`{"model":"slow","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`), true); err != nil || a.status != http.StatusOK {
		b.Fatalf("one request: %v %d %s", err, a.status, a.body)
	}
	time.Sleep(2 * time.Second)
	rss0 := p.rssBytes(b)
	heap0, gr0 := goMetrics(addr)

	b.ResetTimer()
	req := rawPost(addr, "/v1/chat/completions", k.Key,
		`{"model":"slow","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"go on"}]}`)
	sources := 1 + n/4000
	conns := make([]net.Conn, n)
	var next atomic.Int64
	var mu sync.Mutex
	failures := map[string]int{}
	var wg sync.WaitGroup
	t0 := time.Now()
	for range 128 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				local := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%sources))}
				c, err := holdRawStream(addr, local, req)
				if err != nil {
					mu.Lock()
					failures[err.Error()]++
					mu.Unlock()
					continue
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	opened := time.Since(t0)
	b.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	if len(failures) > 0 {
		b.Fatalf("streams that did not open: %v\ngateway log: %s", failures, p.logTail(2000))
	}
	time.Sleep(every + time.Second) // every stream has had a content chunk
	rss1 := p.rssBytes(b)
	heap1, gr1 := goMetrics(addr)
	b.StopTimer()

	perStream := float64(rss1-rss0) / float64(n)
	at10k := float64(rss1)
	how := "measured"
	if n != 10000 {
		at10k, how = float64(rss0)+10000*perStream, "projected from "+strconv.Itoa(n)
	}
	verdict := "PASS"
	if at10k > 300e6 {
		verdict = "FAIL"
	}
	fmt.Printf("\nBenchmarkOpenStreams: %d streams opened in %v (each with its first body byte), then held %v\n", n, opened.Round(time.Millisecond), every+time.Second)
	fmt.Printf("llmflow serve VmRSS: idle %.1f MiB, with %d open streams %.1f MiB: %.1f KB per stream\n",
		float64(rss0)/(1<<20), n, float64(rss1)/(1<<20), perStream/1e3)
	if heap1 > 0 {
		fmt.Printf("Go heap in use: idle %.1f MiB, open %.1f MiB; goroutines: idle %d, open %d (%.2f per stream)\n",
			heap0/(1<<20), heap1/(1<<20), int(gr0), int(gr1), (gr1-gr0)/float64(n))
		fmt.Printf("goroutine stacks with the streams open: %.1f MiB (%.1f KB per stream)\n", lastStack/(1<<20), lastStack/float64(n)/1e3)
	}
	fmt.Printf("issue 25, item 3: 10,000 open streams in ≤ 300 MB: %.0f MB (%s)   %s\n", at10k/1e6, how, verdict)
	fmt.Printf("numbers from shared CPUs are noisy\n")
	b.ReportMetric(float64(rss0)/(1<<20), "RSS-MiB-idle")
	b.ReportMetric(float64(rss1)/(1<<20), "RSS-MiB-open")
	b.ReportMetric(perStream/1e3, "KB/stream")
	b.ReportMetric(at10k/1e6, "MB-at-10k")
	if heap1 > 0 {
		b.ReportMetric(heap1/(1<<20), "heap-MiB-open")
		b.ReportMetric((gr1-gr0)/float64(n), "goroutines/stream")
	}
	b.ReportMetric(0, "ns/op")
}

// holdRawStream sends req from local to addr and returns the connection once
// the answer's first body byte has arrived (nothing more is read: the
// socket buffers hold what follows).
func holdRawStream(addr string, local *net.TCPAddr, req []byte) (net.Conn, error) {
	c, err := (&net.Dialer{LocalAddr: local, Timeout: 30 * time.Second}).Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %v", err)
	}
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	fail := func(err error) (net.Conn, error) { c.Close(); return nil, err }
	if _, err := c.Write(req); err != nil {
		return fail(fmt.Errorf("write: %v", err))
	}
	br := bufio.NewReaderSize(c, 4096)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return fail(fmt.Errorf("status line: %v", err))
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200")) {
		body := make([]byte, 300)
		nr, _ := io.ReadFull(br, body)
		return fail(fmt.Errorf("%s %s", bytes.TrimSpace(line), bytes.ReplaceAll(body[:nr], []byte("\r\n"), []byte(" "))))
	}
	for {
		if line, err = br.ReadSlice('\n'); err != nil {
			return fail(fmt.Errorf("headers: %v", err))
		}
		if len(line) <= 2 {
			break
		}
	}
	if _, err := br.Peek(1); err != nil {
		return fail(fmt.Errorf("first body byte: %v", err))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// raiseNofile raises this process's file limit, soft and hard, to want
// (at most fs.nr_open); the processes it starts inherit it. Without the
// right to raise the hard limit (CAP_SYS_RESOURCE) the soft one goes to
// the hard one. It returns the limit now.
func raiseNofile(b *testing.B, want uint64) uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		b.Fatal(err)
	}
	if r.Cur >= want {
		return r.Cur
	}
	if s, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if nr, err := strconv.ParseUint(strings.TrimSpace(string(s)), 10, 64); err == nil && nr < want {
			want = nr
		}
	}
	nr := syscall.Rlimit{Cur: want, Max: max(want, r.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nr); err != nil {
		nr = syscall.Rlimit{Cur: r.Max, Max: r.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nr); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("BenchmarkOpenStreams: file limit %d: raising the hard limit to %d is not allowed (%v)\n", r.Max, want, err)
	}
	return nr.Cur
}

var goMetricRe = regexp.MustCompile(`(?m)^(go_memstats_heap_inuse_bytes|go_memstats_stack_inuse_bytes|go_goroutines) (\S+)$`)

// lastStack is the stack in use goMetrics read last.
var lastStack float64

// goMetrics reads the gateway's Go heap in use and goroutines from its
// /metrics (0 when it does not export them).
func goMetrics(addr string) (heap, goroutines float64) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range goMetricRe.FindAllSubmatch(body, -1) {
		f, _ := strconv.ParseFloat(string(m[2]), 64)
		switch string(m[1]) {
		case "go_goroutines":
			goroutines = f
		case "go_memstats_stack_inuse_bytes":
			lastStack = f
		default:
			heap = f
		}
	}
	return heap, goroutines
}
