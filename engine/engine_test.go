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

func TestKinds(t *testing.T) {
	for _, k := range engine.Kinds {
		d, err := engine.New(k, engine.Options{})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if d.Kind != k || d.Name == "" || len(d.Strip) == 0 {
			t.Errorf("%s: %+v", k, d)
		}
	}
	if _, err := engine.New("tgi", engine.Options{}); err == nil {
		t.Error("unknown kind accepted")
	}
	for _, tc := range []struct {
		kind string
		o    engine.Options
	}{
		{"llama-server", engine.Options{Scheduler: "priority"}},
		{"openai", engine.Options{Scheduler: "priority"}},
		{"vllm", engine.Options{PriorityOrder: "low_first"}},
		{"sglang", engine.Options{PriorityVia: "header"}},
		{"sglang", engine.Options{PriorityOrder: "sideways"}},
		{"vllm", engine.Options{Scheduler: "lottery"}},
	} {
		if _, err := engine.New(tc.kind, tc.o); err == nil {
			t.Errorf("New(%s, %+v) accepted", tc.kind, tc.o)
		}
	}
}

// SGLang runs the largest priority first unless told otherwise: the
// gateway reverses its order on the wire, and keeps it for vLLM.
func TestWire(t *testing.T) {
	sg, _ := engine.New("sglang", engine.Options{})
	low, _ := engine.New("sglang", engine.Options{PriorityOrder: "low_first"})
	vl, _ := engine.New("vllm", engine.Options{})
	for _, pair := range [][2]int{{0, 10}, {1, 2}, {10, 101}} {
		a, b := pair[0], pair[1] // a runs before b
		if !(sg.Wire(a) > sg.Wire(b)) || sg.Wire(b) < 0 {
			t.Errorf("sglang: Wire(%d) = %d, Wire(%d) = %d", a, sg.Wire(a), b, sg.Wire(b))
		}
		if low.Wire(a) != a || vl.Wire(a) != a {
			t.Errorf("low-first engines get the priority as it is")
		}
	}
}
