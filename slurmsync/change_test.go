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
