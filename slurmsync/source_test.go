package slurmsync

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

// The captured hgx tree, as both sources must give it.
func checkHGX(t *testing.T, tr *sacctmgr.Tree) {
	t.Helper()
	if tr.Cluster != "hgx" {
		t.Errorf("cluster %q", tr.Cluster)
	}
	var names []string
	for _, a := range tr.Accounts {
		names = append(names, a.Name)
	}
	want := "root etaba lab-nlp nlp-asr nlp-llm lab-vision etabb lab-chem lab-old"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("accounts %s, want %s", got, want)
	}
	var users []string
	for _, u := range tr.Users {
		s := u.Account + "/" + u.Name
		if u.Partition != "" {
			s += "@" + u.Partition
		}
		if u.Default {
			s += "*"
		}
		if u.Deleted {
			s += "(deleted)"
		}
		if u.UseParent {
			s += "=parent"
		}
		users = append(users, s)
	}
	wantU := "root/root* lab-nlp/alice nlp-asr/bob nlp-llm/alice* nlp-llm/bob lab-vision/bob* lab-vision/dave " +
		"lab-chem/carol* lab-chem/carol@gpu lab-chem/dave*=parent lab-old/erin(deleted)"
	if got := strings.Join(users, " "); got != wantU {
		t.Errorf("users\n%s, want\n%s", got, wantU)
	}
	asr, _ := tr.FindAccount("nlp-asr")
	if !asr.UseParent || asr.Shares != sacctmgr.ParentShares || asr.Description != "speech recognition | asr, `v2`" ||
		asr.Organization != "etaba" || asr.Parent != "lab-nlp" || asr.Deleted {
		t.Errorf("nlp-asr = %+v", asr)
	}
	old, _ := tr.FindAccount("lab-old")
	if !old.Deleted || old.Parent != "etabb" || old.Description != "retired lab" {
		t.Errorf("lab-old = %+v", old)
	}
	if a, _ := tr.FindAccount("etaba"); a.Shares != 13 || a.Parent != "root" {
		t.Errorf("etaba = %+v", a)
	}
}

func TestSacctmgrFilesCaptures(t *testing.T) {
	s := &Sacctmgr{Cluster: "hgx", Files: captureFiles()}
	tr, err := s.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkHGX(t, tr)
}

// fake returns a Sacctmgr running this test binary as sacctmgr.
func fake(t *testing.T, mode string) (*Sacctmgr, string) {
	t.Setenv("FAKE_SACCTMGR", mode)
	log := filepath.Join(t.TempDir(), "args")
	t.Setenv("FAKE_SACCTMGR_LOG", log)
	return &Sacctmgr{Cluster: "hgx", Path: os.Args[0]}, log
}

func TestSacctmgrExecFake(t *testing.T) {
	s, log := fake(t, "captures")
	tr, err := s.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkHGX(t, tr)
	b, _ := os.ReadFile(log)
	runs := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(runs) != int(numListings) {
		t.Errorf("%d runs, want %d:\n%s", len(runs), numListings, b)
	}
	files, err := (&Sacctmgr{Cluster: "hgx", Files: captureFiles()}).Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "exec vs files", tr, files)
}

func TestSacctmgrExecArgs(t *testing.T) {
	s, log := fake(t, "captures")
	s.Args = map[Listing][]string{
		Assocs: {"--parsable2", "show", "assoc", "where", "cluster=hgx", "format=Cluster,Account,User,Partition,Share,ParentName"},
	}
	tr, err := s.Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(log)
	if got := strings.TrimSpace(string(b)); got != strings.Join(s.Args[Assocs], " ") {
		t.Errorf("ran %q", got)
	}
	// Plain listing only: no deleted rows, no defaults, no descriptions.
	for _, a := range tr.Accounts {
		if a.Name == "lab-old" || a.Description != "" || a.Deleted {
			t.Errorf("account %+v", a)
		}
	}
}

func TestSacctmgrExecFailure(t *testing.T) {
	s, _ := fake(t, "fail")
	_, err := s.Tree(context.Background())
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "exit status 1: Unknown field 'normshares'") || strings.HasSuffix(msg, "\n") {
		t.Errorf("error %q: want the exit status and the trimmed stderr", msg)
	}
	if !strings.Contains(msg, os.Args[0]+" --parsable2 show") {
		t.Errorf("error %q: want the command line", msg)
	}
}

