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
	write("master.key", "s3cret-master-0123456789abcdef0123456789\n")
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
	for _, secret := range []string{"s3cret-master-0123456789abcdef0123456789", "salt-content", "vllm-content"} {
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

// TestCheckSecrets_ShortMasterAndLooseModes checks that a master key
// shorter than 32 bytes and a secret file readable by group or others are
// refused at the attribute, and that only the mode check has an override.
func TestCheckSecrets_ShortMasterAndLooseModes(t *testing.T) {
	t.Setenv(config.AllowInsecureSecretFilesEnv, "")
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	write("master.key", "short-master\n", 0o600)
	write("vllm.key", "vllm-content", 0o640)
	write("metrics.token", "metrics-content", 0o604)
	file := filepath.Join(dir, "gw.hcl")
	cfg := mustParse(t, file, `master_key_file = "master.key"
metrics_token_file = "metrics.token"
pool "p" { capacity = 1 }
model "m" {
  pool = "p"
  key_file = "vllm.key"
  upstream "a" { base_url = "http://a" }
}
`)
	want := []string{
		file + ":1:19: master_key_file: " + filepath.Join(dir, "master.key") + ": the master key is 12 bytes, at least 32 are needed (openssl rand -hex 32)",
		file + ":2:22: metrics_token_file: " + filepath.Join(dir, "metrics.token") + ": mode 0604 gives access to group or others; chmod 600 it (or set LLMFLOW_ALLOW_INSECURE_SECRET_FILES=1 to accept it)",
		file + `:6:14: model "m" key_file: ` + filepath.Join(dir, "vllm.key") + ": mode 0640 gives access to group or others; chmod 600 it (or set LLMFLOW_ALLOW_INSECURE_SECRET_FILES=1 to accept it)",
	}
	err := config.CheckSecrets(cfg)
	if err == nil {
		t.Fatal("CheckSecrets accepted a short master key and loose modes")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("CheckSecrets (-want +got):\n%s", diff)
	}
	if strings.Contains(err.Error(), "short-master") {
		t.Errorf("error leaks the master key: %v", err)
	}

	// The override accepts the modes, never the short master key.
	t.Setenv(config.AllowInsecureSecretFilesEnv, "1")
	err = config.CheckSecrets(cfg)
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "the master key is 12 bytes") {
		t.Errorf("with the override: %v, want the short master key alone", err)
	}
	write("master.key", strings.Repeat("k", 32), 0o600)
	if err := config.CheckSecrets(cfg); err != nil {
		t.Errorf("with the override and a 32-byte master key: %v", err)
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
