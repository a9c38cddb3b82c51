package engine_test

import (
	"testing"

	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/deptest"
)

func TestDeps(t *testing.T) {
	deptest.Check(t, "github.com/go-llmflow/llmflow/engine", deptest.Impure)
}

func TestFor(t *testing.T) {
	for _, tc := range []struct {
		scheduler, via string
		ok             bool
		header         string
		body           bool
		sched          engine.Scheduling
	}{
		{"priority", "both", true, engine.VLLMPriorityHeader, true, engine.Priority},
		{"priority", "header", true, engine.VLLMPriorityHeader, false, engine.Priority},
		{"priority", "body", true, "", true, engine.Priority},
		{"priority", "smoke-signal", false, "", false, 0},
		{"gateway", "both", true, "", false, engine.GatewayQueue},
		{"fcfs", "both", true, "", false, engine.FCFS},
		{"lottery", "both", false, "", false, 0},
	} {
		d, ok := engine.For(tc.scheduler, tc.via)
		if ok != tc.ok {
			t.Errorf("For(%q, %q) ok = %v", tc.scheduler, tc.via, ok)
			continue
		}
		if !ok {
			continue
		}
		if d.PriorityHeader != tc.header || d.PriorityBody != tc.body || d.Scheduling != tc.sched {
			t.Errorf("For(%q, %q) = %+v", tc.scheduler, tc.via, d)
		}
		if d.SendsPriority() != (tc.header != "" || tc.body) {
			t.Errorf("For(%q, %q).SendsPriority() = %v", tc.scheduler, tc.via, d.SendsPriority())
		}
		for e := engine.ChatCompletions; e < engine.NumEndpoints; e++ {
			if !d.Serves(e) || e.Path() == "" {
				t.Errorf("For(%q, %q) does not serve %d", tc.scheduler, tc.via, e)
			}
		}
		if d.Serves(engine.NumEndpoints) {
			t.Errorf("serves an endpoint that does not exist")
		}
		for _, f := range []string{"priority", "cache_salt", "id_slot", "kv_transfer_params"} {
			if !d.Strips([]byte(f)) {
				t.Errorf("For(%q, %q) does not strip %q", tc.scheduler, tc.via, f)
			}
		}
		if d.Strips([]byte("messages")) {
			t.Errorf("strips messages")
		}
	}
}
