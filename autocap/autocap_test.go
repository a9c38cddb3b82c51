package autocap

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// vllm is a complete sample of one vLLM engine, the gateway using c.
func vllm(running, waiting, kv, pre float64, inflight int) Sample {
	return Sample{Complete: true, Running: running, Waiting: waiting, KV: kv, Preemptions: pre, InFlight: inflight, Engines: 1}
}

func TestStep(t *testing.T) {
	p := Params{Min: 4, Max: 200, KVTarget: 0.9, Hold: 10 * time.Second, Stale: 15 * time.Second, CeilingTTL: time.Hour}
	nan := math.NaN()
	type step struct {
		after time.Duration // since the previous step (the first: since New)
		age   time.Duration // how old the sample is
		s     Sample
	}
	cases := []struct {
		name  string
		start int
		steps []step
		want  int
		why   Decision
	}{
		{"grows toward the KV target, a quarter at most", 32, []step{{20 * time.Second, 0, vllm(32, 0, 0.45, 0, 32)}}, 40, Grow},
		{"grows in proportion near the target", 32, []step{{20 * time.Second, 0, vllm(32, 0, 0.85, 0, 32)}}, 33, Grow},
		{"holds after a change", 32, []step{{5 * time.Second, 0, vllm(32, 0, 0.45, 0, 32)}}, 32, Holding},
		{"an idle pool teaches nothing", 32, []step{{20 * time.Second, 0, vllm(10, 0, 0.2, 0, 10)}}, 32, Steady},
		{"at the KV target", 32, []step{{20 * time.Second, 0, vllm(32, 0, 0.9, 0, 32)}}, 32, Steady},
		{"a stale sample is unknown, not zero", 32, []step{{20 * time.Second, 16 * time.Second, vllm(0, 0, 0, 0, 32)}}, 32, Unknown},
		{"an incomplete sample is unknown", 32, []step{{20 * time.Second, 0, Sample{Running: 0, Waiting: 0, KV: 0, Engines: 1}}}, 32, Unknown},
		{"a missing metric is unknown", 32, []step{{20 * time.Second, 0, vllm(nan, 0, 0.1, 0, 32)}}, 32, Unknown},
		{"preemptions shrink to what ran", 64, []step{
			{20 * time.Second, 0, vllm(50, 14, 1, 3, 64)},
			{time.Second, 0, vllm(50, 14, 1, 9, 64)},
		}, 50, Shrink},
		{"preemptions at the edge shrink by one", 64, []step{
			{20 * time.Second, 0, vllm(64, 0, 1, 3, 64)},
			{time.Second, 0, vllm(64, 0, 1, 4, 64)},
		}, 63, Shrink},
		{"half at most per step", 64, []step{
			{20 * time.Second, 0, vllm(10, 54, 1, 3, 64)},
			{time.Second, 0, vllm(10, 54, 1, 9, 64)},
		}, 32, Shrink},
		{"preemptions while holding are the old C's", 64, []step{
			{time.Second, 0, vllm(50, 14, 1, 3, 64)},
			{time.Second, 0, vllm(50, 14, 1, 9, 64)},
			{10 * time.Second, 0, vllm(50, 0, 0.9, 9, 64)},
		}, 64, Steady},
		{"preemptions while the old C's requests drain do not count", 64, []step{
			{20 * time.Second, 0, vllm(40, 24, 1, 0, 64)},
			{time.Second, 0, vllm(40, 24, 1, 0, 64)},      // queued twice: 40
			{6 * time.Second, 0, vllm(50, 14, 1, 5, 40)},  // still 64 in the engine
			{5 * time.Second, 0, vllm(40, 0, 0.5, 5, 40)}, // drained, no new preemption
		}, 50, Grow},
		{"preemptions once drained count", 64, []step{
			{20 * time.Second, 0, vllm(40, 24, 1, 0, 64)},
			{time.Second, 0, vllm(40, 24, 1, 0, 64)},    // 40
			{6 * time.Second, 0, vllm(38, 2, 1, 5, 40)}, // drained, preempting
			{5 * time.Second, 0, vllm(38, 2, 1, 6, 40)},
		}, 39, Shrink},
		{"a counter that went down restarted", 64, []step{
			{20 * time.Second, 0, vllm(60, 0, 0.9, 30, 64)},
			{time.Second, 0, vllm(60, 0, 0.9, 0, 64)},
		}, 64, Steady},
		{"an engine more is not a preemption", 64, []step{
			{20 * time.Second, 0, vllm(60, 0, 0.9, 3, 64)},
			{time.Second, 0, Sample{Complete: true, Running: 60, KV: 0.9, Preemptions: 10, InFlight: 64, Engines: 2}},
		}, 64, Steady},
		{"a queue once is an arrival", 64, []step{{20 * time.Second, 0, vllm(56, 8, 0.9, 0, 64)}}, 64, Steady},
		{"a queue twice shrinks to what runs", 64, []step{
			{20 * time.Second, 0, vllm(48, 8, 0.5, 0, 64)},
			{time.Second, 0, vllm(48, 8, 0.5, 0, 64)},
		}, 48, Shrink},
		{"near the edge, a step of one", 64, []step{
			{20 * time.Second, 0, vllm(56, 8, 0.5, 0, 64)},
			{time.Second, 0, vllm(56, 8, 0.5, 0, 64)},
		}, 63, Shrink},
		{"a request between arrival and step is no queue", 64, []step{{20 * time.Second, 0, vllm(60, 4, 0.5, 0, 64)}}, 80, Grow},
		{"a queue does not grow", 64, []step{{20 * time.Second, 0, vllm(56, 8, 0.5, 0, 64)}}, 64, Steady},
		{"grows to below the C that gave out", 64, []step{
			{20 * time.Second, 0, vllm(40, 10, 1, 0, 64)},
			{time.Second, 0, vllm(40, 10, 1, 0, 64)},       // 40, ceiling 64
			{20 * time.Second, 0, vllm(40, 0, 0.3, 0, 40)}, // 50
			{20 * time.Second, 0, vllm(50, 0, 0.3, 0, 50)}, // 62
			{20 * time.Second, 0, vllm(62, 0, 0.3, 0, 62)}, // 63
		}, 63, Grow},
		{"the ceiling holds", 64, []step{
			{20 * time.Second, 0, vllm(58, 10, 1, 0, 64)},
			{time.Second, 0, vllm(58, 10, 1, 0, 64)}, // 63, ceiling 64
			{20 * time.Second, 0, vllm(63, 0, 0.3, 0, 63)},
		}, 63, Steady},
		{"the ceiling is raised after its TTL", 64, []step{
			{20 * time.Second, 0, vllm(58, 10, 1, 0, 64)},
			{time.Second, 0, vllm(58, 10, 1, 0, 64)}, // 63, ceiling 64
			{time.Hour, 0, vllm(63, 0, 0.3, 0, 63)},  // ceiling 68
		}, 67, Grow},
		{"at most Max", 190, []step{{20 * time.Second, 0, vllm(190, 0, 0.3, 0, 190)}}, 200, Grow},
		{"at least Min", 6, []step{
			{20 * time.Second, 0, vllm(2, 4, 1, 1, 6)},
			{time.Second, 0, vllm(2, 4, 1, 2, 6)},
		}, 4, Shrink},
		{"no KV figure: an eighth at a time", 16, []step{{20 * time.Second, 0, vllm(16, 0, nan, 0, 16)}}, 18, Grow},
		{"no KV figure: a queue shrinks to the slots", 20, []step{
			{20 * time.Second, 0, vllm(16, 4, nan, 0, 20)},
			{time.Second, 0, vllm(16, 4, nan, 0, 20)},
		}, 16, Shrink},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := New(p, tc.start, t0)
			now := t0
			var got int
			var why Decision
			for _, st := range tc.steps {
				now = now.Add(st.after)
				s := st.s
				s.At = now.Add(-st.age)
				got, why = c.Step(s, now)
			}
			if got != tc.want || why != tc.why || c.C() != got {
				t.Fatalf("C = %d (%s), want %d (%s)", got, why, tc.want, tc.why)
			}
		})
	}
}

func TestNewClamps(t *testing.T) {
	for _, tc := range []struct{ min, max, start, want int }{
		{4, 64, 2, 4}, {4, 64, 100, 64}, {4, 64, 10, 10}, {0, 0, 5, 1},
	} {
		if got := New(Params{Min: tc.min, Max: tc.max}, tc.start, t0).C(); got != tc.want {
			t.Errorf("New(min %d, max %d, start %d).C() = %d, want %d", tc.min, tc.max, tc.start, got, tc.want)
		}
	}
}
