package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/vllmsim"
)

// TestRuntimeRoutingWithRedis: two replicas sharing a store and Redis, as
// an admin would run them. An upstream added to a model through one
// replica (PUT /admin/models/{model}/upstreams/{name}) and an alias set
// there are served by both: the admin write is answered (it was a 503
// while a store decorator hid the routing store), the other replica
// applies it at once (the bus's admin announcement), and a replica
// started afterwards loads them from the store.
func TestRuntimeRoutingWithRedis(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, time.Millisecond)
	sim2 := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: time.Millisecond})
	srv2 := httptest.NewServer(sim2)
	t.Cleanup(func() { srv2.Close(); sim2.Close() })
	dir := t.TempDir()
	cfg := replicasConfig(t, dir, sim, redisAt(rds.addr), `pool "sim" { capacity = 64 }`)
	reps := startReplicas(t, cfg, dir, 2)
	key := createKey(t, reps[0].base)

	status, _ := procAdmin(t, http.MethodPut, reps[0].base+"/admin/models/sim-llama/upstreams/sim1", `{"base_url":"`+srv2.URL+`","inherit_key":true}`)
	if status/100 != 2 {
		t.Fatalf("PUT /admin/models/sim-llama/upstreams/sim1 on a replica with redis: %d", status)
	}
	if status, _ := procAdmin(t, http.MethodPut, reps[0].base+"/admin/aliases/llama/fast", `{"model":"sim-llama"}`); status/100 != 2 {
		t.Fatalf("PUT /admin/aliases/llama/fast: %d", status)
	}
	upstreams := func(base string) string {
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/upstreams", nil)
		req.Header.Set("Authorization", "Bearer "+procMasterKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	chat := func(base, model string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct{ Model string }
		json.NewDecoder(resp.Body).Decode(&got)
		return resp.StatusCode, got.Model
	}
	late := startServe(t, cfg, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, "spool-late"))
	for i, base := range []string{reps[0].base, reps[1].base, late.base} {
		waitFor(t, 10*time.Second, "the runtime upstream listed and healthy on replica "+string(rune('0'+i)), func() bool {
			u := upstreams(base)
			return strings.Contains(u, `"sim1"`) && strings.Contains(u, srv2.URL)
		})
		waitFor(t, 10*time.Second, "the alias served", func() bool {
			code, model := chat(base, "llama/fast")
			return code == 200 && model == "llama/fast"
		})
	}
	before := sim2.Stats().Served
	for _, base := range []string{reps[1].base, late.base} {
		waitFor(t, 10*time.Second, "traffic to the runtime upstream through another replica", func() bool {
			chat(base, "sim-llama")
			return sim2.Stats().Served > before
		})
	}
}
