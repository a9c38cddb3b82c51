// Package fairshare shares a pool's concurrency between the organisations,
// teams and projects of an account tree: reservations with borrowing,
// ordered by Slurm's Fair Tree, mapped to vLLM priorities.
//
// It is pure: standard library only, no I/O, no goroutines, time always
// passed in. README.md, "Fair share", explains the rules for an operator.
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
	"fmt"
	"math"
	"strings"
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

// Node is one account of a pool's fair-share tree, or one user
// association (User true: a leaf). The root is the pool itself (Name "",
// not a real account); user associations directly under it are Slurm
// root's own (root/root), siblings of the organisations.
//
// Accounts nest to any depth (up to MaxDepth). User associations are
// normalised as siblings of their account's sub-accounts and ranked by Fair
// Tree exactly as sshare shows them, but hold no reservation of their own:
// reservations are apportioned over accounts only (see the package doc).
type Node struct {
	Name      string
	Shares    float64 // raw shares among siblings (normalised among them, see the package doc); 0 = no share (only borrows)
	UseParent bool    // Slurm Fairshare=parent: no level of its own, children lifted to the first ancestor with a level
	// User marks a user association (Name is the user): a leaf, ranked by
	// Fair Tree; its Children are ignored.
	User bool
	// Partition is a user association's partition ("" for all): Slurm
	// may have several associations of one user in one account.
	Partition string
	// GPULimit, when HasGPULimit, is Slurm's GrpTRES=gres/gpu=N of the
	// account: at most floor(N / the pool's GPUs × C) of its subtree's
	// requests are in flight at once (at least 1 when N > 0, at most C).
	// A pool whose GPUs are unknown (0) enforces no such cap.
	GPULimit    int64
	HasGPULimit bool
	Children    []*Node
}

// Path names a request's place in the tree: organisation, team, project
// ("" when the key has no project or the project is not in the tree; then
// the team is the account), and the key's owner, a Slurm user. The
// request counts at the owner's user association (partition "") in that
// account when the tree has one, else at the account itself.
type Path struct{ Org, Team, Project, User string }

// UserElem is the Path element (in UsageEntry.Path and PathKey) of a user
// association: a leading 0x01 keeps it apart from any account name.
func UserElem(user, partition string) string {
	if partition == "" {
		return "\x01" + user
	}
	return "\x01" + user + "\x01" + partition
}

// UsageEntry is the decayed usage of one account (Path from the
// organisation down; empty for the pool total), for persistence.
type UsageEntry struct {
	Path     []string
	GPUHours float64
}

// Ticket is what Admit counted; pass it to Done exactly once.
type Ticket struct {
	Priority int // the priority to send to the engine
	// Capped names the account whose in-flight cap (Node.GPULimit) the
	// request would exceed: Admit then admitted nothing (Done is a no-op).
	Capped string

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
	depth     int // 1 organisation, 2 team, 3 and deeper project (a user association: its account's depth + 1)
	user      bool
	partition string
	parent    *pnode
	effParent *pnode // first ancestor that is not UseParent; nil: the pool
	rawShares float64
	useParent bool
	fraction  float64           // share of the effective parent's reservation (≤1 rule)
	res       int64             // reservation
	children  map[string]*pnode // sub-accounts by name
	users     map[string]*pnode // user associations by user (partition "", else the first listed)
	ordered   []*pnode          // children in input order, users included
	slot      Slot              // the node's counters
	cap       int64             // most requests of the subtree in flight (GrpTRES); -1: none
	chain     Chain             // organisation … this node, for the counters
	anc       []*pnode          // the same nodes
}

// tree is an immutable account tree with its reservations.
type tree struct {
	byKey  map[string]*pnode // by PathKey
	orgs   map[string]*pnode
	accts  map[string]*pnode // every account by name (Slurm account names are unique)
	nodes  []*pnode          // pre-order
	top    []*pnode          // effective children of the pool (accounts)
	tops   []*pnode          // the pool's children in input order (organisations and root's users)
	hasUsr bool              // the tree has user associations
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
	capacity atomic.Int64 // C; written with mu held
	gpus     int          // the pool's GPUs, for the GrpTRES caps; 0: unknown, no cap
	ctr      Counters
	root     *Node // the tree last installed (mu), for SetCapacity

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
	return NewPoolGPUs(capacity, 0, root, ctr, now)
}

