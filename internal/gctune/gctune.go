// Package gctune lets the garbage collector run less often while the
// live heap is small.
//
// With GOGC's default (100) the collector starts a cycle each time the
// heap has grown by as much as survived the last one. A gateway's live
// heap is small (a few MiB idle, tens under load) and everything a
// request allocates dies with it, so under load a cycle starts every few
// milliseconds; each one takes a quarter of the CPUs for its marking and
// slows the requests that allocate meanwhile. On two cores that was half
// the gateway's slowest 1 % of requests at one client (p99 0.98 ms with
// 100, 0.54 ms with 400).
//
// Tune raises the percentage while the heap it lets grow stays within a
// budget: live × (1 + percent/100) ≤ budget, from 100 (never below Go's
// default: a large live heap, 10,000 open streams, is collected as it
// always was) to 400. GOGC set in the environment is the operator's
// choice and is left alone.
package gctune

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

const (
	minPercent = 100
	maxPercent = 400
	step       = 25 // percentages move by steps, not with every byte
)

// Percent is the GOGC percentage for a live heap of live bytes under a
// budget of budget bytes: the largest multiple of step from minPercent to
// maxPercent with live × (1 + p/100) ≤ budget.
func Percent(live, budget uint64) int {
	if live == 0 {
		return maxPercent
	}
	if budget <= live {
		return minPercent
	}
	p := (budget - live) * 100 / live
	if p >= maxPercent {
		return maxPercent
	}
	return max(minPercent, int(p)/step*step)
}

// Tune sets the percentage for the live heap now and then every interval
// until ctx ends, unless GOGC is set; it returns at once, the tuning runs
// on its own goroutine. On its end the percentage goes back to what it
// was.
func Tune(ctx context.Context, budget uint64, every time.Duration) {
	if os.Getenv("GOGC") != "" {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	cur := Percent(live(), budget)
	was := debug.SetGCPercent(cur)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				debug.SetGCPercent(was)
				return
			case <-t.C:
				if p := Percent(live(), budget); p != cur {
					debug.SetGCPercent(p)
					cur = p
				}
			}
		}
	}()
}
