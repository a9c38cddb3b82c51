package gateway_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps the data plane apart from the control plane: gateway
// imports no admin code (package admin drives it through its control
// surface, control.go), no process host and no Redis client.
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/gateway", []string{
		"github.com/go-llmflow/llmflow/admin",
		"github.com/go-llmflow/llmflow/adminapi",
		"github.com/go-llmflow/llmflow/server",
		"github.com/redis/go-redis/v9",
	})
}
