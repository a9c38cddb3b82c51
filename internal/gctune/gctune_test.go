package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, budget uint64
		want         int
	}{
		{0, 128 * mib, 400},
		{5 * mib, 128 * mib, 400},       // idle: 25 MiB at most
		{25 * mib, 128 * mib, 400},      // 125 MiB
		{26 * mib, 128 * mib, 375},      // 26 × 4.75 = 123.5
		{40 * mib, 128 * mib, 200},      // 40 × 3.2 = 128 → 220 rounds down to 200
		{64 * mib, 128 * mib, 100},      // Go's default from here on
		{100 * mib, 128 * mib, 100},     // never below it
		{300 * mib, 128 * mib, 100},     // 10,000 streams
		{1, 0, 100},                     // no budget
		{128 * mib, 128 * mib, 100},     // at the budget
		{1, 1 << 62, 400},               // no overflow
		{3 * mib, 6*mib + 1, 100},       // just above 100 %: 100
		{10 * mib, 10*mib + 1*mib, 100}, // 10 %: still 100
	} {
		if got := Percent(c.live, c.budget); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.budget/mib, got, c.want)
		}
	}
}

// TestTune: the percentage follows the live heap and goes back at the
// end; with GOGC set nothing changes.
func TestTune(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	t.Setenv("GOGC", "")
	runtime.GC()
	ctx, cancel := context.WithCancel(context.Background())
	Tune(ctx, 1<<40, time.Millisecond) // a budget no test heap reaches
	if p := percentNow(); p != maxPercent {
		t.Fatalf("percent %d with a small heap, want %d", p, maxPercent)
	}
	cancel()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if p := percentNow(); p == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("percent %d after the end, want 100 back", percentNow())
		}
	}

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	Tune(ctx, 1<<40, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if p := percentNow(); p != 150 {
		t.Fatalf("percent %d with GOGC=150 set, want it left alone", p)
	}
}

// percentNow is the GC percentage.
func percentNow() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
