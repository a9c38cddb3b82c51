package sse_test

import (
	"go/build"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// forbidden are imports that would make sse more than a codec: the network,
// a database, processes. Flushing is the caller's job.
var forbidden = []string{"net", "net/http", "database/sql", "os/exec"}

// TestDeps fails if package sse imports, directly or not, a forbidden
// package (the pattern of tailscale's deptest).
func TestDeps(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	deps := map[string]bool{}
	for _, imp := range pkg.Imports {
		deps[imp] = true
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	all := strings.Fields(string(out))
	if len(all) < len(pkg.Imports) {
		t.Fatalf("go list -deps listed %d packages, fewer than the %d direct imports", len(all), len(pkg.Imports))
	}
	for _, p := range all {
		deps[p] = true
	}
	for _, p := range forbidden {
		if deps[p] {
			t.Errorf("package sse depends on %s", p)
		}
	}
}
