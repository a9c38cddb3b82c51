package llmflow_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps the domain package free of I/O packages.
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow", deptest.Impure)
}
