package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionString(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name, ldflags string
		bi            *debug.BuildInfo
		want          string
	}{
		{"NoBuildInfo", "", nil, "dev"},
		{"Ldflags", "v0.4.0", nil, "v0.4.0"},
		{"Devel", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"GoInstall", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, "v0.3.1"},
		{"Checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("abcdef1234567890", "false")}, "dev (rev abcdef1)"},
		{"Dirty", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("abcdef1234567890", "true")}, "dev (rev abcdef1, dirty)"},
		{"LdflagsOverModule", "v0.3.1-2-gabcdef1", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: vcs("abcdef1234567890", "true")}, "v0.3.1-2-gabcdef1 (rev abcdef1, dirty)"},
		{"ShortRevision", "", &debug.BuildInfo{Settings: vcs("abc", "false")}, "dev (rev abc)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionString(tc.ldflags, tc.bi); got != tc.want {
				t.Errorf("versionString(%q, …) = %q, want %q", tc.ldflags, got, tc.want)
			}
		})
	}
}

func TestVersionCommandPrintsBuildVersion(t *testing.T) {
	old := version
	version = "v9.9.9-test"
	t.Cleanup(func() { version = old })
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("version: exit %d: %s", code, errb.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "llmflow v9.9.9-test") || !strings.HasSuffix(got, "\n") {
		t.Errorf("version printed %q, want llmflow v9.9.9-test…", got)
	}
	// --version prints the same line.
	want := out.String()
	out.Reset()
	if code := Run(context.Background(), []string{"--version"}, &out, &errb); code != 0 || out.String() != want {
		t.Errorf("--version: exit %d, printed %q, want %q (stderr %q)", code, out.String(), want, errb.String())
	}
}

// TestServeHelp: serve --help says what serve does, its signals, its
// environment and where the configuration is described.
func TestServeHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"serve", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("serve --help: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"SIGTERM", "SIGHUP", "LLMFLOW_CONFIG", "LLMFLOW_LISTEN", "LLMFLOW_LOG_LEVEL", "LLMFLOW_SPOOL_DIR", "check-config", "/metrics", "examples/gateway.hcl"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve --help does not mention %s:\n%s", want, out.String())
		}
	}
}

// TestCheckConfigSyntaxOnly: without the secret files, check-config names
// each missing one as file:line:col, then suggests --syntax-only, which
// accepts the same file without opening them.
func TestCheckConfigSyntaxOnly(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.hcl")
	src, err := os.ReadFile("../../examples/gateway.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// Secret paths under a directory that does not exist, whatever the machine.
	src = bytes.ReplaceAll(src, []byte("/etc/llmflow/"), []byte(filepath.Join(dir, "absent")+"/"))
	if err := os.WriteFile(cfg, src, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, _, errs := run("check-config", "-c", cfg)
	if code != 1 || !strings.Contains(errs, cfg+":3:") || !strings.Contains(errs, "no such file") || !strings.Contains(errs, "--syntax-only") {
		t.Errorf("check-config without secrets: exit %d, stderr %q: want exit 1, %s:3:col, the missing file and a hint at --syntax-only", code, errs, cfg)
	}
	code, out, errs := run("check-config", "--syntax-only", "-c", cfg)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(out, "secret files not opened") || errs != "" {
		t.Errorf("check-config --syntax-only: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// --syntax-only still reports every other problem.
	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(bad, []byte("master_key_file = \"x\"\npool \"p\" { capacity = 0 }\n"), 0o600)
	if code, _, errs := run("check-config", "--syntax-only", "-c", bad); code != 1 || !strings.Contains(errs, bad+":2:") {
		t.Errorf("check-config --syntax-only on a bad file: exit %d, stderr %q", code, errs)
	}
}
