// Package deptest keeps pure packages pure: a test calls Check to fail
// when the package depends, directly or not, on a forbidden package.
package deptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Impure are the packages a leaf (fairshare, budgets, sse, sacctmgr,
// config, reports) must not depend on: the network, databases, processes.
var Impure = []string{"net", "net/http", "database/sql", "os/exec", "syscall/js"}

// goTool is the go command: from PATH, else from $GOROOT/bin.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// Check runs `go list -deps` on the package in the test's directory and
// fails for each forbidden package it depends on. pkg is the package's
// import path, checked to be in the list so that a failing go list cannot
// pass silently.
func Check(t *testing.T, pkg string, forbidden []string) {
	t.Helper()
	out, err := exec.Command(goTool(), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps[pkg] {
		t.Fatalf("go list -deps did not list %s and its imports:\n%s", pkg, out)
	}
	for _, p := range forbidden {
		if deps[p] {
			t.Errorf("package %s depends on %s", pkg, p)
		}
	}
}

// CheckStdlib fails when the package in the test's directory depends on
// anything but the standard library and pkg itself (the root package's
// rule: the domain vocabulary imports nothing).
func CheckStdlib(t *testing.T, pkg string) {
	t.Helper()
	out, err := exec.Command(goTool(), "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != pkg {
		t.Fatalf("go list -deps did not list %s last:\n%s", pkg, out)
	}
	for _, p := range deps[:len(deps)-1] {
		t.Errorf("package %s depends on %s, which is not in the standard library", pkg, p)
	}
}

// CheckStdlibAnd fails when the package in the test's directory depends on
// anything but the standard library, pkg itself and the module packages
// allowed (adminapi's rule: the standard library and the root package).
// Each allowed package must be a dependency, so that a rename cannot pass
// silently.
func CheckStdlibAnd(t *testing.T, pkg string, allowed ...string) {
	t.Helper()
	out, err := exec.Command(goTool(), "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != pkg {
		t.Fatalf("go list -deps did not list %s last:\n%s", pkg, out)
	}
	ok := map[string]bool{}
	for _, p := range allowed {
		ok[p] = true
	}
	seen := map[string]bool{}
	for _, p := range deps[:len(deps)-1] {
		seen[p] = true
		if !ok[p] {
			t.Errorf("package %s depends on %s, which is neither in the standard library nor allowed", pkg, p)
		}
	}
	for _, p := range allowed {
		if !seen[p] {
			t.Errorf("package %s does not depend on %s: the allowed list is stale", pkg, p)
		}
	}
}