// NewPoolGPUs is NewPoolWith for a pool of gpus GPUs, which turns the
// accounts' GPU limits (Node.GPULimit) into caps on their requests in
// flight; gpus ≤ 0: no cap.
func NewPoolGPUs(capacity, gpus int, root *Node, ctr Counters, now time.Time) *Pool {
	p := &Pool{gpus: max(gpus, 0), ctr: ctr}
	p.capacity.Store(int64(max(capacity, 0)))
	p.SetTree(root, now)
	return p
}

// inFlightCap is the cap of an account with GPU limit gpus (GrpTRES) in a
// pool of poolGPUs GPUs and capacity c: floor(gpus / poolGPUs × c), at
// least 1 when gpus > 0, at most c; -1 (none) without a limit or without
// the pool's GPUs. It is llmflow.GPULimits.InFlightCap's rule.
func inFlightCap(has bool, gpus int64, poolGPUs, c int) int64 {
	if !has || poolGPUs <= 0 || c <= 0 {
		return -1
	}
	if gpus >= int64(poolGPUs) {
		return int64(c)
	}
	n := int64(math.Floor(float64(gpus) / float64(poolGPUs) * float64(c)))
	if n < 1 && gpus > 0 {
		n = 1
	}
	return max(n, 0)
}

// Capacity is C.
func (p *Pool) Capacity() int { return int(p.capacity.Load()) }

// SetCapacity changes C (capacity = "auto"): the reservations and GPU caps
// are apportioned again over the same tree, as SetTree would; usage,
// in-flight counts and tickets admitted before are kept.
func (p *Pool) SetCapacity(capacity int, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if int64(max(capacity, 0)) == p.capacity.Load() {
		return
	}
	p.capacity.Store(int64(max(capacity, 0)))
	p.setTree(p.root, now)
}

// SetTree installs a new tree or new shares (a Slurm sync): reservations are
// recomputed; the usage and in-flight counts of accounts that survive (same
// path) are kept, and tickets admitted before stay valid for Done.
func (p *Pool) SetTree(root *Node, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setTree(root, now)
}

// setTree is SetTree with mu held.
func (p *Pool) setTree(root *Node, now time.Time) {
	p.root = root
	capacity := int(p.capacity.Load())
	t := &tree{orgs: map[string]*pnode{}, byKey: map[string]*pnode{}, accts: map[string]*pnode{}}
	// add builds n under parent (nil: the pool) unless it is unnamed, a
	// duplicate or too deep, and returns it.
	var add func(n *Node, parent *pnode, depth int) *pnode
	add = func(n *Node, parent *pnode, depth int) *pnode {
		if n == nil || n.Name == "" || depth > MaxDepth {
			return nil
		}
		elem := n.Name
		if n.User {
			elem = UserElem(n.Name, n.Partition)
		} else if _, dup := t.accts[n.Name]; dup {
			return nil // account names are unique across the tree
		}
		var path []string
		if parent != nil {
			path = append(append(make([]string, 0, len(parent.path)+1), parent.path...), elem)
		} else {
			path = []string{elem}
		}
		key := PathKey(path)
		if _, dup := t.byKey[key]; dup {
			return nil
		}
		pn := &pnode{id: len(t.nodes), name: n.Name, path: path, depth: depth, parent: parent,
			user: n.User, partition: n.Partition, rawShares: n.Shares, useParent: n.UseParent,
			cap: inFlightCap(n.HasGPULimit, n.GPULimit, p.gpus, capacity)}
		pn.slot = p.ctr.Bind(key)
		t.byKey[key] = pn
		t.nodes = append(t.nodes, pn)
		if n.User {
			t.hasUsr = true
			return pn
		}
		t.accts[n.Name] = pn
		pn.children, pn.users = map[string]*pnode{}, map[string]*pnode{}
		for _, c := range n.Children {
			cn := add(c, pn, depth+1)
			if cn == nil {
				continue
			}
			pn.ordered = append(pn.ordered, cn)
			switch {
			case !cn.user:
				pn.children[cn.name] = cn
			case pn.users[cn.name] == nil || cn.partition == "" && pn.users[cn.name].partition != "":
				pn.users[cn.name] = cn
			}
		}
		return pn
	}
	var orgs []*pnode
	if root != nil {
		for _, c := range root.Children {
			n := add(c, nil, 1)
			if n == nil {
				continue
			}
			t.tops = append(t.tops, n)
			if !n.user {
				t.orgs[n.name] = n
				orgs = append(orgs, n)
			}
		}
	}
	// Effective parents and reservations, top-down, over accounts only.
	t.top = lift(orgs)
	apportionLevel(t.top, int64(capacity), nil)
	for _, n := range t.nodes {
		if !n.useParent && !n.user {
			apportionLevel(lift(n.ordered), n.res, n)
		} else if n.user {
			n.effParent = effParent(n)
		}
	}
	// Each node's chain, for the counters (parents come first): built once
	// here so that Admit only reads it.
	for _, n := range t.nodes {
		k := 1
		if n.parent != nil {
			k = n.parent.chain.N + 1
		}
		c := Chain{N: k, Slots: make([]Slot, k), Res: make([]int64, k), Level: make([]bool, k), Caps: make([]int64, k)}
		n.anc = make([]*pnode, k)
		if n.parent != nil {
			copy(c.Slots, n.parent.chain.Slots)
			copy(c.Res, n.parent.chain.Res)
			copy(c.Level, n.parent.chain.Level)
			copy(c.Caps, n.parent.chain.Caps)
			copy(n.anc, n.parent.anc)
			c.Capped = n.parent.chain.Capped
		}
		c.Slots[k-1], c.Res[k-1], c.Level[k-1], c.Caps[k-1] = n.slot, n.res, !n.useParent && !n.user, n.cap
		c.Capped = c.Capped || n.cap >= 0
		n.anc[k-1] = n
		n.chain = c
	}
	p.publish(t, now)
}

