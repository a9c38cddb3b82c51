package authz_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps authz pure: no network, database or process, and no
// other package of the module (the policy depends on nothing it decides
// about).
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/authz", append(deptest.Impure,
		"github.com/go-llmflow/llmflow", "github.com/go-llmflow/llmflow/config"))
}
