package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSlurmImportReachesAllReplicas: two replicas on one store and one
// Redis; only replica A imports from Slurm often (B's schedule is hourly).
// A team deleted in Slurm is refused by B within seconds of A's import
// (A announces the tree it stored; B serves it at once), not at B's next
// import.
func TestSlurmImportReachesAllReplicas(t *testing.T) {
	needSlurm(t)
	rds := startRedis(t, freeAddr(t))
	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	cluster, org, team := "llmt_rep"+suffix, "ro"+suffix, "rt"+suffix
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	sam(t, "add", "account", org, "cluster="+cluster, "fairshare=1")
	sam(t, "add", "account", team, "parent="+org, "cluster="+cluster, "fairshare=1")

	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	cfgA := syncConfig(t, dir, sim)
	src, err := os.ReadFile(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	block := func(schedule string) string {
		return fmt.Sprintf("slurm {\n  source   = \"sacctmgr\"\n  cluster  = %q\n  schedule = %q\n}\nredis {\n  address = %q\n}\n", cluster, schedule, rds.addr)
	}
	os.WriteFile(cfgA, append(src, block("@every 1s")...), 0o600)
	cfgB := filepath.Join(dir, "gateway-b.hcl")
	os.WriteFile(cfgB, append(src, block("@every 1h")...), 0o600)
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"sync", "-c", cfgA}, &out, &errb); code != 0 { // as an admin would first
		t.Fatalf("sync: %d %s%s", code, out.String(), errb.String())
	}
	a := startServe(t, cfgA, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, "spool-a"))
	bRep := startServe(t, cfgB, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, "spool-b"))

	req, _ := http.NewRequest(http.MethodPost, a.base+"/admin/keys", strings.NewReader(`{"team":"`+team+`","name":"k"}`))
	req.Header.Set("Authorization", "Bearer master-sync-0123456789abcdef0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Key string }
	decodeJSON(t, resp, &k)
	call := func(base string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x","max_tokens":1}`))
		req.Header.Set("Authorization", "Bearer "+k.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if ca, cb := call(a.base), call(bRep.base); ca != 200 || cb != 200 {
		t.Fatalf("key of %s before the deletion: %d on A, %d on B", team, ca, cb)
	}
	sam(t, "delete", "account", team, "cluster="+cluster)
	start := time.Now()
	waitUntil(t, 10*time.Second, func() bool { return call(a.base) == http.StatusForbidden })
	waitUntil(t, 3*time.Second, func() bool { return call(bRep.base) == http.StatusForbidden })
	t.Logf("refused by A and B %s after the deletion in Slurm", time.Since(start).Round(time.Millisecond))
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s: %d %s", resp.Request.URL.Path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %v", resp.Request.URL.Path, err)
	}
}

// TestCLISyncReachesRunningServe: `llmflow sync` run by an admin changes
// the stored tree; a running serve whose own import is hourly serves it
// at once with Redis (the CLI announces it as the replicas' imports do,
// and says so), and within seconds without (serve finds the new run in
// the store), not at its next scheduled import.
func TestCLISyncReachesRunningServe(t *testing.T) {
	needSlurm(t)
	for _, withRedis := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", withRedis), func(t *testing.T) {
			b := make([]byte, 4)
			rand.Read(b)
			suffix := hex.EncodeToString(b)
			cluster, org, team, late := "llmt_cli"+suffix, "co"+suffix, "ct"+suffix, "cl"+suffix
			sam(t, "add", "cluster", cluster)
			t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
			sam(t, "add", "account", org, "cluster="+cluster, "fairshare=1")
			sam(t, "add", "account", team, "parent="+org, "cluster="+cluster, "fairshare=1")

			dir := t.TempDir()
			cfg := syncConfig(t, dir, startSim(t, time.Millisecond))
			block := fmt.Sprintf("slurm {\n  source   = \"sacctmgr\"\n  cluster  = %q\n  schedule = \"@every 1h\"\n}\n", cluster)
			if withRedis {
				block += fmt.Sprintf("redis {\n  address = %q\n}\n", startRedis(t, freeAddr(t)).addr)
			}
			src, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(cfg, append(src, block...), 0o600)
			sync := func() string {
				t.Helper()
				var out, errb bytes.Buffer
				if code := Run(context.Background(), []string{"sync", "-c", cfg}, &out, &errb); code != 0 {
					t.Fatalf("sync: %d %s%s", code, out.String(), errb.String())
				}
				return out.String()
			}
			sync()
			srv := startServe(t, cfg, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, "spool"))
			addKey := func(team string) int {
				req, _ := http.NewRequest(http.MethodPost, srv.base+"/admin/keys", strings.NewReader(`{"team":"`+team+`","name":"k"}`))
				req.Header.Set("Authorization", "Bearer master-sync-0123456789abcdef0123456789")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if code := addKey(team); code != http.StatusCreated {
				t.Fatalf("key of %s: %d", team, code)
			}
			// its own first import done: the serve has recorded a run too
			if code := addKey(late); code != http.StatusNotFound {
				t.Fatalf("key of %s before it exists: %d", late, code)
			}

			sam(t, "add", "account", late, "parent="+org, "cluster="+cluster, "fairshare=1")
			out := sync()
			start := time.Now()
			if want := "serve it within 5s"; !withRedis && !strings.Contains(out, want) {
				t.Errorf("sync output does not say %q:\n%s", want, out)
			}
			if want := "to 1 running gateway(s)"; withRedis && !strings.Contains(out, want) {
				t.Errorf("sync output does not say %q:\n%s", want, out)
			}
			waitUntil(t, 20*time.Second, func() bool { return addKey(late) == http.StatusCreated })
			t.Logf("the running serve took %s after sync to serve %s", time.Since(start).Round(time.Millisecond), late)
		})
	}
}
