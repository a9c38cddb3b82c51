// Package fairshare shares a pool's concurrency between the organisations,
// teams and projects of an account tree: reservations with borrowing,
// ordered by Slurm's Fair Tree, mapped to vLLM priorities.
//
// It is pure: standard library only, no I/O, no goroutines, time always
// passed in. See DESIGN.md, "Fair share".
//
// # Reservations
//
// A pool has a capacity C (the concurrency it sustains without preemption).
// C is apportioned over the organisations by their shares with the
// largest-remainder method (Apportion), each organisation's reservation over
// its teams, each team's over its projects. Shares among siblings are used
// as they are when they sum to at most 1 (configuration fractions such as
// 0.8125 / 0.1875; the rest stays unreserved) and normalised among them
// (share / Σ shares) when they sum to more than 1 (Slurm integers such as
// 13 / 3 or 60 / 40). A node with Shares 0 gets no reservation: it only
// borrows. A UseParent (Fairshare=parent) node has no level of its own: its
// children are apportioned, and ranked, with its parent's children.
//
// # Priorities
//
// "Within" counts the requests in flight that were admitted within a
// node's reservation, not all requests in flight. For a request whose path
// is org → team [→ project]:
//
//	leaf within its own reservation                      → class (0 interactive, 1 batch)
//	  (the team, or the project when the path has one: within < reservation); it
//	  counts as within for the leaf and every ancestor, whose count may then exceed
//	  its reservation: the sibling borrowers become the victims
//	leaf over, organisation within                       → 2 + 2·b + class ∈ [2, 9]
//	  borrowing from a sibling at the highest level below the organisation without
//	  room (or the leaf's); b ∈ 0..3 is that node's Fair Tree rank (LF) among its
//	  siblings; counts as within for the organisation and the levels above it
//	organisation over its reservation                    → 10 + 10·rank + class
//	  rank ∈ 0..9 is the leaf's Fair Tree rank among all leaves of the pool
//	  (competition ranking, compressed to 10 buckets when there are more leaves)
//
// A path whose organisation is not in the tree gets 10 + 10·9 + class.
package fairshare

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Priority bands.
const (
	PriorityClassInteractive = 0   // class of interactive requests
	PriorityClassBatch       = 1   // class of batch requests
	PriorityBandBase         = 2   // first priority of sibling borrowing (2..9)
	PriorityBorrowBase       = 10  // first priority of borrowing from another organisation
	RankBuckets              = 10  // ranks 0..9 for borrowing from another organisation
	BandBuckets              = 4   // ranks 0..3 for borrowing from a sibling
	PriorityUnknown          = 100 // + class: organisation not in the tree
)

// maxDepth is the depth of a Path: organisation, team, project.
const maxDepth = 3

// Node is one account of a pool's fair-share tree. The root is the pool
// itself (Name "", not a real account).
type Node struct {
	Name      string
	Shares    float64 // raw shares among siblings (normalised among them, see the package doc); 0 = no share (only borrows)
	UseParent bool    // Slurm Fairshare=parent: no level of its own, children lifted to the first ancestor with a level
	Children  []*Node
}

// Path names a request's place in the tree: organisation, team, project
// ("" when the key has no project or the project is not in the tree; then
// the team is the leaf).
type Path struct{ Org, Team, Project string }

// UsageEntry is the decayed usage of one account (Path from the
// organisation down; empty for the pool total), for persistence.
type UsageEntry struct {
	Path     []string
	GPUHours float64
}

// Ticket is what Admit counted; pass it to Done exactly once.
type Ticket struct {
	Priority int // the priority to send to the engine

	cells    [maxDepth]*cell
	n        uint8 // cells used
	within   uint8 // bit i: counted as within at cells[i]
	top      bool  // within the organisation's reservation (not borrowing from another organisation)
	admitted bool
}