// effParent is the first ancestor of n that is not UseParent (nil: the
// pool).
func effParent(n *pnode) *pnode {
	a := n.parent
	for a != nil && a.useParent {
		a = a.parent
	}
	return a
}

// lift returns the accounts with every UseParent account replaced by its
// own lifted children (a level's effective members); user associations
// are left out: they hold no reservation.
func lift(nodes []*pnode) []*pnode {
	var out []*pnode
	for _, n := range nodes {
		switch {
		case n.user:
		case n.useParent:
			out = append(out, lift(n.ordered)...)
		default:
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

// resolve finds where a path counts: the account (the project if in the
// tree below the team, else the team if in the tree below the
// organisation, else the organisation), then the owner's user association
// in that account if it has one; nil when the organisation is unknown. It
// does not allocate.
func (t *tree) resolve(path Path) *pnode {
	o := t.orgs[path.Org]
	if o == nil {
		return nil
	}
	a := o
	if tm := t.accts[path.Team]; tm != nil && tm != o && below(tm, o) {
		a = tm
		if path.Project != "" {
			if pr := t.accts[path.Project]; pr != nil && pr != tm && below(pr, tm) {
				a = pr
			}
		}
	}
	if path.User != "" {
		if u := a.users[path.User]; u != nil {
			return u
		}
		if u := a.userFold(path.User); u != nil {
			return u
		}
	}
	return a
}

// userFold finds the user association of name up to case: Slurm keeps
// user names lower-case (unless its user-case flag is set), while a key's
// owner may have been typed "Alice". Only a name with an upper-case ASCII
// letter is looked for, so the lookup of an owner without a user
// association here costs nothing more; it does not allocate.
func (n *pnode) userFold(name string) *pnode {
	upper := false
	for i := 0; i < len(name) && !upper; i++ {
		upper = 'A' <= name[i] && name[i] <= 'Z'
	}
	if !upper {
		return nil
	}
	var found *pnode
	for uname, u := range n.users {
		if strings.EqualFold(uname, name) {
			if found != nil {
				return nil // "alice" and "ALICE" both (a case-sensitive Slurm): ambiguous
			}
			found = u
		}
	}
	return found
}

// below reports whether anc is an ancestor of n.
func below(n, anc *pnode) bool {
	return n.depth > anc.depth && n.anc[anc.depth-1] == anc
}

// noChain is the chain of a path whose organisation is unknown.
var noChain Chain

// Admit decides the priority of a request of class 0 (interactive) or 1
// (batch) and counts it in flight (and as within where it is placed) in
// the pool's counters, checking the chain's caps (AdmitCapped). Pass the
// ticket to Done when the request ends. It does not allocate.
//
// A gateway admits through its shared state instead (package admission):
// Locate, then the counters' admission with the other steps' in one call,
// then Seat.Priority.
func (p *Pool) Admit(path Path, class int) Ticket {
	s := p.Locate(path)
	pl, capped := AdmitCapped(p.ctr, s.Chain)
	if capped >= 0 {
		return Ticket{Capped: s.Account(capped)}
	}
	return Ticket{Priority: s.Priority(pl, class), chain: s.Chain, place: pl, admitted: true}
}

// AdmitCapped counts one request of chain c in ctr (Counters.Admit) and
// checks the caps of c's accounts (Chain.Caps, Slurm's GrpTRES): capped ≥ 0
// is the index in c of an account the request would take over its cap,
// and then nothing is counted. Counted in first, so that two requests
// racing for an account's last place cannot both pass; the one over gives
// its place back at once. It does not allocate with MemCounters.
func AdmitCapped(ctr Counters, c *Chain) (p Placement, capped int) {
	p = ctr.Admit(c)
	if !c.Capped {
		return p, -1
	}
	for i := 0; i < c.N && i < len(c.Caps); i++ {
		if c.Caps[i] < 0 {
			continue
		}
		if in, _ := ctr.Counts(c.Slots[i]); in > c.Caps[i] {
			ctr.Release(c, p, 0, time.Time{})
			return Placement{}, i
		}
	}
	return p, -1
}

// Seat is where a request counts in a pool: its chain of accounts in the
// tree in force when it was located, which also ranks it. It is a value
// of a few words; Locate does not allocate.
type Seat struct {
	// Chain is the request's accounts (organisation first) for the
	// counters; never nil (empty for an organisation not in the tree).
	Chain *Chain
	st    *state
	leaf  *pnode
}

// Locate finds where a request of path counts (see Path) in the tree in
// force.
func (p *Pool) Locate(path Path) Seat {
	st := p.st.Load()
	leaf, c := st.tree.chainOf(path)
	return Seat{Chain: c, st: st, leaf: leaf}
}

// Priority is the priority of a request of class 0 (interactive) or 1
// (batch) seated at s and placed at pl by the counters.
func (s Seat) Priority(pl Placement, class int) int {
	return s.st.priority(s.leaf, pl, clampClass(class))
}

// Account is the name of account i of s.Chain (an index AdmitCapped or a
// shared admission reports for a cap).
func (s Seat) Account(i int) string {
	if s.leaf == nil || i < 0 || i >= len(s.leaf.anc) {
		return ""
	}
	return s.leaf.anc[i].name
}

// Association says what account i of s.Chain is, for messages:
// `account "lab-x"`, or `user "alice" in account "lab-x"` for a user
// association.
func (s Seat) Association(i int) string {
	if s.leaf == nil || i < 0 || i >= len(s.leaf.anc) {
		return ""
	}
	n := s.leaf.anc[i]
	if n.user && n.parent != nil {
		return fmt.Sprintf("user %q in account %q", n.name, n.parent.name)
	}
	return fmt.Sprintf("account %q", n.name)
}

// chainOf returns the leaf of path and its chain (noChain, and a nil leaf,
// for an unknown organisation).
func (t *tree) chainOf(path Path) (*pnode, *Chain) {
	leaf := t.resolve(path)
	if leaf == nil {
		return nil, &noChain
	}
	return leaf, &leaf.chain
}

// Peek returns the priority Admit would give now, without admitting (for a
// gateway-side queue, to re-prioritise requests not yet sent).
func (p *Pool) Peek(path Path, class int) int {
	st := p.st.Load()
	leaf, c := st.tree.chainOf(path)
	return st.priority(leaf, p.ctr.Peek(c), clampClass(class))
}

// PeekAll is Peek of paths[i] and classes[i] into out[i], reading the
// counts once for all (Counters.PeekAll): a queue's dispatch asks for every
// waiting leaf at once, one round trip with shared counters. scratch, when
// large enough, saves the allocations (callers keep one).
func (p *Pool) PeekAll(paths []Path, classes []int, out []int, scratch *PeekScratch) {
	st := p.st.Load()
	if scratch == nil {
		scratch = new(PeekScratch)
	}
	n := len(paths)
	scratch.leaves = scratch.leaves[:0]
	scratch.chains = scratch.chains[:0]
	for _, path := range paths {
		leaf, c := st.tree.chainOf(path)
		scratch.leaves = append(scratch.leaves, leaf)
		scratch.chains = append(scratch.chains, c)
	}
	if cap(scratch.placed) < n {
		scratch.placed = make([]Placement, n)
	}
	placed := scratch.placed[:n]
	p.ctr.PeekAll(scratch.chains, placed)
	for i := range n {
		out[i] = st.priority(scratch.leaves[i], placed[i], clampClass(classes[i]))
	}
	clear(scratch.chains) // no tree kept alive by a queue gone idle
	clear(scratch.leaves)
}

// PeekScratch holds PeekAll's buffers between calls; the zero value is
// ready. Not safe for concurrent use.
type PeekScratch struct {
	leaves []*pnode
	chains []*Chain
	placed []Placement
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
//
// The rows shown (Snapshot) are sshare's: only user associations get a
// FairShare; in a tree without any user association (a configuration
// tree) the accounts without children stand for them. The ranks Admit
// uses come from a Fair Tree where every node a request can count at is
// a leaf: the user associations and the accounts without children (a
// request of a key without owner in an account without users).
func (p *Pool) publish(t *tree, now time.Time) {
	st := &state{tree: t, at: now,
		leafRank: make([]uint8, len(t.nodes)), bandRank: make([]uint8, len(t.nodes)),
		rowOf: make([]int, len(t.nodes))}
	usage := make([]float64, len(t.nodes))
	childless := false
	for _, n := range t.nodes {
		usage[n.id] = p.ctr.Usage(n.slot, now)
		childless = childless || (!n.user && len(n.ordered) == 0)
	}
	poolUsage := p.ctr.Usage(PoolSlot, now)
	// input builds the Fair Tree input: the pool is the root; leaf(n) says
	// which nodes are ranked.
	input := func(leaf func(n *pnode) bool) (*TreeNode, []*TreeNode) {
		root := &TreeNode{Name: "", Usage: poolUsage}
		tn := make([]*TreeNode, len(t.nodes))
		for _, n := range t.nodes {
			x := &TreeNode{Name: n.name, Shares: n.rawShares, UseParent: n.useParent,
				User: leaf(n), Usage: usage[n.id]}
			tn[n.id] = x
			if n.parent == nil {
				root.Children = append(root.Children, x)
			} else {
				tn[n.parent.id].Children = append(tn[n.parent.id].Children, x)
			}
		}
		return root, tn
	}
	rankLeaf := func(n *pnode) bool { return n.user || len(n.ordered) == 0 }
	showLeaf := rankLeaf
	if t.hasUsr {
		showLeaf = func(n *pnode) bool { return n.user }
	}
	root, tn := input(showLeaf)
	st.fair = FairTree(root)
	rank, rankTN := st.fair, tn
	separate := t.hasUsr && childless // the ranking tree differs from the one shown
	if separate {
		root, rankTN = input(rankLeaf)
		rank = FairTree(root)
	}
	rowOf := func(rows []Result, tn []*TreeNode) []int {
		byNode := make(map[*TreeNode]int, len(rows))
		for i, r := range rows {
			byNode[r.Node] = i
		}
		out := make([]int, len(t.nodes))
		for _, n := range t.nodes {
			out[n.id] = byNode[tn[n.id]]
		}
		return out
	}
	st.rowOf = rowOf(st.fair, tn)
	for i, r := range st.fair {
		if r.Node.User && i > 0 {
			st.users++
		}
	}
	rankRow := st.rowOf
	if separate {
		rankRow = rowOf(rank, rankTN)
	}
	N := 0
	for i, r := range rank {
		if r.Node.User && i > 0 {
			N++
		}
	}
	// Leaf ranks: competition position among all leaves, bucketed; an
	// account with children (a team with projects or users, for requests
	// without a project or owner) takes the best rank under it.
	for i := len(t.nodes) - 1; i >= 0; i-- {
		n := t.nodes[i]
		r := rank[rankRow[n.id]]
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
	// Band ranks among effective sibling accounts, by LF descending.
	groups := map[*pnode][]*pnode{}
	for _, n := range t.nodes {
		if !n.useParent && !n.user {
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
