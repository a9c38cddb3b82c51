// Package autocap adapts a pool's capacity C to what its engines sustain,
// from the engines' own metrics (pool { capacity = "auto" }). It is pure:
// samples and time are passed in; scraping and applying C are the
// gateway's.
//
// The law. C grows while the engines run what the gateway sends them
// without preempting, without a queue of their own, below the KV-cache
// target, and the pool actually uses C (an idle pool teaches nothing); it
// shrinks when they preempt or queue. A step up goes half the way to where
// the KV usage would reach the target (C × target / usage), a quarter more
// at most,
// a step down goes to what the engines held when they gave out (the
// requests they ran; one less than C when they ran nearly C, half at
// most). After a change C holds for
// Params.Hold, so the engines reach the new load before they are judged
// again. The C at which the engines gave out becomes a ceiling: C grows
// to one below it and stays there, so it settles instead of oscillating
// around the edge; the ceiling is raised by one step after
// Params.CeilingTTL to notice a lighter workload. Preemptions and queues
// count from half of Hold after a change, once the engines hold no more
// than C: before, they are the old C's. A sample that is stale
// or incomplete is unknown: C holds, it is never read as zero load.
package autocap

import (
	"math"
	"time"
)

// Defaults of Params.
const (
	DefaultKVTarget   = 0.9
	DefaultHold       = 10 * time.Second
	DefaultStale      = 15 * time.Second
	DefaultCeilingTTL = 10 * time.Minute
)

// Params are a controller's bounds and tuning.
type Params struct {
	Min, Max int     // bounds of C, 1 ≤ Min ≤ Max
	KVTarget float64 // KV-cache usage to run at (0..1]; default DefaultKVTarget
	// Hold is how long C stays put after a change before the engines are
	// judged again; default DefaultHold.
	Hold time.Duration
	// Stale is how old a sample may be and still count; default
	// DefaultStale.
	Stale time.Duration
	// CeilingTTL is how long the C at which the engines gave out bounds
	// the growth; default DefaultCeilingTTL.
	CeilingTTL time.Duration
}

func (p Params) withDefaults() Params {
	if p.Min < 1 {
		p.Min = 1
	}
	if p.Max < p.Min {
		p.Max = p.Min
	}
	if !(p.KVTarget > 0 && p.KVTarget <= 1) {
		p.KVTarget = DefaultKVTarget
	}
	if p.Hold <= 0 {
		p.Hold = DefaultHold
	}
	if p.Stale <= 0 {
		p.Stale = DefaultStale
	}
	if p.CeilingTTL <= 0 {
		p.CeilingTTL = DefaultCeilingTTL
	}
	return p
}

// Sample is what the pool's engines reported, summed over its upstreams
// (KV: the fullest one).
type Sample struct {
	At       time.Time // when the oldest of its parts was scraped
	Complete bool      // every upstream of the pool answered with the metrics it needs
	Running  float64   // requests the engines run
	Waiting  float64   // requests the engines queue
	// KV is the largest KV-cache usage among the engines, 0..1; NaN when
	// the engines do not report it (llama-server).
	KV float64
	// Preemptions is the sum of the engines' preemption counters (a
	// counter: only its increase counts).
	Preemptions float64
	// InFlight is what the gateway has in flight to the pool (all
	// replicas when shared): whether the pool uses C.
	InFlight int
	// Engines is how many engines the sample sums: when it changes, the
	// preemption counter's step is not read as preemptions.
	Engines int
}

// Decision says why a step left C where it is or moved it.
type Decision int

// Decisions.
const (
	Unknown Decision = iota // stale or incomplete sample: C holds
	Holding                 // within Hold of the last change
	Steady                  // healthy, but not using C or at the target
	Grow                    // healthy and busy below the KV target
	Shrink                  // the engines preempted or queued
)

var decisionNames = [...]string{"unknown", "holding", "steady", "grow", "shrink"}

func (d Decision) String() string { return decisionNames[d] }

// Controller is one pool's capacity controller. It is not safe for
// concurrent use; one goroutine steps it.
type Controller struct {
	p          Params
	c          int
	changed    time.Time // last change of C
	lastPre    float64   // preemption counter last seen; NaN: none yet
	engines    int       // engines of the last sample
	preempted  bool      // preemptions seen since the last change
	queued     int       // consecutive known samples with a queue in the engines
	ceiling    int       // C at which the engines gave out; 0: none
	ceilingSet time.Time
}

