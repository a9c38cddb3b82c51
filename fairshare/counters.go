package fairshare

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// MaxDepth is the deepest chain of a tree: an account (or user
// association) at most MaxDepth levels below the pool. Placement keeps one
// bit per level; a Slurm tree is a handful of levels deep, and nodes deeper
// than this are left out of a pool's tree (SetTree).
const MaxDepth = 64

// Slot names one account's counters in a Counters (see Counters.Bind).
// PoolSlot holds the pool's own usage.
type Slot int32

// PoolSlot is the slot of the pool itself (the path key "").
const PoolSlot Slot = 0

// Chain is a request's accounts as the counters see them: the
// organisation first, the leaf (an account or a user association) last,
// any number of levels (at most MaxDepth). A Pool computes the chain of
// every node when it installs a tree, never on the request path: the
// slices are built once and only read afterwards.
type Chain struct {
	N     int     // nodes in the chain; 0 when the organisation is unknown
	Slots []Slot  // each node's counters (len N)
	Res   []int64 // each node's reservation (len N)
	// Level is true for the accounts with a level of their own: not
	// Fairshare=parent, not a user association. Only those are placed.
	Level []bool
	// Capped is true when an account of the chain caps its requests in
	// flight (Slurm's GrpTRES, Node.GPULimit): Pool.Admit checks the caps.
	Capped bool
	// Caps is each account's cap on its subtree's requests in flight
	// (len N); −1: none.
	Caps []int64
}

// Placement is where Place puts a request.
type Placement struct {
	// Within has bit i set when the request counts within the reservation
	// of the chain's account i.
	Within uint64
	// Room has bit i set for the accounts whose room (within < reservation)
	// the placement relies on: an implementation counts the request within
	// there only while that still holds, and places it again otherwise.
	// The other Within accounts count it whatever their counts.
	Room uint64
	// Top is true when the request is within its organisation's
	// reservation: it does not borrow from another organisation.
	Top bool
	// Borrow is, for a request within its organisation but over its own
	// reservation, the chain index of the account at which it borrows from
	// a sibling (the first level from the top without room, or the leaf);
	// -1 otherwise.
	Borrow int8
}

// Place is the reservation rule, pure: given the requests in flight within
// the reservation of each account of c (within[i] for c's account i), it
// says which accounts count one more request as within. Only accounts with
// a level of their own are placed; with L the deepest of them:
//
//   - L has room (within < reservation): within at every level; L is
//     relied on, its ancestors count it whatever their counts (they may
//     then exceed their reservations: the siblings borrowing from them
//     become the victims). Top, Borrow −1.
//   - else, with two levels or more, the organisation level has room: within
//     at the organisation and at each following level while it has room;
//     all of them relied on. Borrow is the first level without room. Top.
//   - else: within nowhere, not Top: it borrows from another organisation.
//
// Counters implementations apply it atomically with the counts they read
// (MemCounters with compare-and-swap; a shared store in one script).
func Place(c *Chain, within []int64) Placement {
	p := Placement{Borrow: -1}
	first, leaf := -1, -1
	for i := 0; i < c.N; i++ {
		if c.Level[i] {
			if first < 0 {
				first = i
			}
			leaf = i
		}
	}
	if leaf < 0 {
		return p
	}
	room := func(i int) bool { return within[i] < c.Res[i] }
	if room(leaf) {
		for i := first; i <= leaf; i++ {
			if c.Level[i] {
				p.Within |= 1 << i
			}
		}
		p.Room, p.Top = 1<<leaf, true
		return p
	}
	if first == leaf || !room(first) {
		return p
	}
	p.Top = true
	p.Within, p.Room = 1<<first, 1<<first
	j := c.nextLevel(first)
	for ; j != leaf && room(j); j = c.nextLevel(j) {
		p.Within |= 1 << j
		p.Room |= 1 << j
	}
	p.Borrow = int8(j)
	return p
}

// nextLevel is the index of the first account with a level after i (i
// must have one after it).
func (c *Chain) nextLevel(i int) int {
	for i++; !c.Level[i]; i++ {
	}
	return i
}

// withinBuf is the stack buffer for the within counts of a chain: trees
// deeper than this (rare) read them into a slice of their own.
const withinBuf = 16

// readWithin reads the within counts of c's accounts into buf (or a new
// slice when c is deeper than buf).
func readWithin(cells []*cell, c *Chain, buf *[withinBuf]int64) []int64 {
	w := buf[:]
	if c.N > withinBuf {
		w = make([]int64, c.N)
	}
	w = w[:c.N]
	for i := range w {
		w[i] = cells[c.Slots[i]].within.Load()
	}
	return w
}

