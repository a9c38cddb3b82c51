package main

import (
	"bufio"
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
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/vllmsim"
)

// TestMain lets the tests run the llmflow command as a real process: the
// test binary started with LLMFLOW_TEST_EXEC_MAIN=1 is llmflow (main,
// with its signal handling), not the tests.
func TestMain(m *testing.M) {
	if os.Getenv("LLMFLOW_TEST_EXEC_MAIN") == "1" {
		main()
		return
	}
	if benchChild() { // a helper server of the process benchmarks
		return
	}
	os.Exit(m.Run())
}

// proc is an `llmflow serve` process.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	base string
	done chan struct{}
	err  error // Wait's, once done is closed
	logs *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listenRe = regexp.MustCompile(`llmflow gateway listening"? addr=(\S+)`)

// startServe runs `llmflow serve -c cfgPath` on a free loopback port and
// waits until it listens.
func startServe(t testing.TB, cfgPath string, extraEnv ...string) *proc {
	t.Helper()
	return startServeAt(t, cfgPath, "127.0.0.1:0", extraEnv...)
}

// startServeAt is startServe on the given address.
func startServeAt(t testing.TB, cfgPath, addr string, extraEnv ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "serve", "-c", cfgPath, "--listen", addr)
	cmd.Env = append(os.Environ(), append([]string{"LLMFLOW_TEST_EXEC_MAIN=1"}, extraEnv...)...)
	p := &proc{t: t, cmd: cmd, done: make(chan struct{}), logs: &syncBuf{}}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.logs.Write([]byte(line + "\n"))
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case a := <-addrc:
		p.base = "http://" + a
	case <-p.done:
		t.Fatalf("llmflow serve exited before listening: %v\n%s", p.err, p.logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("llmflow serve did not listen within a minute:\n%s", p.logs)
	}
	return p
}

// signal sends sig and, for SIGTERM and SIGKILL, waits for the exit.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	if sig == syscall.SIGHUP {
		return
	}
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		p.t.Fatalf("llmflow serve did not exit after %v:\n%s", sig, p.logs)
	}
}

// exitCode is the process's exit status (-1 when killed by a signal).
func (p *proc) exitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

const procMasterKey = "master-proc-0123456789abcdef0123456789"

// procConfig writes master.key, vllm.key and gateway.hcl (model
// "sim-llama" on upstream simURL, then storeBlock) into dir.
func procConfig(t testing.TB, dir, simURL, storeBlock string) string {
	t.Helper()
	os.WriteFile(filepath.Join(dir, "master.key"), []byte(procMasterKey+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "vllm.key"), []byte("sim-secret\n"), 0o600)
	src := fmt.Sprintf(`master_key_file = "master.key"
org "etabA" {
  share = 0.75
  team "lab-nlp" {}
}
org "etabB" {
  share = 0.25
  team "lab-chem" {}
}
pool "sim" { capacity = 64 }
model "sim-llama" {
  upstream_model = "sim/llama"
  pool           = "sim"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.20
  }
  upstream "sim0" { base_url = %q }
}
%s
`, simURL, storeBlock)
	path := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startSim runs a simulated vLLM in the test process (the gateway is the
// process under test).
func startSim(t testing.TB, step time.Duration) string {
	t.Helper()
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: step,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 256, KVBlocks: 1 << 16}})
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.Close() })
	return srv.URL
}

// createKey makes a client key of lab-nlp through the admin API.
func createKey(t testing.TB, base string) string { return createTeamKey(t, base, "lab-nlp") }

// createTeamKey makes a client key of team through the admin API.
func createTeamKey(t testing.TB, base, team string) string {
	t.Helper()
	status, key := procAdmin(t, http.MethodPost, base+"/admin/keys", `{"team":"`+team+`","name":"load"}`)
	if key == "" {
		t.Fatalf("create key of %s: %d", team, status)
	}
	return key
}

