package config_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

func TestSlurmBlock(t *testing.T) {
	src := []byte(`
slurm {
  source   = "slurmdbd"
  cluster  = "hgx"
  dsn_file = "slurm.dsn"
}
`)
	cfg, err := config.Parse("/etc/llmflow/gateway.hcl", src)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Slurm
	if s == nil || s.Source != "slurmdbd" || s.Cluster != "hgx" || s.DSNFile != filepath.Join("/etc/llmflow", "slurm.dsn") ||
		s.Schedule != config.DefaultSlurmSchedule || s.Timeout != 2*time.Minute || s.SacctmgrPath != "sacctmgr" {
		t.Fatalf("slurm block decoded as %+v", s)
	}
	found := false
	for _, sec := range cfg.Secrets() {
		if sec.What == "slurm dsn_file" && sec.Range.Start.Line == 5 {
			found = true
		}
	}
	if !found {
		t.Errorf("slurm dsn_file is not among the secrets: %+v", cfg.Secrets())
	}
	cfg, err = config.Parse("g.hcl", []byte(`
slurm {
  source        = "sacctmgr"
  cluster       = "llm-1"
  sacctmgr_path = "/opt/slurm/bin/sacctmgr"
  schedule      = "@every 30m"
  timeout       = "10s"
}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Slurm; s.SacctmgrPath != "/opt/slurm/bin/sacctmgr" || s.Schedule != "@every 30m" || s.Timeout != 10*time.Second {
		t.Errorf("sacctmgr block decoded as %+v", s)
	}
	if cfg, _ := config.Parse("g.hcl", nil); cfg.Slurm != nil {
		t.Error("no slurm block gives a non-nil Slurm")
	}
}

func TestWritebackBlock(t *testing.T) {
	cfg, err := config.Parse("/etc/llmflow/gateway.hcl", []byte(`writeback { dsn_file = "rw.dsn" }`))
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Writeback
	if w == nil || w.DSNFile != "/etc/llmflow/rw.dsn" || w.Cluster != "llm" || w.ServiceUser != "llmflow" ||
		w.Schedule != "5 * * * *" || w.Lookback != 24*time.Hour || w.Timezone != "UTC" {
		t.Fatalf("writeback block decoded as %+v", w)
	}
	if _, err := config.Parse("g.hcl", []byte(`writeback {}`)); err == nil {
		t.Error("a writeback block without dsn_file was accepted")
	}
}

// The write-back's defaults are the root package's, and service_user is
// checked as a user name (Slurm user names may hold upper case and '.'),
// not as a cluster name.
func TestWritebackDefaultsAndServiceUser(t *testing.T) {
	cfg, err := config.Parse("g.hcl", []byte(`writeback { dsn_file = "rw.dsn" }`))
	if err != nil {
		t.Fatal(err)
	}
	// the documented values, not the constants the parser assigns
	if w := cfg.Writeback; w.Cluster != "llm" || w.ServiceUser != "llmflow" ||
		w.Schedule != "5 * * * *" || w.Lookback != 24*time.Hour || w.Timezone != "UTC" {
		t.Errorf("writeback defaults %+v", w)
	}
	for user, ok := range map[string]bool{"svc.llmflow": true, "LLMflow": true, "llm_flow-2": true, "x y": false, "-x": false, "master": false} {
		_, err := config.Parse("g.hcl", []byte(`writeback {
  dsn_file     = "rw.dsn"
  service_user = "`+user+`"
}`))
		if (err == nil) != ok {
			t.Errorf("service_user %q: err %v, want accepted %v", user, err, ok)
		}
	}
}

// A redis block's defaults are the named ones (redisstate uses the same
// timeout).
func TestRedisDefaults(t *testing.T) {
	cfg, err := config.Parse("g.hcl", []byte(`redis { address = "127.0.0.1:6379" }`))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Redis; r.Timeout != 250*time.Millisecond || r.KeyPrefix != "llmflow:" || r.Replicas != 1 {
		t.Errorf("redis defaults %+v", r)
	}
}