// Counters keeps what a pool's admissions share: the requests in flight at
// the pool and at each account, those of them within each account's
// reservation, and the decayed usage. MemCounters keeps them in this
// process, for one gateway; an implementation over a shared store lets
// several replicas keep one set. Implementations are safe for concurrent
// use.
type Counters interface {
	// Bind returns the slot of the account with the given path key
	// (PathKey), the same slot for the same key for the life of the
	// Counters; "" is PoolSlot. Pools call it when they install a tree,
	// never on the request path.
	Bind(key string) Slot
	// Admit counts one request in flight at the pool and at every account
	// of c and, atomically with the within counts it reads, places it with
	// Place and counts it within where placed.
	Admit(c *Chain) Placement
	// Peek places a request with Place on the current counts, counting
	// nothing.
	Peek(c *Chain) Placement
	// PeekAll is Peek of every chain of cs into out (len(out) ≥ len(cs)),
	// in one read of the counts (a queue's dispatch re-places all its
	// waiting leaves at once).
	PeekAll(cs []*Chain, out []Placement)
	// Release undoes an Admit of c placed at p and charges gpuHours (only
	// when finite and > 0) to the accounts of c and to the pool, decayed to
	// now.
	Release(c *Chain, p Placement, gpuHours float64, now time.Time)
	// Counts returns the requests in flight at s and, of them, those within
	// its reservation.
	Counts(s Slot) (inflight, within int64)
	// PoolCounts returns the requests in flight in the pool and, of them,
	// those borrowing from another organisation (placed not Top).
	PoolCounts() (inflight, borrowing int64)
	// Usage returns s's usage in GPU-hours decayed to now.
	Usage(s Slot, now time.Time) float64
	// SetUsage replaces s's usage by gpuHours as of now (restoring saved
	// usage).
	SetUsage(s Slot, gpuHours float64, now time.Time)
	// HalfLife is the half-life the usage decays with.
	HalfLife() time.Duration
}

// PathKey is the key an account's counters are bound under: its path from
// the organisation down, joined by NUL ("" for the pool).
func PathKey(path []string) string {
	k := ""
	for i, s := range path {
		if i > 0 {
			k += "\x00"
		}
		k += s
	}
	return k
}

// MemCounters is Counters in this process's memory: atomics per account,
// placement by compare-and-swap, usage under a per-account mutex. Admit,
// Peek and Release take no global lock and do not allocate (for chains up
// to 16 nodes deep; a deeper chain reads its counts into a slice).
type MemCounters struct {
	halfLife time.Duration

	inflight  atomic.Int64
	borrowing atomic.Int64
	cells     atomic.Pointer[[]*cell] // by slot; append-only, a new header published on Bind

	mu   sync.Mutex // Bind
	keys map[string]Slot
}

var _ Counters = (*MemCounters)(nil)

// NewMemCounters returns empty counters whose usage decays with halfLife
// (≤ 0: DefaultHalfLife).
func NewMemCounters(halfLife time.Duration) *MemCounters {
	if halfLife <= 0 {
		halfLife = DefaultHalfLife
	}
	m := &MemCounters{halfLife: halfLife, keys: map[string]Slot{}}
	cells := []*cell{new(cell)}
	m.cells.Store(&cells)
	m.keys[""] = PoolSlot
	return m
}

// Bind implements Counters.
func (m *MemCounters) Bind(key string) Slot {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.keys[key]; ok {
		return s
	}
	// Appending past the published length never touches what readers of
	// an earlier header index, so the backing array grows amortised: a
	// tree of n new accounts costs O(n), not O(n²).
	cells := append(*m.cells.Load(), new(cell))
	s := Slot(len(cells) - 1)
	m.keys[key] = s
	m.cells.Store(&cells)
	return s
}

// Admit implements Counters.
func (m *MemCounters) Admit(c *Chain) Placement {
	cells := *m.cells.Load()
	m.inflight.Add(1)
	for i := 0; i < c.N; i++ {
		cells[c.Slots[i]].inflight.Add(1)
	}
	for {
		var buf [withinBuf]int64
		p := Place(c, readWithin(cells, c, &buf))
		if m.take(cells, c, p) {
			if !p.Top {
				m.borrowing.Add(1)
			}
			return p
		}
	}
}

