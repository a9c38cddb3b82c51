package autocap

import (
	"io"
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Engine is what one engine's /metrics says about its load. A metric it
// does not expose is NaN.
type Engine struct {
	Running, Waiting float64
	KV               float64 // KV-cache usage 0..1 (vLLM); NaN on llama-server
	Preemptions      float64 // counter; 0 on engines that never preempt (llama-server)
}

// Known reports whether e has what the controller needs: running,
// waiting and the preemption counter.
func (e Engine) Known() bool {
	return !math.IsNaN(e.Running) && !math.IsNaN(e.Waiting) && !math.IsNaN(e.Preemptions)
}

// The metric names read, per engine (reference/engines.md): vLLM's
// gauges and preemption counter (registered as vllm:num_preemptions,
// exposed with _total), llama-server's busy slots and deferred requests
// (its --metrics).
const (
	vllmRunning     = "vllm:num_requests_running"
	vllmWaiting     = "vllm:num_requests_waiting"
	vllmKV          = "vllm:kv_cache_usage_perc"
	vllmPreemptions = "vllm:num_preemptions_total"
	vllmPreemptOld  = "vllm:num_preemptions"
	llamaRunning    = "llamacpp:requests_processing"
	llamaWaiting    = "llamacpp:requests_deferred"
)

// ParseMetrics reads an engine's Prometheus text exposition. Series of
// one name are summed (one per engine core with data parallelism), but
// the KV usage, which is the fullest core's. Values that are not finite
// or negative make the metric unknown.
func ParseMetrics(r io.Reader) (Engine, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Engine{Running: math.NaN(), Waiting: math.NaN(), KV: math.NaN(), Preemptions: math.NaN()}, err
	}
	e := Engine{
		Running:     sum(fams[vllmRunning]),
		Waiting:     sum(fams[vllmWaiting]),
		KV:          maxOf(fams[vllmKV]),
		Preemptions: sum(fams[vllmPreemptions]),
	}
	if math.IsNaN(e.Preemptions) {
		e.Preemptions = sum(fams[vllmPreemptOld])
	}
	if math.IsNaN(e.Running) && math.IsNaN(e.Waiting) {
		e.Running, e.Waiting = sum(fams[llamaRunning]), sum(fams[llamaWaiting])
		if !math.IsNaN(e.Running) && math.IsNaN(e.Preemptions) {
			e.Preemptions = 0 // llama-server never preempts
		}
	}
	if e.KV > 1 {
		e.KV = 1
	}
	return e, nil
}

// value is a gauge's, counter's or untyped sample's value; NaN otherwise
// or when it is not a finite number ≥ 0.
func value(m *dto.Metric) float64 {
	v := math.NaN()
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		v = m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	}
	if math.IsInf(v, 0) || v < 0 {
		return math.NaN()
	}
	return v
}

func sum(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, m := range f.GetMetric() {
		s += value(m) // NaN poisons the sum: unknown
	}
	if math.IsInf(s, 0) {
		return math.NaN()
	}
	return s
}

func maxOf(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return math.NaN()
	}
	x := math.Inf(-1)
	for _, m := range f.GetMetric() {
		v := value(m)
		if math.IsNaN(v) {
			return v
		}
		x = math.Max(x, v)
	}
	return x
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
