package redact_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps redact pure, so that any package may use it.
func TestDeps(t *testing.T) {
	deptest.CheckStdlib(t, "github.com/go-llmflow/llmflow/internal/redact")
	deptest.Check(t, "github.com/go-llmflow/llmflow/internal/redact", deptest.Impure)
}
