package sse_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps sse pure: no network, database or process.
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/sse", deptest.Impure)
}
