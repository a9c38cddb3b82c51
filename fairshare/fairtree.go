package fairshare

import (
	"math"
	"sort"
)

// noVal is Slurm's NO_VAL (0xfffffffe) as a level fairshare: fair_tree.c
// gives it to Fairshare=parent accounts, which therefore sort after +Inf
// and before every finite LF among their (lifted) siblings.
const noVal = float64(0xfffffffe)

// TreeNode is one association of a Fair Tree input: an account (User false)
// or a user association (User true, a leaf that receives a FairShare).
type TreeNode struct {
	Name      string
	User      bool    // a user association: a leaf ranked by Fair Tree
	Shares    float64 // raw shares (Slurm Fairshare=N), normalised among the level's siblings
	UseParent bool    // Slurm Fairshare=parent: no level of its own
	// Usage is the association's raw (decayed) usage, as Slurm keeps it per
	// association: for an account, the usage of everything under it (see
	// SumUsage). The root's usage normalises NormUsage.
	Usage    float64
	Children []*TreeNode
}

// SumUsage sets the Usage of every account under (and including) n to the
// sum of its children's usage, as Slurm accumulates a job's usage into its
// association and every ancestor, and returns n's usage.
func SumUsage(n *TreeNode) float64 {
	if len(n.Children) == 0 {
		return n.Usage
	}
	s := 0.0
	for _, c := range n.Children {
		s += SumUsage(c)
	}
	n.Usage = s
	return s
}

// Result is one row of FairTree's output, with sshare -l's columns.
type Result struct {
	Node   *TreeNode
	Parent int // index of the parent row in the result, -1 for the root
	Depth  int // 0 for the root

	// NormShares is S = Shares / Σ Shares of the level's siblings, the level
	// being the children of the first ancestor that is not Fairshare=parent
	// (lifted children included, Fairshare=parent siblings contributing 0).
	// A Fairshare=parent row has the NormShares of that ancestor. 0 for the
	// root.
	NormShares float64
	// RawUsage is the association's Usage.
	RawUsage float64
	// NormUsage is RawUsage / root's RawUsage (0 when the root has none; 1
	// for the root).
	NormUsage float64
	// EffectvUsage is U = RawUsage / RawUsage of the first ancestor that is
	// not Fairshare=parent (0 when that is 0; 1 for the root).
	EffectvUsage float64
	// LevelFS is LF = S / U: 0 when S = 0, +Inf when U = 0 (and S > 0).
	// NaN (sshare prints it empty) for the root and Fairshare=parent rows:
	// a Fairshare=parent user is ranked as +Inf (first in its level, tied
	// with other +Inf users), a Fairshare=parent account as Slurm's NO_VAL.
	LevelFS float64
	// FairShare is Rank / N for users (N = number of user rows); NaN for
	// accounts.
	FairShare float64
	// Rank is the user's rank value k (FairShare = k/N): N for the first
	// user Fair Tree visits, counting down, equal LF siblings sharing the
	// rank of the first of them (competition ranking: N, N, N−2 …). 0 for
	// accounts.
	Rank int
	// Visit is the 0-based order in which Fair Tree visited the user (−1 for
	// accounts): siblings by LF descending, users before accounts on equal
	// LF, input order among equals, depth first.
	Visit int
}

// FairTree computes Slurm's Fair Tree (priority/multifactor, fair_tree.c as
// of Slurm 22.05) over the tree under root, which stands for Slurm's root
// account (its own Shares are ignored). It returns one row per node in
// pre-order (input order).
//
// Per level: S = NormShares, U = EffectvUsage, LF = S / U. Fairshare=parent
// accounts are transparent: their children are siblings of the account at the
// first ancestor with a level of their own, for shares and usage. Siblings
// are visited by LF descending (users before accounts on equal LF); a user
// gets FairShare = rank / N, rank starting at N and counting down by one per
// user, except that a user whose LF equals the previous sibling's keeps the
// previous rank (and the first child of an account tied with its previous
// sibling starts tied). Tied sibling accounts are not merged: Slurm's
// _count_tied_accounts stops at the first account, so the documented merge
// never happens, here as in Slurm.
func FairTree(root *TreeNode) []Result {
	if root == nil {
		return nil
	}
	var rows []Result
	var walk func(n *TreeNode, parent, depth int)
	walk = func(n *TreeNode, parent, depth int) {
		i := len(rows)
		rows = append(rows, Result{Node: n, Parent: parent, Depth: depth, Visit: -1,
			LevelFS: math.NaN(), FairShare: math.NaN(), RawUsage: n.Usage})
		for _, c := range n.Children {
			walk(c, i, depth+1)
		}
	}
	walk(root, -1, 0)

	// fs[i]: first ancestor of row i that is not Fairshare=parent.
	fs := make([]int, len(rows))
	children := make([][]int, len(rows))
	users := 0
	for i := range rows {
		p := rows[i].Parent
		fs[i] = -1
		if p >= 0 {
			if rows[p].Node.UseParent && p != 0 {
				fs[i] = fs[p]
			} else {
				fs[i] = p
			}
			children[fs[i]] = append(children[fs[i]], i)
		}
		if rows[i].Node.User && i != 0 {
			users++
		}
	}
	rootUsage := rows[0].RawUsage
	rows[0].EffectvUsage = 1
	rows[0].NormUsage = 1
	// Rows are in pre-order, so an ancestor's NormShares is set before its
	// descendants read it.
	for i := range rows {
		level := 0.0
		for _, c := range children[i] {
			if !rows[c].Node.UseParent {
				level += rows[c].Node.Shares
			}
		}
		for _, c := range children[i] {
			r := &rows[c]
			if r.Node.UseParent {
				r.NormShares = rows[i].NormShares
			} else if level > 0 && r.Node.Shares > 0 {
				r.NormShares = r.Node.Shares / level
			}
			if u := rows[i].RawUsage; u > 0 {
				r.EffectvUsage = r.RawUsage / u
			}
			if rootUsage > 0 {
				r.NormUsage = r.RawUsage / rootUsage
			}
		}
	}
	sortLF := make([]float64, len(rows))
	for i := 1; i < len(rows); i++ {
		r := &rows[i]
		switch {
		case r.Node.UseParent && r.Node.User:
			sortLF[i] = math.Inf(1)
		case r.Node.UseParent:
			sortLF[i] = noVal
		case r.NormShares == 0:
			r.LevelFS = 0
		default:
			r.LevelFS = r.NormShares / r.EffectvUsage // +Inf when U == 0
		}
		if !r.Node.UseParent {
			sortLF[i] = r.LevelFS
		}
	}

	rank, rnt, visit := users, users, 0
	var calc func(sib []int, accountTied bool)
	calc = func(sib []int, accountTied bool) {
		sib = append([]int(nil), sib...)
		sort.SliceStable(sib, func(a, b int) bool {
			x, y := sib[a], sib[b]
			if sortLF[x] != sortLF[y] {
				return sortLF[x] > sortLF[y]
			}
			return rows[x].Node.User && !rows[y].Node.User
		})
		prev := noVal
		for k, i := range sib {
			tied := prev == sortLF[i]
			if k == 0 && accountTied {
				tied = true
			}
			if rows[i].Node.User {
				if !tied {
					rank = rnt
				}
				rows[i].Rank = rank
				rows[i].FairShare = float64(rank) / float64(users)
				rows[i].Visit = visit
				visit++
				rnt--
			} else {
				calc(children[i], tied)
			}
			prev = sortLF[i]
		}
	}
	calc(children[0], false)
	return rows
}
