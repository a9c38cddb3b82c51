package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The scale figures of one replica (no Redis) over real sockets between
// real processes: client (this process) → `llmflow serve` → `llmflow
// vllmsim`. They measure, they do not judge: read them in the output.
//
//	go test ./cmd/llmflow -run '^$' -bench BenchmarkProcess -benchtime 2000x
//
// Latency: sequential non-streaming requests (1 token) through the
// gateway and straight to the simulator; the gateway's added latency is
// the difference of the percentiles. Throughput: 64 clients in parallel.
// Streams: 1000 streams held open through the gateway; the gateway's RSS
// and Go heap before and with them.

// startSimProc runs `llmflow vllmsim` as a process.
func startSimProc(b *testing.B, dir string, step time.Duration) string {
	exe, _ := os.Executable()
	addr := freeAddr(b)
	os.WriteFile(filepath.Join(dir, "sim.key"), []byte("sim-secret\n"), 0o600)
	p := &proc{t: b, done: make(chan struct{}), logs: &syncBuf{}}
	cmd := exec.Command(exe, "vllmsim", "--listen", addr, "--api-key-file", filepath.Join(dir, "sim.key"),
		"--step", step.String(), "--max-num-seqs", "4096", "--kv-blocks", "1000000", "--log-level", "warn")
	p.cmd = cmd
	cmd.Stderr = p.logs
	cmd.Env = append(os.Environ(), "LLMFLOW_TEST_EXEC_MAIN=1")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	b.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	for range 500 {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			return "http://" + addr
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("vllmsim did not start: %s", p.logs)
	return ""
}

func BenchmarkProcess(b *testing.B) {
	dir := b.TempDir()
	sim := startSimProc(b, dir, 200*time.Microsecond)
	slow := startSimProc(b, dir, 20*time.Millisecond) // streams that stay open
	cfg := procConfig(b, dir, sim, `model "sim-slow" {
  upstream_model = "sim/llama"
  pool           = "sim"
  key_file       = "vllm.key"
  upstream "slow0" { base_url = "`+slow+`" }
}
`+"store {\n  path = \"llmflow.db\"\n}\nlimits {\n  max_connections = 0\n  max_connections_per_network = 0\n}\n")
	src, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(src), "capacity = 64", "capacity = 4096", 1)), 0o600)
	p := startServe(b, cfg) // at the default log level: one access-log line per request, as in production
	key := createKey(b, p.base)
	tr := &http.Transport{MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 0, DisableCompression: true}
	c := &http.Client{Transport: tr}
	body := `{"model":"%s","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	do := func(base, auth, model string) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(body, model)))
		req.Header.Set("Authorization", "Bearer "+auth)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	pct := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds())
	}

	b.Run("latency", func(b *testing.B) {
		for range 200 { // warm both paths
			do(p.base, key, "sim-llama")
			do(sim, "sim-secret", "sim/llama")
		}
		var via, direct []time.Duration
		for range b.N {
			via = append(via, do(p.base, key, "sim-llama"))
			direct = append(direct, do(sim, "sim-secret", "sim/llama"))
		}
		b.ReportMetric(pct(direct, 0.5), "direct-p50-µs")
		b.ReportMetric(pct(via, 0.5), "gateway-p50-µs")
		b.ReportMetric(pct(via, 0.5)-pct(direct, 0.5), "added-p50-µs")
		b.ReportMetric(pct(via, 0.99)-pct(direct, 0.99), "added-p99-µs")
	})

	b.Run("throughput", func(b *testing.B) {
		var next atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 64 {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					do(p.base, key, "sim-llama")
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "req/s")
	})

	b.Run("streams", func(b *testing.B) {
		const n = 1000
		rss0, heap0 := procMem(b, p)
		var open sync.WaitGroup
		release := make(chan struct{})
		var wg sync.WaitGroup
		open.Add(n)
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/chat/completions",
					strings.NewReader(`{"model":"sim-slow","stream":true,"max_tokens":8000,"messages":[{"role":"user","content":"go on"}]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil || resp.StatusCode != 200 {
					if err == nil {
						msg, _ := io.ReadAll(resp.Body)
						err = fmt.Errorf("%d %s", resp.StatusCode, msg)
					}
					b.Errorf("stream: %v", err)
					open.Done()
					return
				}
				br := bufio.NewReader(resp.Body)
				br.ReadString('\n')
				open.Done()
				go io.Copy(io.Discard, br)
				<-release
				resp.Body.Close()
			})
		}
		open.Wait()
		time.Sleep(time.Second) // let the streams run
		rss1, heap1 := procMem(b, p)
		close(release)
		wg.Wait()
		b.ReportMetric(float64(rss1-rss0)/(1<<20), "RSS-MiB/1000-streams")
		b.ReportMetric(float64(heap1-heap0)/(1<<20), "heap-MiB/1000-streams")
		b.ReportMetric(float64(rss0)/(1<<20), "RSS-MiB-idle")
	})
}

