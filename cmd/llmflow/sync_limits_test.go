package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/store"
)

// TestSyncGPULimits: GrpTRESMins and GrpTRES set with the real sacctmgr
// are imported by both sources alike, shown by `sync --dry-run` as limit
// changes (with the GPU-hours of the budget), stored with the tree, and a
// limit removed in Slurm is a change back to none.
func TestSyncGPULimits(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	cluster := "llmt_lim" + suffix
	org, team, proj := "limo"+suffix, "limt"+suffix, "limp"+suffix
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	sam(t, "add", "account", org, "cluster="+cluster, "fairshare=3", "GrpTRES=gres/gpu=16")
	sam(t, "add", "account", team, "parent="+org, "cluster="+cluster, "fairshare=1", "GrpTRESMins=gres/gpu=6000,cpu=100")
	sam(t, "add", "account", proj, "parent="+team, "cluster="+cluster, "fairshare=1")

	dir := t.TempDir()
	path := syncConfig(t, dir, "http://127.0.0.1:9")
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(context.Background(), append([]string{"sync", "-c", path, "--cluster", cluster}, args...), &out, &errb); code != 0 {
			t.Fatalf("sync %v: %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	dbd := []string{"--from-slurmdbd", "--dsn-file", "/etc/slurm/llmflow-slurmdbd.dsn"}

	// a dry run from each source shows the same creations, limits included
	fromCmd := run("--from-sacctmgr", "--dry-run")
	fromDB := run(append(dbd, "--dry-run")...)
	for _, want := range []string{
		"created     org      " + org + ` (parent "", shares 3), limits GrpTRES=gres/gpu=16` + "\n",
		"created     team     " + team + ` (parent "` + org + `", shares 1), limits GrpTRESMins=gres/gpu=6000 (100 GPU-hours)` + "\n",
		"created     project  " + proj + ` (parent "` + team + `", shares 1)` + "\n",
	} {
		if !strings.Contains(fromCmd, want) || !strings.Contains(fromDB, want) {
			t.Errorf("want %q in both dry runs:\nsacctmgr:\n%s\nslurmdbd:\n%s", want, fromCmd, fromDB)
		}
	}
	if strings.ReplaceAll(fromCmd, "sacctmgr:", "") != strings.ReplaceAll(fromDB, "slurmdbd:", "") {
		t.Errorf("the sources differ:\nsacctmgr:\n%s\nslurmdbd:\n%s", fromCmd, fromDB)
	}
	// a dump of the cluster (sacctmgr dump … file=) carries the same limits
	dump := filepath.Join(dir, "dump.cfg")
	sam(t, "dump", cluster, "file="+dump)
	changes := func(out string) string { return out[:strings.LastIndex(out, "dry-run from ")] } // not the source line
	if fromDump := run("--from-sacctmgr", "--file", dump, "--dry-run"); changes(fromDump) != changes(fromCmd) {
		t.Errorf("the dump differs from the listing:\ndump:\n%s\nlisting:\n%s", fromDump, fromCmd)
	}

	// applied from sacctmgr; slurmdbd then sees nothing to change
	run("--from-sacctmgr")
	if out := run(append(dbd, "--dry-run")...); !strings.Contains(out, " 0 limits changed, 4 unchanged") { // 4: with Slurm's root
		t.Errorf("slurmdbd after sacctmgr:\n%s", out)
	}
	db, err := store.OpenSQLite(t.Context(), filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	accts, err := db.Accounts(t.Context())
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]llmflow.GPULimits{}
	for _, a := range accts {
		got[a.Name] = a.Limits
	}
	if got[org] != (llmflow.GPULimits{GPUs: 16, HasGPUs: true}) || got[team] != (llmflow.GPULimits{Minutes: 6000, HasMinutes: true}) || !got[proj].IsZero() {
		t.Errorf("stored limits %+v", got)
	}

	// changed and removed in Slurm: both sources show it the same way
	sam(t, "modify", "account", "where", "name="+org, "cluster="+cluster, "set", "GrpTRES=gres/gpu=-1", "GrpTRESMins=gres/gpu=120000")
	sam(t, "modify", "account", "where", "name="+proj, "cluster="+cluster, "set", "GrpTRES=gres/gpu=2")
	fromCmd, fromDB = run("--from-sacctmgr", "--dry-run"), run(append(dbd, "--dry-run")...)
	for _, want := range []string{
		"limits      org      " + org + ": GrpTRES=gres/gpu=16 → GrpTRESMins=gres/gpu=120000 (2000 GPU-hours)\n",
		"limits      project  " + proj + ": none → GrpTRES=gres/gpu=2\n",
		" 2 limits changed, 2 unchanged\n", // the team and Slurm's root (its own user associations)
	} {
		if !strings.Contains(fromCmd, want) || !strings.Contains(fromDB, want) {
			t.Errorf("want %q in both dry runs:\nsacctmgr:\n%s\nslurmdbd:\n%s", want, fromCmd, fromDB)
		}
	}
	t.Logf("sync --from-slurmdbd --dry-run:\n%s", fromDB)
	if out := run("--history", "--limit", "1"); !strings.Contains(out, "LIMITS") {
		t.Errorf("history has no LIMITS column:\n%s", out)
	}
}

// TestSyncListingWithoutLimitColumns: a listing of the columns `sync
// --help` names first (no GrpTRESMins, no GrpTRES) says nothing about the
// limits: after an import from slurmdbd it changes none of them (it erased
// them: "GrpTRES=gres/gpu=2 → none"), and the output says they are kept.
func TestSyncListingWithoutLimitColumns(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	cluster := "llmt_nolim" + suffix
	org, team := "nlo"+suffix, "nlt"+suffix
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	sam(t, "add", "account", org, "cluster="+cluster, "fairshare=3", "GrpTRES=gres/gpu=2")
	sam(t, "add", "account", team, "parent="+org, "cluster="+cluster, "fairshare=1", "GrpTRESMins=gres/gpu=600")

	dir := t.TempDir()
	path := syncConfig(t, dir, "http://127.0.0.1:9")
	run := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(context.Background(), append([]string{"sync", "-c", path, "--cluster", cluster}, args...), &out, &errb); code != 0 {
			t.Fatalf("sync %v: %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	run("--from-slurmdbd", "--dsn-file", "/etc/slurm/llmflow-slurmdbd.dsn")

	listing := filepath.Join(dir, "assoc.psv")
	out, err := exec.Command("sacctmgr", "-P", "show", "assoc", "where", "cluster="+cluster,
		"format=Cluster,Account,User,Partition,Share,ParentName").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(listing, out, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		args := []string{"--from-sacctmgr", "--file", listing}
		if dry {
			args = append(args, "--dry-run")
		}
		stdout, stderr := run(args...)
		if strings.Contains(stdout, "limits   ") || !strings.Contains(stdout, " 0 limits changed,") {
			t.Errorf("dry run %v: the listing without limit columns changed limits:\n%s", dry, stdout)
		}
		for _, col := range []string{"no GrpTRESMins column", "no GrpTRES column"} {
			if !strings.Contains(stderr, col) {
				t.Errorf("dry run %v: stderr does not say %q:\n%s", dry, col, stderr)
			}
		}
	}
	db, err := store.OpenSQLite(t.Context(), filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	accts, err := db.Accounts(t.Context())
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]llmflow.GPULimits{}
	for _, a := range accts {
		got[a.Name] = a.Limits
	}
	if got[org] != (llmflow.GPULimits{GPUs: 2, HasGPUs: true}) || got[team] != (llmflow.GPULimits{Minutes: 600, HasMinutes: true}) {
		t.Errorf("stored limits after the listing without limit columns: %+v", got)
	}
	// slurmdbd after it: nothing to change (no flip-flop between sources)
	if stdout, _ := run("--from-slurmdbd", "--dsn-file", "/etc/slurm/llmflow-slurmdbd.dsn", "--dry-run"); !strings.Contains(stdout, " 0 limits changed,") {
		t.Errorf("slurmdbd after the listing:\n%s", stdout)
	}
}

// TestSyncUserLimits: a user association's GrpTRESMins and GrpTRES, set
// with the real sacctmgr, are imported from both sources with the user
// association (a budget over the keys its user owns in the account, and a
// cap on their requests in flight), no longer listed as not enforced;
// MaxTRES, a per-job cap, still is.
func TestSyncUserLimits(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	cluster, org, team, user := "llmt_unl"+sfx, "uno"+sfx, "unt"+sfx, "unu"+sfx
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() {
		exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run()
		exec.Command("sacctmgr", "-i", "delete", "user", user).Run()
	})
	sam(t, "add", "account", org, "cluster="+cluster, "GrpTRES=gres/gpu=16")
	sam(t, "add", "account", team, "parent="+org, "cluster="+cluster, "MaxTRES=gres/gpu=8")
	sam(t, "add", "user", user, "account="+team, "cluster="+cluster, "GrpTRESMins=gres/gpu=600", "GrpTRES=gres/gpu=2")

	for _, src := range [][]string{{"--from-sacctmgr"}, {"--from-slurmdbd", "--dsn-file", "/etc/slurm/llmflow-slurmdbd.dsn"}} {
		dir := t.TempDir()
		path := syncConfig(t, dir, "http://127.0.0.1:9")
		var out, errb bytes.Buffer
		if code := Run(context.Background(), append([]string{"sync", "-c", path, "--cluster", cluster}, src...), &out, &errb); code != 0 {
			t.Fatalf("sync %v: %d\n%s%s", src, code, out.String(), errb.String())
		}
		got := errb.String()
		if w := "note: limit not enforced: MaxTRES=gres/gpu=8 of account " + team + " (a per-job cap"; !strings.Contains(got, w) {
			t.Errorf("%v: stderr lacks %q:\n%s", src, w, got)
		}
		if strings.Contains(got, "GrpTRESMins=gres/gpu=600 of user") || strings.Contains(got, "GrpTRES=gres/gpu=2 of user") || strings.Contains(got, "of account "+org) {
			t.Errorf("%v: an enforced limit listed as not enforced:\n%s", src, got)
		}
		db, err := store.OpenSQLite(t.Context(), filepath.Join(dir, "llmflow.db"))
		if err != nil {
			t.Fatal(err)
		}
		accts, err := db.Accounts(t.Context())
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		var lim llmflow.GPULimits
		for _, a := range accts {
			for _, u := range a.Users {
				if a.Name == team && u.User == user {
					lim = u.Limits
				}
			}
		}
		if lim != (llmflow.GPULimits{Minutes: 600, HasMinutes: true, GPUs: 2, HasGPUs: true}) {
			t.Errorf("%v: %s's limits in %s as stored: %+v", src, user, team, lim)
		}
		var found bool
		for _, bud := range budgets.FromSlurm(accts, budgets.Month, 0) {
			if bud.Kind == budgets.KindUser && bud.Name == team+"/"+user && bud.MaxCost == 10 {
				found = true
			}
		}
		if !found {
			t.Errorf("%v: no 10 GPU-hour budget over %s's keys in %s", src, user, team)
		}
	}
}
