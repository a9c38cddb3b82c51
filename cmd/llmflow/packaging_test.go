package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits checks packaging/*.service with `systemd-analyze
// verify`, the binary path pointed at an executable that exists here.
func TestSystemdUnits(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: units not verified")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for unit, instance := range map[string]string{"llmflow.service": "llmflow.service", "llmflow@.service": "llmflow@1.service"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "packaging", unit))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), "ExecReload=") {
			t.Errorf("%s: no ExecReload (SIGHUP reloads the configuration)", unit)
		}
		text := strings.ReplaceAll(string(src), "/usr/local/bin/llmflow", exe)
		if err := os.WriteFile(filepath.Join(dir, unit), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sa, "verify", filepath.Join(dir, instance)).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
	}
}
