package llmflow_test

import (
	"testing"

	"github.com/go-llmflow/llmflow"
)

func TestGPULimits(t *testing.T) {
	if h, ok := (llmflow.GPULimits{}).BudgetGPUHours(); ok || h != 0 {
		t.Errorf("no limit: budget %v %v", h, ok)
	}
	if h, ok := (llmflow.GPULimits{Minutes: 6000, HasMinutes: true}).BudgetGPUHours(); !ok || h != 100 {
		t.Errorf("6000 GPU-minutes: %v GPU-hours, %v", h, ok)
	}
	if h, ok := (llmflow.GPULimits{HasMinutes: true}).BudgetGPUHours(); !ok || h != 0 {
		t.Errorf("gres/gpu=0 is a budget of 0: %v %v", h, ok)
	}
	for _, tc := range []struct {
		l             llmflow.GPULimits
		gpus, c, want int
		ok            bool
	}{
		{llmflow.GPULimits{GPUs: 16, HasGPUs: true}, 32, 256, 128, true},
		{llmflow.GPULimits{GPUs: 6, HasGPUs: true}, 32, 10, 1, true},   // 1.875 → 1
		{llmflow.GPULimits{GPUs: 1, HasGPUs: true}, 32, 10, 1, true},   // 0.3125 → at least 1
		{llmflow.GPULimits{GPUs: 0, HasGPUs: true}, 32, 10, 0, true},   // no GPU: nothing in flight
		{llmflow.GPULimits{GPUs: 64, HasGPUs: true}, 32, 10, 10, true}, // more than the pool: the pool
		{llmflow.GPULimits{GPUs: 8, HasGPUs: true}, 0, 10, 0, false},   // pool GPUs unknown
		{llmflow.GPULimits{Minutes: 5, HasMinutes: true}, 32, 10, 0, false},
	} {
		got, ok := tc.l.InFlightCap(tc.gpus, tc.c)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v.InFlightCap(%d, %d) = %d, %v; want %d, %v", tc.l, tc.gpus, tc.c, got, ok, tc.want, tc.ok)
		}
	}
	for l, want := range map[llmflow.GPULimits]string{
		{}:                                "none",
		{Minutes: 6000, HasMinutes: true}: "GrpTRESMins=gres/gpu=6000",
		{GPUs: 8, HasGPUs: true}:          "GrpTRES=gres/gpu=8",
		{Minutes: 60, HasMinutes: true, GPUs: 2, HasGPUs: true}: "GrpTRESMins=gres/gpu=60 GrpTRES=gres/gpu=2",
	} {
		if l.String() != want || l.IsZero() != (want == "none") {
			t.Errorf("%#v: %q", l, l.String())
		}
	}
}
