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

	chain    *Chain // in the tree the request was admitted in (immutable)
	place    Placement
	admitted bool
}

// Borrowing reports whether the request was admitted over its
// organisation's reservation (priority ≥ PriorityBorrowBase).
func (t Ticket) Borrowing() bool { return t.admitted && !t.place.Top }

// pnode is one account in a published tree (immutable once published,
// except for the counters in its slot).
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
	slot      Slot             // the account's counters
	chain     Chain            // organisation … this account, for the counters
	anc       [MaxDepth]*pnode // the same accounts
}

// tree is an immutable account tree with its reservations.
type tree struct {
	byKey map[string]*pnode // by PathKey
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
// safe for concurrent use. Its counters (in flight, within share, usage)
// are a Counters: MemCounters for one gateway, a shared implementation for
// several. Admit, Peek and Done take no pool lock (they read an atomically
// published immutable snapshot of the tree and its ranks); Refresh,
// SetTree, Snapshot, Usage and RestoreUsage serialise on a pool mutex.
type Pool struct {
	capacity int
	ctr      Counters

	st atomic.Pointer[state]
	mu sync.Mutex
}

// NewPool returns the state of a pool of capacity C (sustainable
// concurrency) over the tree under root (nil: no accounts), with usage
// decaying with halfLife (≤ 0: DefaultHalfLife), counted in this process
// (MemCounters).
func NewPool(capacity int, root *Node, halfLife time.Duration, now time.Time) *Pool {
	return NewPoolWith(capacity, root, NewMemCounters(halfLife), now)
}

// NewPoolWith is NewPool with the given counters, which decay the usage.
func NewPoolWith(capacity int, root *Node, ctr Counters, now time.Time) *Pool {
	p := &Pool{capacity: max(capacity, 0), ctr: ctr}
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
	t := &tree{orgs: map[string]*pnode{}, byKey: map[string]*pnode{}}
	var build func(n *Node, parent *pnode, depth int) *pnode
	build = func(n *Node, parent *pnode, depth int) *pnode {
		pn := &pnode{id: len(t.nodes), name: n.Name, depth: depth, parent: parent,
			rawShares: n.Shares, useParent: n.UseParent, children: map[string]*pnode{}}
		if parent != nil {
			pn.path = append(append([]string(nil), parent.path...), n.Name)
		} else {
			pn.path = []string{n.Name}
		}
		key := PathKey(pn.path)
		pn.slot = p.ctr.Bind(key)
		t.byKey[key] = pn
		t.nodes = append(t.nodes, pn)
		if depth < MaxDepth {
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
	// Effective parents and reservations, top-down.
	t.top = lift(orgs)
	apportionLevel(t.top, int64(p.capacity), nil)
	for _, n := range t.nodes {
		if !n.useParent {
			apportionLevel(lift(n.ordered), n.res, n)
		}
	}
	// Each account's chain, for the counters (parents come first).
	for _, n := range t.nodes {
		if n.parent != nil {
			n.chain, n.anc = n.parent.chain, n.parent.anc
		}
		i := n.chain.N
		n.chain.Slots[i], n.chain.Res[i], n.chain.Level[i] = n.slot, n.res, !n.useParent
		n.anc[i] = n
		n.chain.N++
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

// resolve finds the deepest account of a path in the tree: the project if
// in the tree, else the team if in the tree, else the organisation; nil
// when the organisation is unknown.
func (t *tree) resolve(path Path) *pnode {
	o := t.orgs[path.Org]
	if o == nil {
		return nil
	}
	tm := o.children[path.Team]
	if tm == nil {
		return o
	}
	if path.Project != "" {
		if pr := tm.children[path.Project]; pr != nil {
			return pr
		}
	}
	return tm
}

// noChain is the chain of a path whose organisation is unknown.
var noChain Chain

// Admit decides the priority of a request of class 0 (interactive) or 1
// (batch) and counts it in flight (and as within where it is placed). Pass
// the ticket to Done when the request ends. It does not allocate.
func (p *Pool) Admit(path Path, class int) Ticket {
	st := p.st.Load()
	leaf := st.tree.resolve(path)
	c := &noChain
	if leaf != nil {
		c = &leaf.chain
	}
	pl := p.ctr.Admit(c)
	return Ticket{Priority: st.priority(leaf, pl, clampClass(class)), chain: c, place: pl, admitted: true}
}

// Peek returns the priority Admit would give now, without admitting (for a
// gateway-side queue, to re-prioritise requests not yet sent).
func (p *Pool) Peek(path Path, class int) int {
	st := p.st.Load()
	leaf := st.tree.resolve(path)
	c := &noChain
	if leaf != nil {
		c = &leaf.chain
	}
	return st.priority(leaf, p.ctr.Peek(c), clampClass(class))
}

func clampClass(class int) int {
	if class != 0 {
		return 1
	}
	return 0
}

// priority maps a placement of a request at leaf to its priority (see the
// package documentation) with the ranks of this state.
func (st *state) priority(leaf *pnode, pl Placement, class int) int {
	switch {
	case leaf == nil:
		return PriorityUnknown + class
	case pl.Top && pl.Borrow < 0:
		return class
	case pl.Top:
		return PriorityBandBase + 2*int(st.bandRank[leaf.anc[pl.Borrow].id]) + class
	default:
		return PriorityBorrowBase + RankBuckets*int(st.leafRank[leaf.id]) + class
	}
}

// Done releases what Admit counted and charges gpuHours (the cost actually
// consumed, never the time spent waiting) to the leaf, its ancestors and the
// pool, decayed to now. A zero Ticket is ignored. It does not allocate.
func (p *Pool) Done(t Ticket, gpuHours float64, now time.Time) {
	if !t.admitted {
		return
	}
	p.ctr.Release(t.chain, t.place, gpuHours, now)
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
	root := &TreeNode{Name: "", Usage: p.ctr.Usage(PoolSlot, now)}
	tn := make([]*TreeNode, len(t.nodes))
	for _, n := range t.nodes {
		x := &TreeNode{Name: n.name, Shares: n.rawShares, UseParent: n.useParent,
			User: len(n.ordered) == 0, Usage: p.ctr.Usage(n.slot, now)}
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
	if u := p.ctr.Usage(PoolSlot, now); u > 0 {
		out = append(out, UsageEntry{Path: []string{}, GPUHours: u})
	}
	for _, n := range p.st.Load().tree.nodes {
		if u := p.ctr.Usage(n.slot, now); u > 0 {
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
	f := DecayFactor(now.Sub(savedAt), p.ctr.HalfLife())
	st := p.st.Load()
	for _, e := range entries {
		if e.GPUHours < 0 || math.IsNaN(e.GPUHours) || math.IsInf(e.GPUHours, 0) {
			continue
		}
		if len(e.Path) == 0 {
			p.ctr.SetUsage(PoolSlot, e.GPUHours*f, now)
			continue
		}
		if n := st.tree.byKey[PathKey(e.Path)]; n != nil {
			p.ctr.SetUsage(n.slot, e.GPUHours*f, now)
		}
	}
	p.publish(st.tree, now)
}
