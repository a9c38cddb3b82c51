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

// A pool names its engine kind; its scheduler and priority transport are
// options of the kind.
func TestPoolEngineKind(t *testing.T) {
	for _, tc := range []struct {
		pool      string
		kind      string
		sched     engine.Scheduling
		header    string
		body      bool
		highFirst bool
		reclaim   engine.Reclaim
	}{
		{`engine = "vllm"`, "vllm", engine.Priority, engine.VLLMPriorityHeader, true, false, engine.ReclaimPreempt},
		{`engine = "vllm"` + "\n" + `scheduler = "gateway"`, "vllm", engine.GatewayQueue, "", false, false, engine.ReclaimPreempt},
		{`engine = "sglang"`, "sglang", engine.Priority, "", true, true, engine.ReclaimPreempt},
		{`engine = "sglang"` + "\n" + `priority_order = "low_first"`, "sglang", engine.Priority, "", true, false, engine.ReclaimPreempt},
		{`engine = "llama-server"`, "llama-server", engine.GatewayQueue, "", false, false, engine.ReclaimPreempt},
		{`engine = "openai"`, "openai", engine.FCFS, "", false, false, engine.ReclaimNone},
		{`engine = "openai"` + "\n" + `scheduler = "gateway"`, "openai", engine.GatewayQueue, "", false, false, engine.ReclaimNone},
		{`scheduler = "gateway"`, "llama-server", engine.GatewayQueue, "", false, false, engine.ReclaimPreempt},
		{`priority_via = "header"`, "vllm", engine.Priority, engine.VLLMPriorityHeader, false, false, engine.ReclaimPreempt},
	} {
		cfg, err := config.Parse("p.hcl", []byte("pool \"p\" {\ncapacity = 8\n"+tc.pool+"\n}\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.pool, err)
		}
		e := cfg.Pools[0].Engine
		if e.Kind != tc.kind || e.Scheduling != tc.sched || e.PriorityHeader != tc.header || e.PriorityBody != tc.body ||
			e.PriorityHighFirst != tc.highFirst || cfg.Pools[0].Reclaim != tc.reclaim {
			t.Errorf("%q: %+v reclaim %s", tc.pool, e, cfg.Pools[0].Reclaim)
		}
	}
}
