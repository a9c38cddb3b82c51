package slurmsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/sacctmgr"

	"github.com/go-llmflow/llmflow/internal/slurmtest"
)

// testCluster registers a cluster of its own for this test run and
// removes it at the end.
func testCluster(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	c := "llmt_" + hex.EncodeToString(b)
	sam(t, "add", "cluster", c)
	t.Cleanup(func() {
		out, err := exec.Command("sacctmgr", "-i", "delete", "cluster", c).CombinedOutput()
		if err != nil {
			t.Logf("sacctmgr delete cluster %s: %v: %s", c, err, out)
		}
	})
	return c
}

// sam runs sacctmgr -i (commit without asking).
func sam(t *testing.T, args ...string) {
	t.Helper()
	slurmtest.Sacctmgr(t, args...)
}

// summary renders a tree compactly for assertions:
// accounts "name<parent:shares[flags]" and users "acct/user@part:shares[flags]".
func summary(tr *sacctmgr.Tree) string {
	var b strings.Builder
	flags := func(useParent, deleted, def bool, shares uint32) string {
		s := fmt.Sprint(shares)
		if useParent {
			s = "parent"
		}
		if def {
			s += "*"
		}
		if deleted {
			s += "(d)"
		}
		return s
	}
	for _, a := range tr.Accounts {
		fmt.Fprintf(&b, "%s<%s:%s ", a.Name, a.Parent, flags(a.UseParent, a.Deleted, false, a.Shares))
	}
	b.WriteString("| ")
	for _, u := range tr.Users {
		p := ""
		if u.Partition != "" {
			p = "@" + u.Partition
		}
		fmt.Fprintf(&b, "%s/%s%s:%s ", u.Account, u.Name, p, flags(u.UseParent, u.Deleted, u.Default, u.Shares))
	}
	return strings.TrimSpace(b.String())
}

