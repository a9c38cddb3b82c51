package console_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/internal/deptest"
)

// TestDeps keeps the console a client of the admin API: it asks the
// admin handler through its Auth interface and serves pages, and imports
// neither the admin handlers, the data plane, the process host nor a
// store.
func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/console", []string{
		"github.com/go-llmflow/llmflow/admin",
		"github.com/go-llmflow/llmflow/gateway",
		"github.com/go-llmflow/llmflow/server",
		"github.com/go-llmflow/llmflow/store",
	})
}
