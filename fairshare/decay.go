package fairshare

import (
	"math"
	"time"
)

// DefaultHalfLife is the usage half-life when none is configured (Slurm's
// PriorityDecayHalfLife default, 7 days).
const DefaultHalfLife = 168 * time.Hour

// DecayFactor is the fraction of usage left after dt:
//
//	d(dt) = exp(−ln2 · dt / halfLife)
//
// so d(halfLife) = 1/2 and d(a+b) = d(a)·d(b). Slurm multiplies by
// (1 − 0.693/HL)^dt per second, the first-order expansion of the same
// thing. The factor is 1 for dt ≤ 0 and for halfLife ≤ 0 (no decay), so it is
// always in [0, 1].
func DecayFactor(dt, halfLife time.Duration) float64 {
	if dt <= 0 || halfLife <= 0 {
		return 1
	}
	return math.Exp(-math.Ln2 * float64(dt) / float64(halfLife))
}