// Borrowing reports whether the request was admitted over its
// organisation's reservation (priority ≥ PriorityBorrowBase).
func (t Ticket) Borrowing() bool { return t.admitted && !t.top }

// cell holds the live counters of one account; it survives SetTree for
// accounts that stay in the tree, so tickets admitted before stay valid.
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

// pnode is one account in a published tree (immutable once published,
// except for its cell's counters).
type pnode struct {
	id        int
	name      string
	path      []string
	depth     int // 1 organisation, 2 team, 3 project
	parent    *pnode
	effParent *pnode // first ancestor that is not UseParent; nil: the pool
	rawShares float64
	useParent bool
	fraction  float64 // share of the effective parent's reservation (≤1 rule)
	res       int64   // reservation
	children  map[string]*pnode
	ordered   []*pnode
	cell      *cell
}

// tree is an immutable account tree with its reservations.
type tree struct {
	orgs  map[string]*pnode
	nodes []*pnode // pre-order
	top   []*pnode // effective children of the pool
}

// state is what Admit reads: published atomically, never modified.
type state struct {
	tree     *tree
	leafRank []uint8 // by node id: 0..9
	bandRank []uint8 // by node id: 0..3 among effective siblings
	fair     []Result
	rowOf    []int // node id → row in fair
	users    int
	at       time.Time
}

// Pool is the live fair-share state of one gateway pool of capacity C. It is
// safe for concurrent use; Admit, Peek and Done take no global lock (atomics
// and an atomically published immutable snapshot of ranks; Done locks only
// the usage of the accounts it charges); Refresh, SetTree, Snapshot, Usage
// and RestoreUsage serialise on a pool mutex.
type Pool struct {
	capacity int
	halfLife time.Duration

	st        atomic.Pointer[state]
	inflight  atomic.Int64
	borrowing atomic.Int64
	root      cell // pool total usage

	mu    sync.Mutex
	cells map[string]*cell // by path key, reused across SetTree
}

// NewPool returns the state of a pool of capacity C (sustainable
// concurrency) over the tree under root (nil: no accounts), with usage
// decaying with halfLife (≤ 0: DefaultHalfLife).
func NewPool(capacity int, root *Node, halfLife time.Duration, now time.Time) *Pool {
	if halfLife <= 0 {
		halfLife = DefaultHalfLife
	}
	p := &Pool{capacity: max(capacity, 0), halfLife: halfLife, cells: map[string]*cell{}}
	p.SetTree(root, now)
	return p
}

// Capacity is C.
func (p *Pool) Capacity() int { return p.capacity }

// SetTree installs a new tree or new shares (a Slurm sync): reservations are
// recomputed; the usage and in-flight counts of accounts that survive (same
// path) are kept, and tickets admitted before stay valid for Done.
func (p *Pool) SetTree(root *Node, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &tree{orgs: map[string]*pnode{}}
	cells := map[string]*cell{}
	var build func(n *Node, parent *pnode, depth int) *pnode
	build = func(n *Node, parent *pnode, depth int) *pnode {
		pn := &pnode{id: len(t.nodes), name: n.Name, depth: depth, parent: parent,
			rawShares: n.Shares, useParent: n.UseParent, children: map[string]*pnode{}}
		if parent != nil {
			pn.path = append(append([]string(nil), parent.path...), n.Name)
		} else {
			pn.path = []string{n.Name}
		}
		key := pathKey(pn.path)
		pn.cell = p.cells[key]
		if pn.cell == nil {
			pn.cell = new(cell)
		}
		cells[key] = pn.cell
		t.nodes = append(t.nodes, pn)
		if depth < maxDepth {
			for _, c := range n.Children {
				if c == nil || c.Name == "" {
					continue
				}
				if _, dup := pn.children[c.Name]; dup {
					continue
				}
				cn := build(c, pn, depth+1)
				pn.children[c.Name] = cn
				pn.ordered = append(pn.ordered, cn)
			}
		}
		return pn
	}
	var orgs []*pnode
	if root != nil {
		for _, c := range root.Children {
			if c == nil || c.Name == "" {
				continue
			}
			if _, dup := t.orgs[c.Name]; dup {
				continue
			}
			o := build(c, nil, 1)
			t.orgs[c.Name] = o
			orgs = append(orgs, o)
		}
	}
	p.cells = cells
	// Effective parents and reservations, top-down.
	t.top = lift(orgs)
	apportionLevel(t.top, int64(p.capacity), nil)
	for _, n := range t.nodes {
		if !n.useParent {
			apportionLevel(lift(n.ordered), n.res, n)
		}
	}
	p.publish(t, now)
}

