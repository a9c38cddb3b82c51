package gateway

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/autocap"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/vllmsim"
)

func TestParseEngineMetrics(t *testing.T) {
	nan := math.NaN()
	vllm, llama := kindMetrics(t, "vllm"), kindMetrics(t, "llama-server")
	cases := []struct {
		name  string
		names engine.Metrics
		text  string
		want  autocap.Engine
		err   bool
	}{
		{"vLLM", vllm, `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 12
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7
`, eng(12, 3, 0.75, 7), false},
		{"vLLM data parallel: summed, KV of the fullest", vllm, `vllm:num_requests_running{engine="0"} 12
vllm:num_requests_running{engine="1"} 10
vllm:num_requests_waiting{engine="0"} 0
vllm:num_requests_waiting{engine="1"} 1
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="1"} 0.8
vllm:num_preemptions_total{engine="0"} 1
vllm:num_preemptions_total{engine="1"} 2
`, eng(22, 1, 0.8, 3), false},
		{"vLLM counter registered without _total", vllm, `vllm:num_requests_running 1
vllm:num_requests_waiting 0
vllm:kv_cache_usage_perc 0.1
vllm:num_preemptions 4
`, eng(1, 0, 0.1, 4), false},
		{"llama-server", llama, `# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
`, eng(4, 2, nan, 0), false},
		{"no preemption counter", vllm, `vllm:num_requests_running 1
vllm:num_requests_waiting 0
`, eng(1, 0, nan, nan), false},
		{"llama-server's names on vLLM", vllm, `llamacpp:requests_processing 4
llamacpp:requests_deferred 2
`, eng(nan, nan, nan, nan), false},
		{"SGLang: no preemption counter", kindMetrics(t, "sglang"), `sglang:num_running_reqs{tp_rank="0"} 5
sglang:num_queue_reqs{tp_rank="0"} 1
sglang:token_usage{tp_rank="0"} 0.4
`, eng(5, 1, 0.4, 0), false},
		{"negative is unknown", vllm, `vllm:num_requests_running -1
vllm:num_requests_waiting 0
vllm:num_preemptions_total 0
`, eng(nan, 0, nan, 0), false},
		{"NaN is unknown", vllm, `vllm:num_requests_running NaN
vllm:num_requests_waiting +Inf
vllm:num_preemptions_total 0
`, eng(nan, nan, nan, 0), false},
		{"a sum beyond float64 is unknown", vllm, `vllm:num_requests_running{engine="0"} 1e308
vllm:num_requests_running{engine="1"} 1e308
`, eng(nan, nan, nan, nan), false},
		{"KV above 1 is full", vllm, `vllm:kv_cache_usage_perc 1.2
`, eng(nan, nan, 1, nan), false},
		{"nothing", vllm, ``, eng(nan, nan, nan, nan), false},
		{"not Prometheus", vllm, `<html>`, eng(nan, nan, nan, nan), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseEngineMetrics(strings.NewReader(tc.text), tc.names)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !sameFloat(got.Running, tc.want.Running) || !sameFloat(got.Waiting, tc.want.Waiting) || !sameFloat(got.KV, tc.want.KV) || !sameFloat(got.Preemptions, tc.want.Preemptions) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if got.Known() != (!math.IsNaN(tc.want.Running) && !math.IsNaN(tc.want.Waiting) && !math.IsNaN(tc.want.Preemptions)) {
				t.Fatalf("Known() = %v for %+v", got.Known(), got)
			}
		})
	}
}

// kindMetrics are the metric names of an engine kind's descriptor.
func kindMetrics(t testing.TB, kind string) engine.Metrics {
	d, err := engine.New(kind, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Metrics
}

func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// FuzzParseEngineMetrics: any text parses or fails without panicking, and what
// it returns is a usable sample: known metrics are finite and ≥ 0, KV at
// most 1; a controller stepped with it keeps C within its bounds.
func FuzzParseEngineMetrics(f *testing.F) {
	f.Add("vllm:num_requests_running{engine=\"0\"} 12\nvllm:num_requests_waiting 3\nvllm:kv_cache_usage_perc 0.75\nvllm:num_preemptions_total 7\n")
	f.Add("llamacpp:requests_processing 4\nllamacpp:requests_deferred 2\n")
	f.Add("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running NaN\n")
	f.Add("vllm:kv_cache_usage_perc 1e308\nvllm:num_requests_running 1e308\nvllm:num_requests_running{a=\"b\"} 1e308\n")
	kinds := []engine.Metrics{kindMetrics(f, "vllm"), kindMetrics(f, "llama-server"), kindMetrics(f, "sglang")}
	f.Fuzz(func(t *testing.T, text string) {
		e, err := parseEngineMetrics(strings.NewReader(text), kinds[len(text)%len(kinds)])
		if err != nil {
			return
		}
		for _, v := range []float64{e.Running, e.Waiting, e.Preemptions, e.KV} {
			if !math.IsNaN(v) && (v < 0 || math.IsInf(v, 0)) {
				t.Fatalf("negative value in %+v", e)
			}
		}
		if e.KV > 1 {
			t.Fatalf("KV %v > 1", e.KV)
		}
		c := autocap.New(autocap.Params{Min: 2, Max: 50}, 10, fuzzT0)
		now := fuzzT0.Add(time.Hour)
		for range 3 {
			got, _ := c.Step(autocap.Pool([]autocap.Engine{e}, now, 10), now)
			if got < 2 || got > 50 {
				t.Fatalf("C = %d outside [2, 50] after %+v", got, e)
			}
			now = now.Add(time.Minute)
		}
	})
}

var fuzzT0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func eng(running, waiting, kv, preemptions float64) autocap.Engine {
	return autocap.Engine{Running: running, Waiting: waiting, KV: kv, Preemptions: preemptions}
}

// vllmsim's /metrics has what the capacity loop reads, under vLLM's names.
func TestParseVllmsimMetrics(t *testing.T) {
	sim := vllmsim.New(vllmsim.Config{})
	srv := httptest.NewServer(sim)
	defer func() { srv.Close(); sim.Close() }()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	e, err := parseEngineMetrics(resp.Body, kindMetrics(t, "vllm"))
	if err != nil || !e.Known() || e.Running != 0 || e.Waiting != 0 || e.KV != 0 || e.Preemptions != 0 {
		t.Fatalf("vllmsim's metrics: %+v, %v; want known and idle", e, err)
	}
}
