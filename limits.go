package llmflow

import (
	"fmt"
	"math"
)

// GPULimits are the GPU parts of an account's Slurm group limits, imported
// with the tree (sacctmgr's GrpTRESMins and GrpTRES, their gres/gpu
// counts). Slurm stores group limits only on the association where they
// are set (children do not inherit them: the limit covers the account's
// whole subtree), and so do these. The zero value is no limit.
//
// What they mean in llmflow (BudgetGPUHours, InFlightCap), for the
// budgets side to wire:
//
//   - GrpTRESMins=gres/gpu=N caps the GPU-minutes an account's jobs use
//     until Slurm's PriorityUsageResetPeriod zeroes the usage. In llmflow
//     it is a budget of N/60 GPU-hours per the configured reset period
//     (day, week or month) on the account's scope (an organisation, team
//     or project, all models), with the alerts block's soft_limit_percent
//     as its soft limit.
//   - GrpTRES=gres/gpu=N caps the GPUs the account's running jobs hold at
//     once. In llmflow it caps the account's requests in flight at its
//     share of each pool: N over the pool's GPUs, times the pool's
//     capacity.
type GPULimits struct {
	// Minutes is GrpTRESMins' gres/gpu count (GPU-minutes), when
	// HasMinutes.
	Minutes    int64
	HasMinutes bool
	// GPUs is GrpTRES' gres/gpu count, when HasGPUs.
	GPUs    int64
	HasGPUs bool
}

// IsZero reports whether l sets no limit.
func (l GPULimits) IsZero() bool { return !l.HasMinutes && !l.HasGPUs }

// BudgetGPUHours is the budget GrpTRESMins gives per reset period: Minutes
// / 60 GPU-hours; ok is false when GrpTRESMins sets no GPU limit. 0 is a
// real budget (Slurm's gres/gpu=0: no GPU time at all).
func (l GPULimits) BudgetGPUHours() (gpuHours float64, ok bool) {
	if !l.HasMinutes {
		return 0, false
	}
	return float64(l.Minutes) / 60, true
}

// InFlightCap is the most requests of the account's subtree in flight at
// once in a pool of poolGPUs GPUs and capacity C that GrpTRES allows:
// floor(GPUs / poolGPUs × C), at least 1 when GPUs > 0 (an account Slurm
// lets use a GPU may run a request), at most C. ok is false when there is
// no cap: GrpTRES sets no GPU limit, or the pool's GPUs are unknown
// (pool { gpus } not set: the cap cannot be computed, and the caller
// should say so).
func (l GPULimits) InFlightCap(poolGPUs, capacity int) (maxInFlight int, ok bool) {
	if !l.HasGPUs || poolGPUs <= 0 || capacity <= 0 {
		return 0, false
	}
	if l.GPUs >= int64(poolGPUs) {
		return capacity, true
	}
	n := int(math.Floor(float64(l.GPUs) / float64(poolGPUs) * float64(capacity)))
	if n < 1 && l.GPUs > 0 {
		n = 1
	}
	return n, true
}

// String shows l as sacctmgr would set it: "GrpTRESMins=gres/gpu=6000
// GrpTRES=gres/gpu=8", "none" for no limit.
func (l GPULimits) String() string {
	switch {
	case l.HasMinutes && l.HasGPUs:
		return fmt.Sprintf("GrpTRESMins=gres/gpu=%d GrpTRES=gres/gpu=%d", l.Minutes, l.GPUs)
	case l.HasMinutes:
		return fmt.Sprintf("GrpTRESMins=gres/gpu=%d", l.Minutes)
	case l.HasGPUs:
		return fmt.Sprintf("GrpTRES=gres/gpu=%d", l.GPUs)
	}
	return "none"
}
