package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeyRPMAcrossReplicas: two replicas sharing one Redis, a key with a
// limit of 4 requests per minute, requests alternating between them: 4
// are answered in all, not 4 by each, and the refusals are 429 with a
// Retry-After.
func TestKeyRPMAcrossReplicas(t *testing.T) {
	rds := startRedis(t, freeAddr(t))
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	cfg := procConfig(t, dir, sim, fmt.Sprintf("store {\n  path = \"llmflow.db\"\n}\nredis {\n  address = %q\n}\n", rds.addr))
	var reps []*proc
	for i := range 2 {
		reps = append(reps, startServe(t, cfg, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, fmt.Sprintf("spool-%d", i))))
	}
	req, _ := http.NewRequest(http.MethodPost, reps[0].base+"/admin/keys", strings.NewReader(`{"team":"lab-nlp","name":"rpm","rpm":4}`))
	req.Header.Set("Authorization", "Bearer "+procMasterKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Key string }
	json.NewDecoder(resp.Body).Decode(&k)
	resp.Body.Close()
	if k.Key == "" {
		t.Fatalf("create key: %d", resp.StatusCode)
	}
	var ok, limited int
	for i := range 8 {
		req, _ := http.NewRequest(http.MethodPost, reps[i%2].base+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-llama","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+k.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		default:
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if ok != 4 || limited != 4 {
		t.Fatalf("answered %d, refused %d over two replicas; want 4 and 4 (4 per minute for the key, shared)", ok, limited)
	}
	for i, r := range reps {
		if h := healthz(t, r.base); h.Shared == nil || h.Shared.Status != "ok" {
			t.Fatalf("replica %d health: %+v", i, h.Shared)
		}
	}
}
