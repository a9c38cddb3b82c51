// Package slurmsync imports Slurm's account tree into llmflow.
//
// Two sources read the association tree of one cluster and give the same
// [sacctmgr.Tree] for the same Slurm state:
//
//   - [SlurmDBD] reads slurmdbd's MySQL/MariaDB tables (acct_table and
//     <cluster>_assoc_table) through the adapter, package slurm;
//   - [Sacctmgr] runs sacctmgr (the adapter's [slurm.Sacctmgr]) or reads
//     its saved output, and combines the listings.
//
// Both return the tree in the canonical order documented on
// [sacctmgr.Tree]; see [Normalize].
package slurmsync

import (
	"context"
	"errors"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

// Source reads the current association tree of one Slurm cluster.
// Implementations are safe for concurrent use.
type Source interface {
	// Tree returns the cluster's associations, deleted ones included
	// (flagged), in canonical order (see Normalize).
	Tree(ctx context.Context) (*sacctmgr.Tree, error)
}

// Normalize puts t in the canonical form both sources return, in place:
//
//   - Shares of a Fairshare=parent association = sacctmgr.ParentShares;
//   - Default only on associations that are not deleted;
//   - deleted associations whose parent is gone (hard-deleted since) are
//     dropped: nothing can be attached to them;
//   - sacctmgr's tree order (Tree.Sort): accounts depth-first from root,
//     siblings by name; users grouped under their account in that order,
//     by user name, then partition ("" first; sacctmgr itself prints one
//     user's partition rows in lft order);
//   - the structure is checked (Tree.Validate: one root, known parents, no
//     cycle, no duplicates);
//   - coordinators are reduced to each user's top-most live accounts of
//     the tree (ReduceCoords), sorted by user and account.
func Normalize(t *sacctmgr.Tree) error {
	accts := make(map[string]string, len(t.Accounts)) // name -> parent
	for i := range t.Accounts {
		a := &t.Accounts[i]
		if a.UseParent {
			a.Shares = sacctmgr.ParentShares
		}
		accts[a.Name] = a.Parent
	}
	for i := range t.Users {
		u := &t.Users[i]
		if u.UseParent {
			u.Shares = sacctmgr.ParentShares
		}
		if u.Deleted {
			u.Default = false
		}
	}
	// reachable reports whether name's ancestry reaches a root.
	memo := make(map[string]bool, len(accts))
	var reachable func(name string, depth int) bool
	reachable = func(name string, depth int) bool {
		if ok, done := memo[name]; done {
			return ok
		}
		parent, ok := accts[name]
		switch {
		case !ok || depth > len(accts):
			ok = false
		case parent == "":
			ok = true
		default:
			ok = reachable(parent, depth+1)
		}
		memo[name] = ok
		return ok
	}
	if len(t.Accounts) == 0 {
		return errors.New("no associations (unknown cluster?)")
	}
	keep := t.Accounts[:0]
	for _, a := range t.Accounts {
		if a.Deleted && !reachable(a.Name, 0) {
			continue
		}
		keep = append(keep, a)
	}
	t.Accounts = keep
	keepU := t.Users[:0]
	for _, u := range t.Users {
		if u.Deleted && !reachable(u.Account, 0) {
			continue
		}
		keepU = append(keepU, u)
	}
	t.Users = keepU
	if err := t.Validate(); err != nil {
		return err
	}
	t.Sort()
	t.Coords = ReduceCoords(t)
	return nil
}
