package doctor

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/vllmsim"
)

const (
	masterKey = "0123456789abcdef0123456789abcdef0123456789abcdef"
	simKey    = "sim-secret"
)

// simEngine is a simulated vLLM on loopback serving sim/llama with the given
// scheduling policy, behind wrap (nil: as is).
func simEngine(t *testing.T, policy string, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	sim := vllmsim.New(vllmsim.Config{Models: []string{"sim/llama"}, APIKey: simKey, StepInterval: time.Millisecond,
		Sched: vllmsim.SchedConfig{Policy: policy, MaxNumSeqs: 8, KVBlocks: 1 << 12}})
	var h http.Handler = sim
	if wrap != nil {
		h = wrap(sim)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); sim.Close() })
	return srv.URL
}

// setup is one case's configuration: the blocks that vary, and files.
type setup struct {
	upstream      string // base_url
	upstreamModel string // default sim/llama
	scheduler     string // default priority
	engineKind    string // pool { engine }; default: the scheduler's
	keyFile       string // the model's key_file; default vllm.key
	extra         string // more blocks (store, redis, slurm, writeback); @DIR@ is the configuration's directory
	files         map[string]string
	modes         map[string]os.FileMode
	prepare       func(t *testing.T, dir string)
}

// load writes s's configuration and files into a fresh directory and loads
// it.
func (s setup) load(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"master.key": masterKey, "vllm.key": simKey, "other.key": "not-the-engine-key"}
	for k, v := range s.files {
		files[k] = v
	}
	for name, data := range files {
		mode := os.FileMode(0o600)
		if m, ok := s.modes[name]; ok {
			mode = m
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	src := fmt.Sprintf(`master_key_file = "master.key"
org "etabA" {
  share = 1
  team "lab-nlp" {}
}
pool "p" {
  capacity  = 4
  gpus      = 1
  scheduler = %q
  %s
}
model "m" {
  upstream_model = %q
  pool           = "p"
  key_file       = %q
  upstream "u0" { base_url = %q }
}
%s
`, or(s.scheduler, "priority"), engineLine(s.engineKind), or(s.upstreamModel, "sim/llama"), or(s.keyFile, "vllm.key"), s.upstream, strings.ReplaceAll(s.extra, "@DIR@", dir))
	if err := os.WriteFile(filepath.Join(dir, "gateway.hcl"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.prepare != nil {
		s.prepare(t, dir)
	}
	cfg, err := config.Load(filepath.Join(dir, "gateway.hcl"))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// engineLine is the pool's engine attribute, none for "".
func engineLine(kind string) string {
	if kind == "" {
		return ""
	}
	return fmt.Sprintf("engine = %q", kind)
}

// fakeSacctmgr writes an executable script printing nothing (a cluster
// sacctmgr does not know has no associations).
func fakeSacctmgr(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "sacctmgr"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// realSlurm reports whether the real sacctmgr answers (scripts/slurm/setup.sh);
// the case needing it is skipped only with LLMFLOW_SKIP_SLURM=1.
func realSlurm(t *testing.T) {
	t.Helper()
	if os.Getenv("LLMFLOW_SKIP_SLURM") == "1" {
		t.Skip("LLMFLOW_SKIP_SLURM=1: skipping the real-Slurm case as asked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "sacctmgr", "-n", "-P", "show", "cluster").CombinedOutput(); err != nil {
		t.Fatalf("Slurm is not reachable (%v: %s): run scripts/slurm/setup.sh, or set LLMFLOW_SKIP_SLURM=1 to skip", err, bytes.TrimSpace(out))
	}
}

func realRedis(t *testing.T) string {
	t.Helper()
	if os.Getenv("LLMFLOW_SKIP_REDIS") == "1" {
		t.Skip("LLMFLOW_SKIP_REDIS=1")
	}
	return "127.0.0.1:6379" // scripts/test.sh's, without a password
}

// TestDoctor: a healthy configuration has no failure; each fault is
// reported by its check, with a fix, and fails the run.
func TestDoctor(t *testing.T) {
	good := simEngine(t, vllmsim.PolicyPriority, nil)
	fcfs := simEngine(t, vllmsim.PolicyFCFS, nil)
	noMetrics := simEngine(t, vllmsim.PolicyPriority, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	lateClock := simEngine(t, vllmsim.PolicyPriority, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Date", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
			h.ServeHTTP(w, r)
		})
	})
	for _, tc := range []struct {
		name       string
		setup      setup
		need       func(t *testing.T) string // a real service; its address
		check, msg string                    // the failing check's prefix and message; "" = no failure
	}{
		{name: "Healthy", setup: setup{upstream: good}},
		{name: "GatewayQueueOnFCFSvLLM", setup: setup{upstream: fcfs, scheduler: "gateway", engineKind: "vllm"}},
		{name: "LlamaServerMetricsAbsent", setup: setup{upstream: fcfs, scheduler: "gateway"}, check: `upstream "u0"`, msg: "no llamacpp:requests_processing series"},
		{name: "SecretOpenToOthers", setup: setup{upstream: good, modes: map[string]os.FileMode{"vllm.key": 0o644}},
			check: "secrets", msg: "mode 0644"},
		{name: "SecretMissing", setup: setup{upstream: good, keyFile: "absent.key"}, check: "secrets", msg: "no such file"},
		{name: "StoreDirectoryMissing", setup: setup{upstream: good, extra: `store { path = "nodir/llmflow.db" }`},
			check: "store", msg: "nodir"},
		{name: "StoreSchemaTooNew", setup: setup{upstream: good, extra: `store { path = "llmflow.db" }`, prepare: func(t *testing.T, dir string) {
			path := filepath.Join(dir, "llmflow.db")
			s, err := store.OpenSQLite(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)`); err != nil {
				t.Fatal(err)
			}
		}}, check: "store", msg: "schema version 9999"},
		{name: "PostgresUnreachable", setup: setup{upstream: good,
			extra: "store {\n  kind = \"postgres\"\n  dsn_file = \"pg.dsn\"\n}", files: map[string]string{"pg.dsn": "postgres://llmflow:pw@127.0.0.1:1/llmflow?connect_timeout=2"}},
			check: "store", msg: "PostgreSQL"},
		{name: "RedisUnreachable", setup: setup{upstream: good, extra: `redis { address = "127.0.0.1:1" }`}, check: "redis", msg: "127.0.0.1:1"},
		{name: "RedisPasswordNotNeeded", need: realRedis, setup: setup{upstream: good,
			extra: "redis {\n  address = \"%s\"\n  password_file = \"redis.pass\"\n}", files: map[string]string{"redis.pass": "0123456789abcdef"}},
			check: "redis", msg: "protects nothing"},
		{name: "UpstreamUnreachable", setup: setup{upstream: "http://127.0.0.1:1"}, check: `upstream "u0"`, msg: "connect"},
		{name: "UpstreamWrongKey", setup: setup{upstream: good, keyFile: "other.key"}, check: `upstream "u0"`, msg: "refuses the key"},
		{name: "ModelNotServed", setup: setup{upstream: good, upstreamModel: "sim/other"}, check: `upstream "u0"`, msg: `not "sim/other"`},
		{name: "PriorityOff", setup: setup{upstream: fcfs}, check: `upstream "u0"`, msg: "refuses priorities"},
		{name: "MetricsUnreadable", setup: setup{upstream: noMetrics}, check: `upstream "u0"`, msg: "metrics not readable"},
		{name: "ClockOff", setup: setup{upstream: lateClock}, check: "clock", msg: "1h0m"},
		{name: "SacctmgrMissing", setup: setup{upstream: good,
			extra: "slurm {\n  source = \"sacctmgr\"\n  cluster = \"hpc\"\n  sacctmgr_path = \"/nonexistent/sacctmgr\"\n}"},
			check: "slurm", msg: "/nonexistent/sacctmgr"},
		{name: "ClusterWithoutAccounts", setup: setup{upstream: good, prepare: fakeSacctmgr,
			extra: "slurm {\n  source = \"sacctmgr\"\n  cluster = \"nosuch\"\n  sacctmgr_path = \"@DIR@/sacctmgr\"\n}"},
			check: "slurm", msg: "nosuch"},
		{name: "SlurmdbdUnreachable", setup: setup{upstream: good,
			extra: "slurm {\n  source = \"slurmdbd\"\n  cluster = \"hpc\"\n  dsn_file = \"slurm.dsn\"\n}", files: map[string]string{"slurm.dsn": "llmflow:pw@tcp(127.0.0.1:1)/slurm_acct_db?timeout=2s"}},
			check: "slurm", msg: "slurmdbd"},
		{name: "RealSlurmCluster", need: realSlurmCluster, setup: setup{upstream: good,
			extra: "slurm {\n  source = \"sacctmgr\"\n  cluster = %q\n}"}},
		{name: "WritebackUnreachable", setup: setup{upstream: good,
			extra: "writeback {\n  dsn_file = \"wb.dsn\"\n}", files: map[string]string{"wb.dsn": "llmflow:pw@tcp(127.0.0.1:1)/slurm_acct_db?timeout=2s"}},
			check: "writeback", msg: "slurmdbd's database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.setup
			if tc.need != nil {
				if addr := tc.need(t); addr != "" {
					s.extra = fmt.Sprintf(s.extra, addr)
				}
			}
			cfg := s.load(t)
			fs := Run(t.Context(), cfg, Options{Timeout: 5 * time.Second})
			var report strings.Builder
			for _, f := range fs {
				fmt.Fprintf(&report, "%s %s: %s (fix: %s)\n", f.Status, f.Check, f.Message, f.Fix)
				if strings.Contains(f.Message, masterKey) || strings.Contains(f.Message, ":pw@") {
					t.Errorf("a finding shows a secret: %s", f.Message)
				}
			}
			if tc.check == "" {
				if Failed(fs) {
					t.Errorf("failures on a healthy setup:\n%s", report.String())
				}
				return
			}
			if !Failed(fs) {
				t.Errorf("no failure, want %s: …%s…:\n%s", tc.check, tc.msg, report.String())
			}
			found := false
			for _, f := range fs {
				if f.Status == Fail && strings.HasPrefix(f.Check, tc.check) && strings.Contains(f.Message, tc.msg) && f.Fix != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("want a failure of %s with %q and a fix:\n%s", tc.check, tc.msg, report.String())
			}
		})
	}
}

// realSlurmCluster registers a cluster of the test's own in the real
// slurmdbd with one account (deleted at the end) and returns its name.
func realSlurmCluster(t *testing.T) string {
	t.Helper()
	realSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	cluster := "llmd_" + hex.EncodeToString(b)
	sam := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "sacctmgr", append([]string{"-i"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("sacctmgr -i %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sam("add", "cluster", cluster)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	sam("add", "account", "d"+hex.EncodeToString(b), "cluster="+cluster, "fairshare=1")
	return cluster
}