// TestIntegrationRealSlurm builds a tree with the real sacctmgr, changes it
// (add, re-share, delete, re-add) and checks after each step that the
// slurmdbd source (read-only DB user) and the sacctmgr source agree, and
// what they say.
func TestIntegrationRealSlurm(t *testing.T) {
	e := needSlurm(t)
	c := testCluster(t)
	ctx := context.Background()

	dbd, err := NewSlurmDBD(e.roDSN, c)
	if err != nil {
		t.Fatal(err)
	}
	defer dbd.Close()
	sa := &Sacctmgr{Cluster: c}

	step := func(name, want string) {
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
		if got := summary(fromDB); got != want {
			t.Fatalf("%s:\n got %s\nwant %s", name, got, want)
		}
	}

	// 1. A tree: two organisations (one created with capitals), teams, a
	// project, Fairshare=parent on an account and on a user, a user with
	// two partition associations, default accounts.
	acct := func(name, parent, fs, descr string) {
		sam(t, "add", "account", name, "cluster="+c, "parent="+parent, "fairshare="+fs,
			"description="+descr, "organization="+strings.ToLower(name))
	}
	acct("OrgA", "root", "13", "Org A | first")
	acct("orgb", "root", "3", "org b")
	acct("team-nlp", "orga", "60", "nlp")
	acct("team-cv", "orga", "40", "vision")
	acct("proj-llm", "team-nlp", "parent", "llm project")
	acct("team-chem", "orgb", "100", "chemistry")
	sam(t, "add", "user", "alice", "cluster="+c, "account=proj-llm", "fairshare=10", "defaultaccount=proj-llm")
	sam(t, "add", "user", "alice", "cluster="+c, "account=team-nlp", "fairshare=5")
	sam(t, "add", "user", "bob", "cluster="+c, "account=team-cv", "fairshare=20", "defaultaccount=team-cv")
	sam(t, "add", "user", "carol", "cluster="+c, "account=team-chem", "fairshare=50", "defaultaccount=team-chem")
	sam(t, "add", "user", "carol", "cluster="+c, "account=team-chem", "partition=gpu", "fairshare=30")
	sam(t, "add", "user", "dave", "cluster="+c, "account=team-chem", "fairshare=parent", "defaultaccount=team-chem")
	step("create",
		"root<:1 orga<root:13 team-cv<orga:40 team-nlp<orga:60 proj-llm<team-nlp:parent "+
			"orgb<root:3 team-chem<orgb:100 | "+
			"root/root:1* team-cv/bob:20* team-nlp/alice:5 proj-llm/alice:10* "+
			"team-chem/carol:50* team-chem/carol@gpu:30 team-chem/dave:parent*")
	// Accounts are global (acct_table): adding an existing account to a
	// new cluster keeps its old description; modify changes it everywhere.
	sam(t, "modify", "account", "where", "name=orga", "set", `description=Org "A" | first`)
	for _, src := range []Source{dbd, sa} {
		tr, err := src.Tree(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := tr.FindAccount("orga"); a.Description != "org `a` | first" || a.Organization != "orga" {
			t.Errorf("%v: orga = %+v", src, a)
		}
	}

	// 2. Add and re-share.
	acct("team-bio", "orgb", "7", "biology")
	sam(t, "add", "user", "erin", "cluster="+c, "account=team-bio", "fairshare=1", "defaultaccount=team-bio")
	sam(t, "modify", "account", "where", "name=orga", "cluster="+c, "set", "fairshare=12")
	sam(t, "modify", "account", "where", "name=proj-llm", "cluster="+c, "set", "fairshare=70")
	sam(t, "modify", "user", "where", "name=dave", "account=team-chem", "cluster="+c, "set", "fairshare=8")
	sam(t, "modify", "user", "where", "name=bob", "account=team-cv", "cluster="+c, "set", "fairshare=parent")
	step("add+reshare",
		"root<:1 orga<root:12 team-cv<orga:40 team-nlp<orga:60 proj-llm<team-nlp:70 "+
			"orgb<root:3 team-bio<orgb:7 team-chem<orgb:100 | "+
			"root/root:1* team-cv/bob:parent* team-nlp/alice:5 proj-llm/alice:10* "+
			"team-bio/erin:1* team-chem/carol:50* team-chem/carol@gpu:30 team-chem/dave:8*")

	// 3. Delete. Associations younger than a day are hard-deleted (gone
	// from both sources); backdated ones stay as deleted=1 rows.
	sam(t, "delete", "user", "carol", "account=team-chem", "partition=gpu", "cluster="+c)
	old := time.Now().Add(-72 * time.Hour).Unix()
	if _, err := e.db.Exec(fmt.Sprintf("UPDATE slurm_acct_db.`%s_assoc_table` SET creation_time=? WHERE acct IN ('team-cv', 'team-bio')", c), old); err != nil {
		t.Fatal(err)
	}
	sam(t, "delete", "account", "team-cv", "cluster="+c)
	sam(t, "delete", "user", "erin", "account=team-bio", "cluster="+c)
	step("delete",
		"root<:1 orga<root:12 team-cv<orga:1(d) team-nlp<orga:60 proj-llm<team-nlp:70 "+
			"orgb<root:3 team-bio<orgb:7 team-chem<orgb:100 | "+
			"root/root:1* team-cv/bob:1(d) team-nlp/alice:5 proj-llm/alice:10* "+
			"team-bio/erin:1(d) team-chem/carol:50* team-chem/dave:8*")

	// 4. Re-add a deleted account: slurmdbd revives its row.
	acct("team-cv", "orga", "45", "vision again")
	step("re-add",
		"root<:1 orga<root:12 team-cv<orga:45 team-nlp<orga:60 proj-llm<team-nlp:70 "+
			"orgb<root:3 team-bio<orgb:7 team-chem<orgb:100 | "+
			"root/root:1* team-cv/bob:1(d) team-nlp/alice:5 proj-llm/alice:10* "+
			"team-bio/erin:1(d) team-chem/carol:50* team-chem/dave:8*")
}

// The sacctmgr source against the real sacctmgr, for a cluster that does
// not exist: a clear error, not an empty tree.
func TestIntegrationUnknownCluster(t *testing.T) {
	needSlurm(t)
	_, err := (&Sacctmgr{Cluster: "llmt_nosuch"}).Tree(context.Background())
	if err == nil || !strings.Contains(err.Error(), "llmt_nosuch") {
		t.Errorf("error %v", err)
	}
	t.Log(err)
}
