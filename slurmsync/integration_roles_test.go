package slurmsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

// TestIntegrationCoordinators makes coordinators with the real sacctmgr
// and checks, after each change, that the slurmdbd source (acct_coord_table,
// read-only DB user) and the sacctmgr source (`show user withcoord`, which
// lists sub-accounts too) give the same tree, coordinators included, and
// the same roles. Account and user names carry a random c11 prefix:
// accounts and coordinators are global in slurmdbd, shared with other
// tests.
func TestIntegrationCoordinators(t *testing.T) {
	e := needSlurm(t)
	c := testCluster(t)
	ctx := context.Background()
	b := make([]byte, 3)
	rand.Read(b)
	p := "c11" + hex.EncodeToString(b)
	n := func(s string) string { return p + s }
	t.Cleanup(func() {
		for _, u := range []string{"u1", "u2", "u3"} {
			exec.Command("sacctmgr", "-i", "delete", "user", n(u)).Run()
		}
		exec.Command("sacctmgr", "-i", "delete", "account", n("proj"), n("team1"), n("team2"), n("org")).Run()
	})
	dbd, err := NewSlurmDBD(e.roDSN, c)
	if err != nil {
		t.Fatal(err)
	}
	defer dbd.Close()
	sa := &Sacctmgr{Cluster: c}

	step := func(name string, want []string) {
		t.Helper()
		fromDB, err := dbd.Tree(ctx)
		if err != nil {
			t.Fatalf("%s: slurmdbd: %v", name, err)
		}
		fromCmd, err := sa.Tree(ctx)
		if err != nil {
			t.Fatalf("%s: sacctmgr: %v", name, err)
		}
		sameTree(t, name+": slurmdbd vs sacctmgr", fromDB, fromCmd)
		var roles [2][]string
		for i, src := range []*sacctmgr.Tree{fromDB, fromCmd} {
			accts, err := Map(src)
			if err != nil {
				t.Fatal(err)
			}
			ws, _ := Roles(src, accts)
			for _, w := range ws {
				roles[i] = append(roles[i], strings.TrimPrefix(w.Grant.User, p)+" "+strings.ReplaceAll(grantText(w.Grant), p, ""))
			}
		}
		if d := cmp.Diff(roles[0], roles[1]); d != "" {
			t.Fatalf("%s: roles slurmdbd vs sacctmgr (-db +sacctmgr):\n%s", name, d)
		}
		if d := cmp.Diff(want, roles[0]); d != "" {
			t.Fatalf("%s: roles (-want +got):\n%s", name, d)
		}
	}

	sam(t, "add", "account", n("org"), "cluster="+c, "parent=root")
	sam(t, "add", "account", n("team1"), "cluster="+c, "parent="+n("org"))
	sam(t, "add", "account", n("team2"), "cluster="+c, "parent="+n("org"))
	sam(t, "add", "account", n("proj"), "cluster="+c, "parent="+n("team1"))
	sam(t, "add", "user", n("u1"), "cluster="+c, "account="+n("team1"))
	sam(t, "add", "user", n("u2"), "cluster="+c, "account="+n("proj"))
	sam(t, "add", "user", n("u3"), "cluster="+c, "account="+n("team2"))
	step("no coordinators", []string{"u1 member on team team1", "u2 member on team team1", "u3 member on team team2"})

	sam(t, "add", "coordinator", "account="+n("team1"), "names="+n("u1"))
	sam(t, "add", "coordinator", "account="+n("org")+","+n("proj"), "names="+n("u2"))
	sam(t, "add", "coordinator", "account="+n("proj"), "names="+n("u3"))
	step("coordinators", []string{
		"u1 member on team team1", "u1 team_admin on team team1",
		"u2 member on team team1", "u2 org_admin on organisation org", // proj is under org: reduced away
		"u3 member on team team2", // a project coordinator: no role
	})

	sam(t, "remove", "coordinator", "account="+n("team1"), "names="+n("u1"))
	sam(t, "remove", "coordinator", "account="+n("org"), "names="+n("u2"))
	sam(t, "add", "coordinator", "account="+n("team2"), "names="+n("u3"))
	step("coordinators changed", []string{
		"u1 member on team team1",
		"u2 member on team team1", // still coordinator of proj: no role
		"u3 member on team team2", "u3 team_admin on team team2",
	})

	sam(t, "delete", "user", n("u3"))
	step("user removed", []string{"u1 member on team team1", "u2 member on team team1"})
}