// lift returns the nodes with every UseParent node replaced by its own
// lifted children (a level's effective members).
func lift(nodes []*pnode) []*pnode {
	var out []*pnode
	for _, n := range nodes {
		if n.useParent {
			out = append(out, lift(n.ordered)...)
		} else {
			out = append(out, n)
		}
	}
	return out
}

func apportionLevel(level []*pnode, total int64, parent *pnode) {
	shares := make([]float64, len(level))
	for i, n := range level {
		shares[i] = n.rawShares
		n.effParent = parent
	}
	frac := normalise(shares)
	res := Apportion(int(total), frac)
	for i, n := range level {
		n.fraction = frac[i]
		n.res = int64(res[i])
	}
}

func pathKey(path []string) string {
	k := ""
	for i, s := range path {
		if i > 0 {
			k += "\x00"
		}
		k += s
	}
	return k
}

// resolve finds the real chain of a path: organisation, team if in the
// tree, project if in the tree. n = 0 when the organisation is unknown.
func (t *tree) resolve(path Path) (chain [maxDepth]*pnode, n int) {
	o := t.orgs[path.Org]
	if o == nil {
		return chain, 0
	}
	chain[0], n = o, 1
	tm := o.children[path.Team]
	if tm == nil {
		return chain, n
	}
	chain[1], n = tm, 2
	if path.Project != "" {
		if pr := tm.children[path.Project]; pr != nil {
			chain[2], n = pr, 3
		}
	}
	return chain, n
}

// decision is the outcome of the priority rules for one chain.
type decision struct {
	priority int
	within   uint8 // bits of the real chain counted as within
	top      bool
}

// Admit decides the priority of a request of class 0 (interactive) or 1
// (batch) and counts it in flight (and as within where it is). Pass the
// ticket to Done when the request ends. It does not allocate.
func (p *Pool) Admit(path Path, class int) Ticket {
	class = clampClass(class)
	st := p.st.Load()
	chain, n := st.tree.resolve(path)
	t := Ticket{admitted: true, n: uint8(n)}
	p.inflight.Add(1)
	for i := 0; i < n; i++ {
		t.cells[i] = chain[i].cell
		chain[i].cell.inflight.Add(1)
	}
	d := decide(st, chain, n, class, true)
	t.Priority, t.within, t.top = d.priority, d.within, d.top
	if !d.top {
		p.borrowing.Add(1)
	}
	return t
}

// Peek returns the priority Admit would give now, without admitting (for a
// gateway-side queue, to re-prioritise requests not yet sent).
func (p *Pool) Peek(path Path, class int) int {
	st := p.st.Load()
	chain, n := st.tree.resolve(path)
	return decide(st, chain, n, clampClass(class), false).priority
}

func clampClass(class int) int {
	if class != 0 {
		return 1
	}
	return 0
}

