package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/config"
)

func TestWriteQuickstartKeepsExistingFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qs")
	path, err := writeQuickstart(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("embedded quickstart.hcl: %v", err)
	}
	if err := config.CheckSecrets(cfg); err != nil {
		t.Fatalf("quickstart secrets: %v", err)
	}
	if cfg.Store.Path != filepath.Join(dir, "llmflow.db") {
		t.Errorf("store path %q is not inside the quickstart directory", cfg.Store.Path)
	}
	master, _ := os.ReadFile(filepath.Join(dir, "master.key"))
	if fi, _ := os.Stat(filepath.Join(dir, "master.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("master.key mode %v, want 0600", fi.Mode().Perm())
	}
	if len(master) < 64 {
		t.Errorf("master key too short: %d bytes", len(master))
	}
	if _, err := writeQuickstart(dir); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "master.key"))
	if string(again) != string(master) {
		t.Error("a second quickstart replaced the existing master key")
	}
}

func TestServeRefusesMissingSecret(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "g.hcl")
	os.WriteFile(path, []byte(`master_key_file = "nope.key"
org "a" {
  share = 1
  team "t" {}
}
pool "p" { capacity = 1 }
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:1" }
}
store { path = "x.db" }
`), 0o600)
	var out, errb bytes.Buffer
	code := Run(t.Context(), []string{"serve", "-c", path, "--listen", "127.0.0.1:0"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), path+":1:") || !strings.Contains(errb.String(), "nope.key") {
		t.Fatalf("exit %d, stderr %q: want a failure naming %s:1", code, errb.String(), path)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Error("the store was created although the configuration is unusable")
	}
}

// quickstart stops with a clear error when the simulated engine's port is
// taken, instead of running a gateway in front of whatever holds it.
func TestQuickstartSimPortTaken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qs")
	path, err := writeQuickstart(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	addr := cfg.Models[0].Upstreams[0].BaseURL.Host
	if ln, err := net.Listen("tcp", addr); err == nil { // else something holds it already
		defer ln.Close()
	}
	var stdout, stderr bytes.Buffer
	code := Run(t.Context(), []string{"quickstart", "--dir", dir, "--listen", "127.0.0.1:0"}, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "simulated vLLM cannot listen on "+addr) {
		t.Errorf("exit %d, stderr %q; want a clear error about %s", code, stderr.String(), addr)
	}
}
