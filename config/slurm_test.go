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
