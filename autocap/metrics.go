package autocap

import (
	"math"
	"time"
)

// Engine is what one engine's /metrics says about its load. A metric it
// does not expose is NaN.
type Engine struct {
	Running, Waiting float64
	KV               float64 // KV-cache usage 0..1 (vLLM); NaN on llama-server
	Preemptions      float64 // counter; 0 on engines that never preempt (llama-server)
}

// UnknownEngine is an engine whose metrics could not be read.
func UnknownEngine() Engine {
	return Engine{Running: math.NaN(), Waiting: math.NaN(), KV: math.NaN(), Preemptions: math.NaN()}
}

// Known reports whether e has what the controller needs: running,
// waiting and the preemption counter.
func (e Engine) Known() bool {
	return !math.IsNaN(e.Running) && !math.IsNaN(e.Waiting) && !math.IsNaN(e.Preemptions)
}

// Pool sums the engines of a pool into a sample taken at (the oldest
// scrape), complete when every engine is known. KV is the fullest engine's.
func Pool(engines []Engine, at time.Time, inflight int) Sample {
	s := Sample{At: at, Complete: len(engines) > 0, KV: math.NaN(), InFlight: inflight, Engines: len(engines)}
	for _, e := range engines {
		if !e.Known() {
			s.Complete = false
			continue
		}
		s.Running += e.Running
		s.Waiting += e.Waiting
		s.Preemptions += e.Preemptions
		if !math.IsNaN(e.KV) && (math.IsNaN(s.KV) || e.KV > s.KV) {
			s.KV = e.KV
		}
	}
	return s
}
