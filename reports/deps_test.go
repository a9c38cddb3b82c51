package reports_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// forbidden are the packages that would make reports impure: it computes
// from Data and writes to an io.Writer; loading data belongs to its callers.
var forbidden = []string{"os/exec", "net", "net/http", "database/sql", "syscall/js"}

func TestDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["github.com/go-llmflow/llmflow/reports"] || !deps["strings"] {
		t.Fatalf("go list -deps did not list the package and its imports:\n%s", out)
	}
	for _, p := range forbidden {
		if deps[p] {
			t.Errorf("package reports depends on %s", p)
		}
	}
}