var heapRe = regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes (\S+)$`)

// procMem returns the gateway process's resident set (from /proc) and Go
// heap in use (from /metrics), in bytes.
func procMem(b *testing.B, p *proc) (rss, heap int64) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb << 10
		}
	}
	resp, err := http.Get(p.base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if v := heapRe.FindSubmatch(m); v != nil {
		f, _ := strconv.ParseFloat(string(v[1]), 64)
		heap = int64(f)
	}
	return rss, heap
}

// BenchmarkProcessRedis is BenchmarkProcess's latency and throughput with
// the fair-share counters in Redis (LLMFLOW_TEST_REDIS_ADDR, default the
// machine's 127.0.0.1:6379, under a key prefix of its own): one replica,
// then three behind a round-robin client (one SQLite file, a spool each).
// The key has RPM, TPM and in-flight limits and its organisation a
// budget, all far from reached, so that every request also goes through
// the shared ledger, as in production: one Redis round trip at admission
// and one at the end.
//
//	go test ./cmd/llmflow -run '^$' -bench BenchmarkProcessRedis -benchtime 5000x
func BenchmarkProcessRedis(b *testing.B) {
	addr := os.Getenv("LLMFLOW_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	dir := b.TempDir()
	sim := startSimProc(b, dir, 200*time.Microsecond)
	cfg := replicasConfig(b, dir, sim, redisAt(addr)+fmt.Sprintf("  key_prefix = \"llmflow-bench:%d:\"\n", time.Now().UnixNano()),
		`pool "sim" { capacity = 4096 }`, "limits {\n  max_connections = 0\n  max_connections_per_network = 0\n}\n")
	reps := startReplicas(b, cfg, dir, 3)
	_, key := procAdmin(b, http.MethodPost, reps[0].base+"/admin/keys", `{"team":"lab-nlp","name":"bench","rpm":100000000,"tpm":1000000000,"max_inflight":100000}`)
	if s, _ := procAdmin(b, http.MethodPut, reps[0].base+"/admin/budgets", `{"kind":"org","name":"etabA","period":"month","max_cost":1000000}`); s != http.StatusOK || key == "" {
		b.Fatalf("key or budget not set (%d)", s)
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2048, DisableCompression: true}}
	do := func(base string) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-llama","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	direct := func() time.Duration {
		req, _ := http.NewRequest(http.MethodPost, sim+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim/llama","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer sim-secret")
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(t0)
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("%d-replicas/latency", n), func(b *testing.B) {
			var via, dir []time.Duration
			for i := range b.N {
				via = append(via, do(reps[i%n].base))
				dir = append(dir, direct())
			}
			b.ReportMetric(p50(via)-p50(dir), "added-p50-µs")
		})
		b.Run(fmt.Sprintf("%d-replicas/throughput", n), func(b *testing.B) {
			var next atomic.Int64
			var wg sync.WaitGroup
			t0 := time.Now()
			for w := range 64 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						do(reps[(w+int(i))%n].base)
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "req/s")
		})
	}
}