// take counts p's within accounts: first those relied on, each only while
// it has room (a compare-and-swap loop), then the others. When one relied
// on has no room any more, what was taken is given back and it returns
// false: Admit places again on fresh counts.
func (m *MemCounters) take(cells []*cell, c *Chain, p Placement) bool {
	var taken uint64
	for i := 0; i < c.N; i++ {
		if p.Room&(1<<i) == 0 {
			continue
		}
		if !tryAcquire(&cells[c.Slots[i]].within, c.Res[i]) {
			for j := 0; j < c.N; j++ {
				if taken&(1<<j) != 0 {
					cells[c.Slots[j]].within.Add(-1)
				}
			}
			return false
		}
		taken |= 1 << i
	}
	for i := 0; i < c.N; i++ {
		if p.Within&^p.Room&(1<<i) != 0 {
			cells[c.Slots[i]].within.Add(1)
		}
	}
	return true
}

// tryAcquire adds one to v if that keeps it at most res.
func tryAcquire(v *atomic.Int64, res int64) bool {
	for {
		x := v.Load()
		if x >= res {
			return false
		}
		if v.CompareAndSwap(x, x+1) {
			return true
		}
	}
}

// Peek implements Counters.
func (m *MemCounters) Peek(c *Chain) Placement {
	cells := *m.cells.Load()
	var buf [withinBuf]int64
	return Place(c, readWithin(cells, c, &buf))
}

// PeekAll implements Counters.
func (m *MemCounters) PeekAll(cs []*Chain, out []Placement) {
	for i, c := range cs {
		out[i] = m.Peek(c)
	}
}

// Release implements Counters.
func (m *MemCounters) Release(c *Chain, p Placement, gpuHours float64, now time.Time) {
	cells := *m.cells.Load()
	m.inflight.Add(-1)
	if !p.Top {
		m.borrowing.Add(-1)
	}
	charge := gpuHours > 0 && !math.IsInf(gpuHours, 0) && !math.IsNaN(gpuHours)
	for i := 0; i < c.N; i++ {
		x := cells[c.Slots[i]]
		x.inflight.Add(-1)
		if p.Within&(1<<i) != 0 {
			x.within.Add(-1)
		}
		if charge {
			x.charge(gpuHours, now, m.halfLife)
		}
	}
	if charge {
		cells[PoolSlot].charge(gpuHours, now, m.halfLife)
	}
}

// Counts implements Counters.
func (m *MemCounters) Counts(s Slot) (inflight, within int64) {
	x := (*m.cells.Load())[s]
	return x.inflight.Load(), x.within.Load()
}

// PoolCounts implements Counters.
func (m *MemCounters) PoolCounts() (inflight, borrowing int64) {
	return m.inflight.Load(), m.borrowing.Load()
}

// Usage implements Counters.
func (m *MemCounters) Usage(s Slot, now time.Time) float64 {
	return (*m.cells.Load())[s].read(now, m.halfLife)
}

// SetUsage implements Counters.
func (m *MemCounters) SetUsage(s Slot, gpuHours float64, now time.Time) {
	(*m.cells.Load())[s].set(gpuHours, now)
}

// HalfLife implements Counters.
func (m *MemCounters) HalfLife() time.Duration { return m.halfLife }

// cell holds the live counters of one account.
type cell struct {
	inflight atomic.Int64
	within   atomic.Int64

	mu    sync.Mutex
	usage float64   // GPU-hours, decayed to asOf
	asOf  time.Time // zero: no usage yet
}

// charge adds g GPU-hours at time now, decaying what is there to now first
// (or, if now is before asOf, adding g already decayed to asOf).
func (c *cell) charge(g float64, now time.Time, hl time.Duration) {
	c.mu.Lock()
	switch {
	case c.asOf.IsZero():
		c.usage, c.asOf = g, now
	case now.After(c.asOf):
		c.usage = c.usage*DecayFactor(now.Sub(c.asOf), hl) + g
		c.asOf = now
	default:
		c.usage += g * DecayFactor(c.asOf.Sub(now), hl)
	}
	c.mu.Unlock()
}

// read returns the usage decayed to now.
func (c *cell) read(now time.Time, hl time.Duration) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asOf.IsZero() {
		return 0
	}
	if now.After(c.asOf) {
		c.usage *= DecayFactor(now.Sub(c.asOf), hl)
		c.asOf = now
	}
	return c.usage
}

func (c *cell) set(u float64, now time.Time) {
	c.mu.Lock()
	c.usage, c.asOf = u, now
	c.mu.Unlock()
}
