package adminapi_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps the contract importable by any program: the standard
// library and the root package only.
func TestDeps(t *testing.T) {
	deptest.CheckStdlibAnd(t, "github.com/go-llmflow/llmflow/adminapi", "github.com/go-llmflow/llmflow")
}
