package gateway

import (
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/go-llmflow/llmflow/autocap"
)

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

// parseEngineMetrics reads an engine's Prometheus text exposition. Series of
// one name are summed (one per engine core with data parallelism), but
// the KV usage, which is the fullest core's. Values that are not finite
// or negative make the metric unknown.
func parseEngineMetrics(r io.Reader) (autocap.Engine, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return autocap.UnknownEngine(), err
	}
	e := autocap.Engine{
		Running:     sumOf(fams[vllmRunning]),
		Waiting:     sumOf(fams[vllmWaiting]),
		KV:          maxOf(fams[vllmKV]),
		Preemptions: sumOf(fams[vllmPreemptions]),
	}
	if math.IsNaN(e.Preemptions) {
		e.Preemptions = sumOf(fams[vllmPreemptOld])
	}
	if math.IsNaN(e.Running) && math.IsNaN(e.Waiting) {
		e.Running, e.Waiting = sumOf(fams[llamaRunning]), sumOf(fams[llamaWaiting])
		if !math.IsNaN(e.Running) && math.IsNaN(e.Preemptions) {
			e.Preemptions = 0 // llama-server never preempts
		}
	}
	if e.KV > 1 {
		e.KV = 1
	}
	return e, nil
}

// sampleValue is a gauge's, counter's or untyped sample's value; NaN otherwise
// or when it is not a finite number ≥ 0.
func sampleValue(m *dto.Metric) float64 {
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

func sumOf(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, m := range f.GetMetric() {
		s += sampleValue(m) // NaN poisons the sum: unknown
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
		v := sampleValue(m)
		if math.IsNaN(v) {
			return v
		}
		x = math.Max(x, v)
	}
	return x
}
