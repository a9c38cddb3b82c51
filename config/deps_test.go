package config_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps fails when the package picks up an import it must not have:
// config decodes a file, it does no networking, runs no process and opens
// no database.
func TestDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := map[string]bool{
		"net":          true,
		"net/http":     true,
		"database/sql": true,
		"os/exec":      true,
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned %d packages, too few to be right", len(deps))
	}
	for _, dep := range deps {
		if forbidden[dep] {
			t.Errorf("config depends on %s", dep)
		}
	}
}