// decide applies the priority rules; with acquire it counts the request as
// within where it is, with CAS loops so that a race never takes a count over
// a reservation (only the leaf-within rule adds to an ancestor past it).
func decide(st *state, chain [maxDepth]*pnode, n, class int, acquire bool) decision {
	// Effective levels: the chain without UseParent nodes, with their index
	// in the real chain.
	var lv [maxDepth]*pnode
	var idx [maxDepth]int
	m := 0
	for i := 0; i < n; i++ {
		if !chain[i].useParent {
			lv[m], idx[m] = chain[i], i
			m++
		}
	}
	if m == 0 {
		if n > 0 {
			return decision{priority: PriorityBorrowBase + RankBuckets*int(st.leafRank[chain[n-1].id]) + class}
		}
		return decision{priority: PriorityUnknown + class}
	}
	// Leaf-within: the deepest level is under its own reservation. Its
	// ancestors count it whatever their counts (they may then exceed their
	// reservations: that is correct, the siblings borrowing from them become
	// the victims). A project under its reservation is thus never ranked
	// behind a sibling project that borrowed its team's slots.
	leaf := lv[m-1]
	var within uint8
	if tryAcquire(leaf, acquire) {
		for i := 0; i < m-1; i++ {
			if acquire {
				lv[i].cell.within.Add(1)
			}
		}
		for i := 0; i < m; i++ {
			within |= 1 << idx[i]
		}
		return decision{priority: class, within: within, top: true}
	}
	// The leaf is over its own reservation. With room in its organisation
	// it borrows from a sibling: the levels below the organisation are taken
	// from the top down while they have room; the first without (or the
	// leaf) is the level at which it borrows, and its band rank among its
	// siblings orders the request.
	if m > 1 && tryAcquire(lv[0], acquire) {
		within |= 1 << idx[0]
		j := 1
		for ; j < m-1; j++ {
			if !tryAcquire(lv[j], acquire) {
				break
			}
			within |= 1 << idx[j]
		}
		b := int(st.bandRank[lv[j].id])
		return decision{priority: PriorityBandBase + 2*b + class, within: within, top: true}
	}
	return decision{priority: PriorityBorrowBase + RankBuckets*int(st.leafRank[chain[n-1].id]) + class}
}

