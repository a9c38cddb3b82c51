package config_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
)

// Each engine gets its reclaim by default; headroom defaults to a quarter
// of the capacity and is 0 under "none".
func TestPoolReclaim(t *testing.T) {
	for _, tc := range []struct {
		pool     string
		reclaim  engine.Reclaim
		headroom int
	}{
		{`capacity = 16`, engine.ReclaimPreempt, 4},
		{`capacity = 16` + "\n" + `scheduler = "gateway"`, engine.ReclaimPreempt, 4},
		{`capacity = 16` + "\n" + `scheduler = "fcfs"`, engine.ReclaimNone, 0},
		{`capacity = 16` + "\n" + `reclaim = "holdback"`, engine.ReclaimHoldback, 4},
		{`capacity = 16` + "\n" + `reclaim = "holdback"` + "\n" + `headroom = 6`, engine.ReclaimHoldback, 6},
		{`capacity = 16` + "\n" + `reclaim = "none"` + "\n" + `headroom = 6`, engine.ReclaimNone, 0},
		{`capacity = 16` + "\n" + `scheduler = "fcfs"` + "\n" + `reclaim = "holdback"`, engine.ReclaimHoldback, 4},
		{`capacity = 3`, engine.ReclaimPreempt, 0},
	} {
		cfg, err := config.Parse("p.hcl", []byte("pool \"p\" {\n"+tc.pool+"\n}\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.pool, err)
		}
		if p := cfg.Pools[0]; p.Reclaim != tc.reclaim || p.Headroom != tc.headroom {
			t.Errorf("%q: reclaim %s headroom %d, want %s %d", tc.pool, p.Reclaim, p.Headroom, tc.reclaim, tc.headroom)
		}
	}
}
