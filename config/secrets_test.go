package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/config"
)

const secretsConfig = `master_key_file = "master.key"
metrics_token_file = "metrics.token"
cache_salt_key_file = "salt.key"
pool "p" { capacity = 1 }
model "m" {
  pool = "p"
  key_file = "vllm.key"
  upstream "a" { base_url = "http://a" }
  upstream "b" {
    base_url = "http://b"
    key_file = "b.key"
  }
}
store {
  kind     = "postgres"
  dsn_file = "dsn"
}
writeback {
  dsn_file = "wb.dsn"
}
`

func TestConfig_Secrets(t *testing.T) {
	cfg := mustParse(t, "/etc/llmflow/gw.hcl", secretsConfig)
	type secret struct {
		What, Path string
		Line, Col  int
	}
	var got []secret
	for _, s := range cfg.Secrets() {
		got = append(got, secret{s.What, s.Path, s.Range.Start.Line, s.Range.Start.Column})
	}
	want := []secret{
		{"master_key_file", "/etc/llmflow/master.key", 1, 19},
		{"metrics_token_file", "/etc/llmflow/metrics.token", 2, 22},
		{"cache_salt_key_file", "/etc/llmflow/salt.key", 3, 23},
		{`model "m" key_file`, "/etc/llmflow/vllm.key", 7, 14},
		{`model "m" upstream "b" key_file`, "/etc/llmflow/b.key", 11, 16},
		{"store dsn_file", "/etc/llmflow/dsn", 16, 14},
		{"writeback dsn_file", "/etc/llmflow/wb.dsn", 19, 14},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Secrets (-want +got):\n%s", diff)
	}
}

func TestCheckSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("master.key", "s3cret-master\n")
	write("metrics.token", " \n\t\n") // empty once trimmed
	write("salt.key", "salt-content")
	write("vllm.key", "vllm-content")
	// b.key, dsn missing
	write("wb.dsn", "")
	if err := os.Mkdir(filepath.Join(dir, "dsn"), 0o700); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(dir, "gw.hcl")
	cfg := mustParse(t, file, secretsConfig)
	err := config.CheckSecrets(cfg)
	var ds config.Diagnostics
	if !errors.As(err, &ds) {
		t.Fatalf("CheckSecrets = %v, want Diagnostics", err)
	}
	want := []string{
		file + ":2:22: metrics_token_file: " + filepath.Join(dir, "metrics.token") + ": secret file is empty",
		file + `:11:16: model "m" upstream "b" key_file: open ` + filepath.Join(dir, "b.key") + ": no such file or directory",
		file + ":16:14: store dsn_file: read " + filepath.Join(dir, "dsn") + ": is a directory",
		file + ":19:14: writeback dsn_file: " + filepath.Join(dir, "wb.dsn") + ": secret file is empty",
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("CheckSecrets (-want +got):\n%s", diff)
	}
	for _, secret := range []string{"s3cret-master", "salt-content", "vllm-content"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error leaks secret content %q", secret)
		}
	}

	// All present: a literal nil.
	write("metrics.token", "m")
	write("b.key", "b")
	write("wb.dsn", "mysql://u:p@tcp(h)/db")
	if err := os.Remove(filepath.Join(dir, "dsn")); err != nil {
		t.Fatal(err)
	}
	write("dsn", "postgres://u:p@h/db")
	if err := config.CheckSecrets(cfg); err != nil {
		t.Errorf("CheckSecrets = %#v, want nil", err)
	}
}

func TestCheckSecrets_None(t *testing.T) {
	if err := config.CheckSecrets(mustParse(t, "c.hcl", "")); err != nil {
		t.Errorf("CheckSecrets = %#v, want nil", err)
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	path := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("OK", func(t *testing.T) {
		got, err := config.ReadSecret(path("ok", "  llmf-abc\r\n"))
		if err != nil || got != "llmf-abc" {
			t.Errorf("ReadSecret = %q, %v; want %q, nil", got, err, "llmf-abc")
		}
	})
	t.Run("ErrEmpty", func(t *testing.T) {
		_, err := config.ReadSecret(path("empty", "\n\n"))
		if !errors.Is(err, config.ErrEmptySecret) {
			t.Errorf("err = %v, want ErrEmptySecret", err)
		}
	})
	t.Run("ErrNotExist", func(t *testing.T) {
		_, err := config.ReadSecret(filepath.Join(dir, "missing"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v, want ErrNotExist", err)
		}
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		big := strings.Repeat("k", 64<<10+1)
		_, err := config.ReadSecret(path("big", big))
		if err == nil || strings.Contains(err.Error(), "kkkk") {
			t.Errorf("err = %v, want an error without the content", err)
		}
	})
}