// tryAcquire counts one more within-share request at n if that keeps it
// within its reservation (CAS loop); without acquire it only tests.
func tryAcquire(n *pnode, acquire bool) bool {
	c := &n.cell.within
	for {
		v := c.Load()
		if v >= n.res {
			return false
		}
		if !acquire || c.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// Done releases what Admit counted and charges gpuHours (the cost actually
// consumed, never the time spent waiting) to the leaf, its ancestors and the
// pool, decayed to now. A zero Ticket is ignored. It does not allocate.
func (p *Pool) Done(t Ticket, gpuHours float64, now time.Time) {
	if !t.admitted {
		return
	}
	p.inflight.Add(-1)
	if !t.top {
		p.borrowing.Add(-1)
	}
	charge := gpuHours > 0 && !math.IsInf(gpuHours, 0) && !math.IsNaN(gpuHours)
	for i := 0; i < int(t.n); i++ {
		c := t.cells[i]
		c.inflight.Add(-1)
		if t.within&(1<<i) != 0 {
			c.within.Add(-1)
		}
		if charge {
			c.charge(gpuHours, now, p.halfLife)
		}
	}
	if charge {
		p.root.charge(gpuHours, now, p.halfLife)
	}
}

// Refresh decays usage to now and recomputes the level fairshares and the
// ranks Admit uses. The gateway calls it every second or so, off the hot
// path.
func (p *Pool) Refresh(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.publish(p.st.Load().tree, now)
}

// publish computes Fair Tree over t with usage decayed to now and publishes
// the new state. p.mu must be held.
func (p *Pool) publish(t *tree, now time.Time) {
	st := &state{tree: t, at: now,
		leafRank: make([]uint8, len(t.nodes)), bandRank: make([]uint8, len(t.nodes)),
		rowOf: make([]int, len(t.nodes))}
	// Fair Tree input: the pool is the root; leaves are users.
	root := &TreeNode{Name: "", Usage: p.root.read(now, p.halfLife)}
	tn := make([]*TreeNode, len(t.nodes))
	for _, n := range t.nodes {
		x := &TreeNode{Name: n.name, Shares: n.rawShares, UseParent: n.useParent,
			User: len(n.ordered) == 0, Usage: n.cell.read(now, p.halfLife)}
		tn[n.id] = x
		if n.parent == nil {
			root.Children = append(root.Children, x)
		} else {
			tn[n.parent.id].Children = append(tn[n.parent.id].Children, x)
		}
	}
	st.fair = FairTree(root)
	byNode := map[*TreeNode]int{}
	for i, r := range st.fair {
		byNode[r.Node] = i
		if r.Node.User && i > 0 {
			st.users++
		}
	}
	for _, n := range t.nodes {
		st.rowOf[n.id] = byNode[tn[n.id]]
	}
	// Leaf ranks: competition position among all leaves, bucketed; an inner
	// node (a team with projects, for requests without a project) takes the
	// best rank under it.
	N := st.users
	for i := len(t.nodes) - 1; i >= 0; i-- {
		n := t.nodes[i]
		r := st.fair[st.rowOf[n.id]]
		if r.Node.User {
			st.leafRank[n.id] = bucket(N-r.Rank, N, RankBuckets)
			continue
		}
		best := uint8(RankBuckets - 1)
		for _, c := range n.ordered {
			best = min(best, st.leafRank[c.id])
		}
		st.leafRank[n.id] = best
	}
	// Band ranks among effective siblings, by LF descending.
	groups := map[*pnode][]*pnode{}
	for _, n := range t.nodes {
		if !n.useParent {
			groups[n.effParent] = append(groups[n.effParent], n)
		}
	}
	for _, g := range groups {
		for _, n := range g {
			lf := st.fair[st.rowOf[n.id]].LevelFS
			pos := 0
			for _, o := range g {
				if st.fair[st.rowOf[o.id]].LevelFS > lf {
					pos++
				}
			}
			st.bandRank[n.id] = bucket(pos, len(g), BandBuckets)
		}
	}
	p.st.Store(st)
}

// bucket maps a 0-based competition position among n to 0..k-1: the
// position itself when n ≤ k, ⌊pos·k/n⌋ otherwise.
func bucket(pos, n, k int) uint8 {
	if pos < 0 {
		pos = 0
	}
	if n > k {
		pos = pos * k / n
	}
	return uint8(min(pos, k-1))
}

// Usage returns the decayed usage of every account with usage, and the pool
// total (empty Path), for persistence.
func (p *Pool) Usage(now time.Time) []UsageEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []UsageEntry
	if u := p.root.read(now, p.halfLife); u > 0 {
		out = append(out, UsageEntry{Path: []string{}, GPUHours: u})
	}
	for _, n := range p.st.Load().tree.nodes {
		if u := n.cell.read(now, p.halfLife); u > 0 {
			out = append(out, UsageEntry{Path: append([]string(nil), n.path...), GPUHours: u})
		}
	}
	return out
}

// RestoreUsage replaces the usage of the accounts named in entries (and of
// the pool, empty Path) by the saved usage decayed across the downtime:
// GPUHours · DecayFactor(now − savedAt). Entries for accounts not in the tree
// are ignored. It refreshes the ranks.
func (p *Pool) RestoreUsage(entries []UsageEntry, savedAt, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := DecayFactor(now.Sub(savedAt), p.halfLife)
	st := p.st.Load()
	for _, e := range entries {
		if e.GPUHours < 0 || math.IsNaN(e.GPUHours) || math.IsInf(e.GPUHours, 0) {
			continue
		}
		if len(e.Path) == 0 {
			p.root.set(e.GPUHours*f, now)
			continue
		}
		if c := p.cells[pathKey(e.Path)]; c != nil {
			c.set(e.GPUHours*f, now)
		}
	}
	p.publish(st.tree, now)
}
