package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// redisProc is a redis-server of the test's own (the machine's shared
// Redis is never stopped), without persistence.
type redisProc struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis(t *testing.T, addr string) *redisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed: replicas over Redis not tested")
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisProc{addr: addr, cmd: cmd}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for range 300 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("redis-server on %s did not start", addr)
	return nil
}

func (r *redisProc) kill() { r.cmd.Process.Kill(); r.cmd.Wait() }

// stream is a streamed completion held open.
type heldStream struct {
	body io.ReadCloser
}

func holdStream(t *testing.T, c *http.Client, base, key string) heldStream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"long"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return heldStream{body: resp.Body}
}

// TestThreeReplicasShareReservation: three real replicas on one Redis
// (a redis-server of the test's own), a round-robin client. Pool capacity
// 8, etabA's share 0.75: its reservation is 6. Of 12 streams of etabA
// held open across the three replicas exactly 6 get a within-share
// priority (0) and 6 borrow — one gateway would grant the same; three
// gateways with their own counters would grant 12. Redis killed: the
// replicas go on serving (uncounted, borrowing priority). Redis back,
// empty: once the old streams end the counts are right again (no leak,
// never negative).
func TestThreeReplicasShareReservation(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: 20 * time.Millisecond,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 256, KVBlocks: 1 << 16}})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(func() { simSrv.Close(); sim.Close() })
	dir := t.TempDir()
	cfg := procConfig(t, dir, simSrv.URL, fmt.Sprintf("store {\n  path = \"llmflow.db\"\n}\nredis {\n  address = %q\n}\n", rds.addr))
	src, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(src), "capacity = 64", "capacity = 8", 1)), 0o600)
	var reps []*proc
	for i := range 3 {
		reps = append(reps, startServe(t, cfg, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, fmt.Sprintf("spool-%d", i))))
	}
	key := createKey(t, reps[0].base)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	open := func(n int) []heldStream {
		var out []heldStream
		for i := range n {
			out = append(out, holdStream(t, c, reps[i%3].base, key))
		}
		return out
	}
	closeAll := func(ss []heldStream) {
		for _, s := range ss {
			s.body.Close()
		}
	}
	// count classifies the priorities the engine got for the requests it
	// received after the first seen ones (the gateway sends no request
	// id upstream: headers are built from scratch).
	seen := 0
	count := func(n int) (within, borrowing int) {
		var got []vllmsim.Received
		for range 500 { // the engine may see the last ones a moment later
			got = sim.Received()
			if len(got) >= seen+n {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(got) < seen+n {
			t.Fatalf("the engine received %d of %d requests", len(got)-seen, n)
		}
		for _, r := range got[seen : seen+n] {
			switch {
			case r.Priority <= 1:
				within++
			case r.Priority >= 10:
				borrowing++
			}
		}
		seen += n
		return within, borrowing
	}

	first := open(12)
	if w, b := count(12); w != 6 || b != 6 {
		t.Fatalf("12 streams of etabA over 3 replicas: %d within share, %d borrowing; want 6 and 6 (its reservation is 6)", w, b)
	}
	rds.kill()
	during := open(3)
	if w, b := count(3); w != 0 || b != 3 {
		t.Errorf("with Redis down: %d within, %d borrowing; want every request served, borrowing", w, b)
	}
	if m := scrape(t, reps[0].base); !strings.Contains(m, "llmflow_redis_failures_total ") || strings.Contains(m, "llmflow_redis_failures_total 0\n") {
		t.Errorf("llmflow_redis_failures_total does not count the failures: %s", grepLines(m, "llmflow_redis_failures_total"))
	}
	startRedis(t, rds.addr) // empty: no persistence
	closeAll(first)
	closeAll(during)
	time.Sleep(500 * time.Millisecond) // the releases reach the new Redis
	again := open(12)
	if w, b := count(12); w != 6 || b != 6 {
		t.Fatalf("after Redis came back: %d within, %d borrowing; want 6 and 6", w, b)
	}
	closeAll(again)
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Go(func() { r.signal(syscall.SIGTERM) })
	}
	wg.Wait()
	for i, r := range reps {
		if code := r.exitCode(); code != 0 {
			t.Errorf("replica %d exit %d:\n%s", i, code, tail(r.logs.String(), 2000))
		}
	}
}

// TestRevocationReachesAllReplicas: a key used on three replicas (so each
// caches it) and revoked through one is refused by all three within a
// second; without the announcement through Redis the other two would
// accept it until their cache entry expires (a minute).
func TestRevocationReachesAllReplicas(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	cfg := procConfig(t, dir, sim, fmt.Sprintf("store {\n  path = \"llmflow.db\"\n}\nredis {\n  address = %q\n}\n", rds.addr))
	var reps []*proc
	for i := range 3 {
		reps = append(reps, startServe(t, cfg, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, fmt.Sprintf("spool-%d", i))))
	}
	req, _ := http.NewRequest(http.MethodPost, reps[0].base+"/admin/keys", strings.NewReader(`{"team":"lab-nlp","name":"x"}`))
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ ID, Key string }
	json.NewDecoder(resp.Body).Decode(&k)
	resp.Body.Close()
	status := func(base string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+k.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, r := range reps {
		if s := status(r.base); s != 200 {
			t.Fatalf("replica %d: key refused before revocation: %d", i, s)
		}
	}
	del, _ := http.NewRequest(http.MethodDelete, reps[0].base+"/admin/keys/"+k.ID, nil)
	del.Header.Set("Authorization", "Bearer "+procMasterKey)
	resp, err = http.DefaultClient.Do(del)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
	revoked := time.Now()
	for i, r := range reps {
		for status(r.base) != http.StatusUnauthorized {
			if time.Since(revoked) > time.Second {
				t.Fatalf("replica %d still accepts the key a second after its revocation on replica 0", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("refused by all three replicas %v after the revocation", time.Since(revoked).Round(time.Millisecond))
}
