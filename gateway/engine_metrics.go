package gateway

import (
	"io"
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/go-llmflow/llmflow/autocap"
	"github.com/go-llmflow/llmflow/engine"
)

// parseEngineMetrics reads an engine's Prometheus text exposition for the
// series its descriptor names (engine.Metrics, reference/engines.md).
// Series of one name are summed (one per engine core with data
// parallelism), but the KV usage, which is the fullest core's. Values that
// are not finite or negative make the metric unknown. An engine whose
// descriptor names no preemption counter never preempts (llama-server) or
// does not count it (SGLang): 0, its queue is what shrinks C. vLLM's
// counter registered as vllm:num_preemptions is read under that name too
// when the _total series is absent.
func parseEngineMetrics(r io.Reader, names engine.Metrics) (autocap.Engine, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return autocap.UnknownEngine(), err
	}
	e := autocap.Engine{Running: sumOf(fams[names.Running]), Waiting: sumOf(fams[names.Waiting]),
		KV: math.NaN(), Preemptions: 0}
	if names.KVUsage != "" {
		e.KV = math.Min(maxOf(fams[names.KVUsage]), 1)
	}
	if names.Preemptions != "" {
		e.Preemptions = sumOf(fams[names.Preemptions])
		if base, ok := strings.CutSuffix(names.Preemptions, "_total"); ok && math.IsNaN(e.Preemptions) {
			e.Preemptions = sumOf(fams[base])
		}
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
