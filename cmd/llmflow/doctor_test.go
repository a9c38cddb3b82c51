package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDoctorCommand: llmflow doctor prints one line per check and exits 0
// on a healthy setup; a fault is printed with its fix and exits 1; a
// configuration that does not load is said so. (Each fault is tested in
// package doctor.)
func TestDoctorCommand(t *testing.T) {
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	cfg := procConfig(t, dir, sim, "store {\n  path = \"llmflow.db\"\n}\n")
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Run(context.Background(), args, &out, &errb)
		return code, out.String() + errb.String()
	}
	code, out := run("doctor", "-c", cfg)
	for _, want := range []string{"ok    config: ", "ok    secrets: ", "ok    store: ", `ok    upstream "sim0" of model "sim-llama": `, "priority scheduling on", "ok    clock: ", "no problem found"} {
		if !strings.Contains(out, want) {
			t.Errorf("healthy: output lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Errorf("healthy: exit %d:\n%s", code, out)
	}

	if err := os.Chmod(filepath.Join(dir, "vllm.key"), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out = run("doctor", "-c", cfg)
	if code != 1 || !strings.Contains(out, "FAIL  secrets: ") || !strings.Contains(out, "mode 0640") || !strings.Contains(out, "      fix: chmod 600") ||
		!strings.Contains(out, "1 problem;") {
		t.Errorf("a key open to the group: exit %d:\n%s", code, out)
	}

	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(bad, []byte("pool \"p\" {}\n"), 0o600)
	code, out = run("doctor", "-c", bad)
	if code != 1 || !strings.Contains(out, "FAIL  config: "+bad+":") || !strings.Contains(out, "llmflow check-config") {
		t.Errorf("a configuration that does not load: exit %d:\n%s", code, out)
	}
}