// procAdmin sends an admin request with the master key; it returns the
// answer's status and its "key" field (a created key's secret).
func procAdmin(t testing.TB, method, url, body string) (status int, key string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Key string `json:"key"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v.Key
}

// healthDetails returns /healthz with the master key.
func healthDetails(base string) (int, map[string]any) {
	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

func acctField(h map[string]any, name string) any {
	a, _ := h["accounting"].(map[string]any)
	return a[name]
}

// load sends requests from workers until stopped and keeps the request id
// of every request that got a complete answer: a 200 whose body was read
// to its end without error (for a stream: through [DONE] and the chunked
// terminator).
type load struct {
	base, key string
	client    *http.Client
	stop      atomic.Bool
	wg        sync.WaitGroup

	mu        sync.Mutex
	answered  map[string]bool // id → stream
	doneNoEnd []string        // streams that had [DONE] but no clean end
	errs      int
	non200    map[int]int
}

func startLoad(base, key string, workers int) *load {
	return startLoadWith(base, key, workers, &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true})
}

func startLoadWith(base, key string, workers int, tr http.RoundTripper) *load {
	l := &load{base: base, key: key, answered: map[string]bool{}, non200: map[int]int{},
		client: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
	for w := range workers {
		l.wg.Go(func() {
			for i := 0; !l.stop.Load(); i++ {
				l.one((w+i)%2 == 0)
			}
		})
	}
	return l
}

func (l *load) one(stream bool) {
	body := `{"model":"sim-llama","max_tokens":8,"messages":[{"role":"user","content":"count to eight"}]`
	if stream {
		body += `,"stream":true`
	}
	body += "}"
	req, _ := http.NewRequest(http.MethodPost, l.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+l.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		l.mu.Lock()
		l.errs++
		l.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		return
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case resp.StatusCode != http.StatusOK:
		l.non200[resp.StatusCode]++
		defer time.Sleep(10 * time.Millisecond) // no spinning on refusals
	case rerr != nil && stream && bytes.Contains(b, []byte("data: [DONE]")):
		l.doneNoEnd = append(l.doneNoEnd, id)
	case rerr != nil:
		l.errs++
	case stream && !bytes.Contains(b, []byte("data: [DONE]")):
		l.errs++
	default:
		l.answered[id] = stream
	}
}

// refused is how many answers had status code.
func (l *load) refused(code int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.non200[code]
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answered)
}

func (l *load) finish() {
	l.stop.Store(true)
	l.wg.Wait()
}

func (l *load) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	streams := 0
	for _, s := range l.answered {
		if s {
			streams++
		}
	}
	return fmt.Sprintf("answered %d (%d streaming, %d not), [DONE] without a clean end %d, errors %d, non-200 %v",
		len(l.answered), streams, len(l.answered)-streams, len(l.doneNoEnd), l.errs, l.non200)
}

// checkExactlyOnce checks that every answered request has exactly one
// record among recs (the stores' primary key allows no second one; this
// also checks the records are there) and that the rollups count each
// record once. It returns the number of records of requests that were
// not answered (in flight when it went wrong: recorded, not lost).
func checkExactlyOnce(t *testing.T, l *load, recs []llmflow.Record, rolledUp int64) (extra int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.RequestID]++
	}
	missing := 0
	for id := range l.answered {
		switch seen[id] {
		case 1:
		case 0:
			missing++
			if missing <= 5 {
				t.Errorf("answered request %s has no record", id)
			}
		default:
			t.Errorf("answered request %s has %d records", id, seen[id])
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d answered requests have no record", missing, len(l.answered))
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("request %s stored %d times", id, n)
		}
		if _, ok := l.answered[id]; !ok {
			extra++
		}
	}
	if rolledUp != int64(len(recs)) {
		t.Errorf("rollups count %d requests, records %d: a record was rolled up twice or not at all", rolledUp, len(recs))
	}
	return extra
}

// waitHealth polls /healthz (details) until cond holds.
func waitHealth(t *testing.T, p *proc, what string, cond func(code int, h map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, h := healthDetails(p.base)
		if cond(code, h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: last /healthz %d %v\n%s", what, code, h, tail(p.logs.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail is the last n bytes of a process's logs, after the first report
// of the race detector, if any (a -race build exits 66 with the report
// far above the last lines).
func tail(s string, n int) string {
	race := ""
	if i := strings.Index(s, "WARNING: DATA RACE"); i >= 0 && i < len(s)-n {
		race = s[i:min(len(s)-n, i+8000)] + "\n…\n"
	}
	if len(s) > n {
		return race + "…" + s[len(s)-n:]
	}
	return s
}

func spoolDrained(code int, h map[string]any) bool {
	return code == http.StatusOK && acctField(h, "store_writes") == "ok" && acctField(h, "spool_records") == float64(0) &&
		acctField(h, "in_memory") == float64(0)
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

var _ = context.Background

// replicasConfig writes the configuration of replicas sharing a store
// (SQLite, in dir) and a Redis: procConfig's, with the given redis block
// body (`address = "…"` and any other setting), pool block and any extra
// blocks.
func replicasConfig(t testing.TB, dir, simURL, redisBody, pool string, extra ...string) string {
	t.Helper()
	cfg := procConfig(t, dir, simURL, "store {\n  path = \"llmflow.db\"\n}\nredis {\n"+redisBody+"}\n"+strings.Join(extra, ""))
	src, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(src), `pool "sim" { capacity = 64 }`, pool, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// redisAt is a redis block body naming addr.
func redisAt(addr string) string { return fmt.Sprintf("  address = %q\n", addr) }

// startReplicas starts n serve processes of cfg, each with a spool of its
// own in dir.
func startReplicas(t testing.TB, cfg, dir string, n int) []*proc {
	t.Helper()
	var reps []*proc
	for i := range n {
		reps = append(reps, startServe(t, cfg, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, fmt.Sprintf("spool-%d", i))))
	}
	return reps
}
