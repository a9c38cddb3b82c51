package autocap_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps autocap pure: no network, database or process.
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/autocap", deptest.Impure)
}
