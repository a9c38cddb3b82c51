package autocap

import (
	"math"
	"testing"
)

func TestPool(t *testing.T) {
	nan := math.NaN()
	at := t0
	s := Pool([]Engine{{10, 1, 0.5, 2}, {5, 0, 0.9, 1}, {3, 0, nan, 0}}, at, 20)
	if !s.Complete || s.Running != 18 || s.Waiting != 1 || s.KV != 0.9 || s.Preemptions != 3 || s.InFlight != 20 || s.Engines != 3 || !s.At.Equal(at) {
		t.Fatalf("Pool = %+v", s)
	}
	if s := Pool([]Engine{{10, 1, 0.5, 2}, {nan, 0, 0.9, 1}}, at, 20); s.Complete {
		t.Fatalf("an unknown engine: %+v, want incomplete", s)
	}
	if s := Pool(nil, at, 0); s.Complete {
		t.Fatalf("no engines: %+v, want incomplete", s)
	}
	if s := Pool([]Engine{{1, 0, nan, 0}}, at, 0); !math.IsNaN(s.KV) {
		t.Fatalf("no KV figure: %+v, want NaN", s)
	}
}