// New returns a controller starting at start (clamped to the bounds).
func New(p Params, start int, now time.Time) *Controller {
	p = p.withDefaults()
	return &Controller{p: p, c: clamp(start, p.Min, p.Max), changed: now, lastPre: math.NaN()}
}

// C is the current capacity.
func (c *Controller) C() int { return c.c }

// Params are the controller's parameters, defaults applied.
func (c *Controller) Params() Params { return c.p }

// Set makes C n (clamped), as a change at now: another replica's decision
// taken over, or an operator's.
func (c *Controller) Set(n int, now time.Time) {
	if n = clamp(n, c.p.Min, c.p.Max); n != c.c {
		c.c, c.changed, c.preempted, c.queued = n, now, false, 0
	}
}

func clamp(n, lo, hi int) int { return min(max(n, lo), hi) }

// queueFloor is how many requests the engines may queue without that
// counting as a queue: a request between its arrival and the engine's next
// step is waiting too.
func queueFloor(c int) float64 { return math.Max(1, float64(c)/16) }

// Step judges a sample taken at s.At and returns C and why.
func (c *Controller) Step(s Sample, now time.Time) (int, Decision) {
	if !s.Complete || now.Sub(s.At) > c.p.Stale || math.IsNaN(s.Running) || math.IsNaN(s.Waiting) || math.IsNaN(s.Preemptions) {
		return c.c, Unknown
	}
	// Decisions wait for Hold after a change. What the engines do counts
	// from half of it, once they hold no more than C (the requests a
	// larger C sent have drained): before, it is the old C's doing.
	elapsed := now.Sub(c.changed)
	holding := elapsed < c.p.Hold
	counts := elapsed >= c.p.Hold/2 && s.Running+s.Waiting <= float64(c.c)+queueFloor(c.c)
	if s.Engines != c.engines {
		c.lastPre, c.engines = math.NaN(), s.Engines
	}
	if counts && !math.IsNaN(c.lastPre) && s.Preemptions > c.lastPre {
		c.preempted = true
	} // a counter that went down restarted: only the increase from now counts
	c.lastPre = s.Preemptions
	if counts && s.Waiting > queueFloor(c.c) {
		c.queued++
	} else {
		c.queued = 0
	}
	if c.ceiling > 0 && now.Sub(c.ceilingSet) >= c.p.CeilingTTL {
		c.ceiling, c.ceilingSet = c.ceiling+max(1, c.ceiling/16), now
		if c.ceiling > c.p.Max {
			c.ceiling = 0
		}
	}
	if holding {
		return c.c, Holding
	}
	kv := s.KV
	kvKnown := !math.IsNaN(kv) && kv > 0
	if c.preempted || c.queued >= 2 {
		// What the engines held when they gave out, one less than C at
		// least; one less only when they held nearly C (the edge is near:
		// step down to it, rather than below it and up again).
		n := min(int(math.Floor(s.Running)), c.c-1)
		if s.Running >= float64(c.c)*7/8 {
			n = c.c - 1
		}
		n = max(n, c.c/2)
		if c.ceiling == 0 || c.c < c.ceiling {
			c.ceiling = c.c
		}
		c.ceilingSet = now
		return c.change(n, now, Shrink)
	}
	busy := float64(s.InFlight) >= float64(c.c)-queueFloor(c.c) || s.Running+s.Waiting >= float64(c.c)-queueFloor(c.c)
	if !busy || c.queued > 0 || (kvKnown && kv >= c.p.KVTarget) {
		return c.c, Steady
	}
	n := c.c + max(1, c.c/8) // no KV figure (llama-server): a slot at a time, an eighth at most
	if kvKnown {
		// Half the way to where the KV target would be (a snapshot of
		// the KV usage is noisy), a quarter more at most.
		est := float64(c.c) * c.p.KVTarget / kv
		n = c.c + int(math.Ceil((est-float64(c.c))/2))
		n = min(n, c.c+max(1, c.c/4))
	}
	if c.ceiling > 0 {
		n = min(n, c.ceiling-1)
	}
	if n <= c.c {
		return c.c, Steady
	}
	return c.change(n, now, Grow)
}

func (c *Controller) change(n int, now time.Time, d Decision) (int, Decision) {
	n = clamp(n, c.p.Min, c.p.Max)
	if n == c.c {
		return c.c, Steady
	}
	c.c, c.changed, c.preempted, c.queued = n, now, false, 0
	return c.c, d
}
