package autocap

import (
	"math"
	"testing"
	"time"
)

// modelEngine is a deterministic stand-in for an engine of true capacity
// k: at concurrency c its KV usage is 0.85·c/k with ±5 % ripple; above k
// it preempts (c − k requests a read) and queues what it preempted.
type modelEngine struct {
	k   int
	pre float64
	n   int
}

func (m *modelEngine) read(c int, at time.Time) Sample {
	m.n++
	ripple := 1 + 0.05*math.Sin(float64(m.n)*1.3)
	kv := math.Min(0.85*float64(c)/float64(m.k)*ripple, 1)
	running, waiting := float64(min(c, m.k)), 0.0
	if c > m.k {
		m.pre += float64(c - m.k)
		waiting, kv = float64(c-m.k), 1
	}
	return Sample{At: at, Complete: true, Running: running, Waiting: waiting, KV: kv, Preemptions: m.pre, InFlight: c, Engines: 1}
}

// From half and twice the true capacity, C settles within 10 % of it,
// at or below it, within a bounded number of holds, and stays there
// without oscillating: once within 10 %, at most one probe of the edge
// (a slot up and back), and no change in the second minute. Every read is
// a step; the clock is the test's.
func TestConverges(t *testing.T) {
	const k = 36
	p := Params{Min: 2, Max: 400, KVTarget: 0.9, Hold: 1500 * time.Millisecond, Stale: time.Second, CeilingTTL: time.Hour}
	for _, start := range []int{k / 2, 2 * k} {
		m := &modelEngine{k: k}
		c := New(p, start, t0)
		now := t0
		var settled, lastChange time.Duration = -1, 0
		reversals, dir, last := 0, 0, c.C()
		for now.Sub(t0) < 120*time.Second {
			now = now.Add(250 * time.Millisecond)
			got, _ := c.Step(m.read(c.C(), now), now)
			if in := float64(got) >= 0.9*k && float64(got) <= 1.1*k; in && settled < 0 {
				settled = now.Sub(t0)
			} else if !in {
				settled = -1
			}
			if got != last {
				d := 1
				if got < last {
					d = -1
				}
				if settled >= 0 && dir != 0 && d != dir {
					reversals++
				}
				dir, last, lastChange = d, got, now.Sub(t0)
			}
		}
		if settled < 0 || settled > 20*p.Hold {
			t.Fatalf("from %d: within 10 %% for good at %v, want within 20 holds (%v)", start, settled, 20*p.Hold)
		}
		if last < k*9/10 || last > k {
			t.Fatalf("from %d: C ends at %d, want within [%d, %d] (no preemption, within 10 %%)", start, last, k*9/10, k)
		}
		if reversals > 2 || lastChange > 60*time.Second {
			t.Fatalf("from %d: %d reversals within 10 %%, last change at %v: oscillates", start, reversals, lastChange)
		}
		t.Logf("from %d: within 10 %% at %v, last change at %v, ends at %d, %d reversals", start, settled, lastChange, last, reversals)
	}
}