func TestSacctmgrMissingBinary(t *testing.T) {
	for _, path := range []string{"/nonexistent/sacctmgr", "no-such-sacctmgr-binary"} {
		_, err := (&Sacctmgr{Cluster: "hgx", Path: path}).Tree(context.Background())
		if err == nil || !strings.Contains(err.Error(), path+" not found (install Debian's slurm-client") {
			t.Errorf("%s: error %v", path, err)
		}
	}
}

func TestSacctmgrTimeout(t *testing.T) {
	s, _ := fake(t, "sleep")
	s.Timeout = 300 * time.Millisecond
	start := time.Now()
	_, err := s.Tree(context.Background())
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Errorf("error %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestSacctmgrCancel(t *testing.T) {
	s, _ := fake(t, "sleep")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.Tree(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestSacctmgrBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.psv")
	os.WriteFile(bad, []byte("Cluster|Account|User|Partition|Share|ParentName\nhgx|root|||1|\nhgx|etaba|||x|root\n"), 0o644)
	if _, err := (&Sacctmgr{Cluster: "hgx", Files: map[Listing]string{Assocs: bad}}).Tree(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "line 3") {
		t.Errorf("error %v", err)
	}
	if _, err := (&Sacctmgr{Cluster: "hgx; rm -rf /", Files: captureFiles()}).Tree(context.Background()); err == nil {
		t.Error("bad cluster name accepted")
	}
	if _, err := (&Sacctmgr{Cluster: "hgx", Files: map[Listing]string{Defaults: bad}}).Tree(context.Background()); err == nil {
		t.Error("no Assocs listing accepted")
	}
}

func TestNormalize(t *testing.T) {
	tr := &sacctmgr.Tree{
		Cluster: "c",
		Accounts: []sacctmgr.Account{
			{Name: "b", Parent: "root", Shares: 0, UseParent: true},
			{Name: "gone", Parent: "vanished", Deleted: true},
			{Name: "a", Parent: "root", Shares: 2},
			{Name: "root"},
		},
		Users: []sacctmgr.User{
			{Name: "x", Account: "a", Partition: "gpu"},
			{Name: "x", Account: "a", Default: true},
			{Name: "y", Account: "gone", Deleted: true},
			{Name: "w", Account: "b", Deleted: true, Default: true},
		},
	}
	if err := Normalize(tr); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range tr.Accounts {
		got = append(got, a.Name)
	}
	for _, u := range tr.Users {
		got = append(got, u.Account+"/"+u.Name+"@"+u.Partition)
	}
	if s := strings.Join(got, " "); s != "root a b a/x@ a/x@gpu b/w@" {
		t.Errorf("order %s", s)
	}
	if tr.Accounts[2].Shares != sacctmgr.ParentShares || tr.Users[2].Default {
		t.Errorf("%+v %+v", tr.Accounts[2], tr.Users[2])
	}
	live := &sacctmgr.Tree{Accounts: []sacctmgr.Account{{Name: "root"}, {Name: "a", Parent: "nope"}}}
	if err := Normalize(live); err == nil {
		t.Error("live account with a missing parent accepted")
	}
	if err := Normalize(&sacctmgr.Tree{Cluster: "c"}); err == nil {
		t.Error("empty tree accepted")
	}
}

// FuzzListingPair: telling the two listings apart never panics, and a
// listing with more lines than another that it contains is the
// withdeleted one.
func FuzzListingPair(f *testing.F) {
	f.Add([]byte("Cluster|Account\nhgx|root\n"), []byte("Cluster|Account\nhgx|root\nhgx|old\n"))
	f.Add([]byte("Cluster - 'hgx'\n"), []byte(""))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		IsDump(a)
		first, err := WithDeletedFirst(a, b)
		if err != nil {
			return
		}
		both := append(append(append([]byte(nil), a...), '\n'), b...)
		if again, err := WithDeletedFirst(both, a); err != nil || !again {
			t.Errorf("a listing holding every line of another is not taken as the withdeleted one")
		}
		_ = first
	})
}

func TestIsDump(t *testing.T) {
	for in, want := range map[string]bool{
		"# comment\n\nCluster - 'hgx':Fairshare=1\n": true,
		"Cluster-'hgx'\n":        true,
		"Cluster|Account|User\n": false,
		"hgx|root|||1\n":         false,
		"":                       false,
	} {
		if got := IsDump([]byte(in)); got != want {
			t.Errorf("IsDump(%q) = %v", in, got)
		}
	}
}
