package slurmsync

import (
	"testing"

	"github.com/go-llmflow/llmflow"
)

func TestChange_String(t *testing.T) {
	lab := llmflow.Account{Name: "lab-x", Kind: llmflow.KindTeam, Parent: "uni-a", Shares: 3, Members: []string{"alice", "bob"}}
	old := lab
	old.Members = []string{"bob", "carol"}
	for _, tc := range []struct {
		c    Change
		want string
	}{
		{Change{Kind: Created, Account: lab}, `created     team     lab-x (parent "uni-a", shares 3), members alice,bob`},
		{Change{Kind: Created, Account: llmflow.Account{Name: "p", Kind: llmflow.KindProject, Parent: "lab-x", UseParent: true}},
			`created     project  p (parent "lab-x", shares parent)`},
		{Change{Kind: Members, Account: lab, Old: &old}, `members     team     lab-x: added alice, removed carol`},
		{Change{Kind: Members, Account: old, Old: &old}, `members     team     lab-x: added none, removed none`},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

func TestChange_UserShares(t *testing.T) {
	old := llmflow.Account{Name: "lab-x", Kind: llmflow.KindTeam, Users: []llmflow.UserAssoc{{User: "ann", Shares: 5}}}
	cur := old
	cur.Users = []llmflow.UserAssoc{{User: "ann", Shares: 10}, {User: "ann", Partition: "gpu", UseParent: true}}
	got := Change{Kind: UserShares, Account: cur, Old: &old}.String()
	if want := "user-shares team     lab-x: ann=5 → ann=10,ann@gpu=parent"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// An account deleted in Slurm is never created: absent when llmflow never
// knew it, disabled when it did; root's own users are a user-shares change.
func TestDiffDeleted(t *testing.T) {
	root := llmflow.Account{Name: "root", Kind: llmflow.KindRoot, Users: []llmflow.UserAssoc{{User: "root", Shares: 5}}, Source: "slurm"}
	org := llmflow.Account{Name: "uni", Kind: llmflow.KindOrg, Shares: 1, Source: "slurm"}
	gone := llmflow.Account{Name: "old", Kind: llmflow.KindTeam, Parent: "uni", Shares: 1, Disabled: true, Source: "slurm"}
	changes, next := Diff(nil, llmflow.Accounts{root, org, gone})
	var run llmflow.SyncRun
	Count(&run, changes, len(next))
	if len(next) != 2 || run.Created != 1 || run.Disabled != 0 || run.SharesChanged != 1 {
		t.Errorf("first import: next %v, run %+v, changes %v", next, run, changes)
	}
	live := gone
	live.Disabled = false
	changes, next = Diff(llmflow.Accounts{root, org, live}, llmflow.Accounts{root, org, gone})
	if len(changes) != 1 || changes[0].Kind != Disabled || len(next) != 3 || !next[2].Disabled {
		t.Errorf("known account deleted: changes %v next %v", changes, next)
	}
	changes, next = Diff(llmflow.Accounts{root, org}, llmflow.Accounts{org})
	if len(changes) != 1 || changes[0].Kind != UserShares || len(next) != 1 {
		t.Errorf("root's users gone: changes %v next %v", changes, next)
	}
}
