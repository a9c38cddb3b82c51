package slurmsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// The real hgx tree of the captures, mapped: root's children are
// organisations, theirs teams, deeper accounts projects.
func TestMapCaptures(t *testing.T) {
	tree, err := (&Sacctmgr{Cluster: "hgx", Files: captureFiles()}).Tree(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Map(tree)
	if err != nil {
		t.Fatal(err)
	}
	type u = llmflow.UserAssoc
	want := llmflow.Accounts{
		{Name: "root", Kind: llmflow.KindRoot, Users: []u{{User: "root"}}, Source: "slurm"},
		{Name: "etaba", Kind: llmflow.KindOrg, Shares: 13, Source: "slurm"},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 60, Members: []string{"alice"},
			Users: []u{{User: "alice", Shares: 5}}, Source: "slurm"},
		{Name: "nlp-asr", Kind: llmflow.KindProject, Parent: "lab-nlp", UseParent: true, Members: []string{"bob"},
			Users: []u{{User: "bob", Shares: 1}}, Source: "slurm"},
		{Name: "nlp-llm", Kind: llmflow.KindProject, Parent: "lab-nlp", Shares: 70, Members: []string{"alice", "bob"},
			Users: []u{{User: "alice", Shares: 10}, {User: "bob", Shares: 10}}, Source: "slurm"},
		{Name: "lab-vision", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 40, Members: []string{"bob", "dave"},
			Users: []u{{User: "bob", Shares: 20}, {User: "dave", Shares: 10}}, Source: "slurm"},
		{Name: "etabb", Kind: llmflow.KindOrg, Shares: 3, Source: "slurm", Limits: llmflow.GPULimits{GPUs: 16, HasGPUs: true}}, // GrpTRES=gres/gpu=16
		{Name: "lab-chem", Kind: llmflow.KindTeam, Parent: "etabb", Shares: 100, Members: []string{"carol", "dave"},
			Users: []u{{User: "carol", Shares: 50}, {User: "carol", Partition: "gpu", Shares: 50}, {User: "dave", UseParent: true}}, Source: "slurm"},
		{Name: "lab-old", Kind: llmflow.KindTeam, Parent: "etabb", Shares: 1, Disabled: true, Source: "slurm"},
	}
	if diff := cmp.Diff(want, order(got)); diff != "" {
		t.Errorf("mapped tree (-want +got):\n%s", diff)
	}
}

// fakeSource returns trees in turn, or an error.
type fakeSource struct {
	tree *sacctmgr.Tree
	err  error
}

func (f *fakeSource) Tree(context.Context) (*sacctmgr.Tree, error) { return f.tree.Clone(), f.err }

// memSink is a Sink in memory.
type memSink struct {
	mu    sync.Mutex
	accts llmflow.Accounts
	runs  []llmflow.SyncRun
	saves int // trees written
}

func (m *memSink) Accounts(context.Context) (llmflow.Accounts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(llmflow.Accounts(nil), m.accts...), nil
}

func (m *memSink) SaveSync(_ context.Context, next llmflow.Accounts, run llmflow.SyncRun) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if next != nil {
		m.accts = next
		m.saves++
	}
	run.ID = int64(len(m.runs) + 1)
	m.runs = append(m.runs, run)
	return run.ID, nil
}

func hgxTree() *sacctmgr.Tree {
	return &sacctmgr.Tree{Cluster: "hgx",
		Accounts: []sacctmgr.Account{
			{Name: "root", Shares: 1},
			{Name: "etaba", Parent: "root", Shares: 13},
			{Name: "etabb", Parent: "root", Shares: 3},
			{Name: "lab-chem", Parent: "etabb", Shares: 100},
			{Name: "lab-nlp", Parent: "etaba", Shares: 60},
		},
		Users: []sacctmgr.User{{Name: "alice", Account: "lab-nlp", Shares: 1}},
	}
}

func kinds(changes []Change) string {
	var s []string
	for _, c := range changes {
		s = append(s, string(c.Kind)+":"+c.Account.Name)
	}
	return strings.Join(s, " ")
}

func TestSyncerLifecycle(t *testing.T) {
	src := &fakeSource{tree: hgxTree()}
	sink := &memSink{}
	clock := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := &Syncer{Source: src, Name: "test:hgx", Sink: sink, Now: func() time.Time { return clock }}
	ctx := context.Background()
	step := func(name string, dry bool, wantOutcome, wantChanges string) Result {
		t.Helper()
		res, err := s.Run(ctx, dry)
		if err != nil && wantOutcome != "failed" {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Run.Outcome != wantOutcome || kinds(res.Changes) != wantChanges {
			t.Fatalf("%s: outcome %q changes %q, want %q %q", name, res.Run.Outcome, kinds(res.Changes), wantOutcome, wantChanges)
		}
		return res
	}
	step("dry first", true, "dry-run", "created:etaba created:etabb created:lab-chem created:lab-nlp")
	if sink.saves != 0 || len(sink.runs) != 1 || !sink.runs[0].DryRun {
		t.Fatalf("a dry run wrote %d trees and %d runs: want only its record", sink.saves, len(sink.runs))
	}
	res := step("first", false, "applied", "created:etaba created:etabb created:lab-chem created:lab-nlp")
	if res.Run.Created != 4 || res.Run.ID != 2 || len(res.Accounts) != 4 {
		t.Fatalf("first run %+v, %d accounts", res.Run, len(res.Accounts))
	}
	step("no change", false, "unchanged", "")
	if sink.saves != 1 {
		t.Fatalf("a run without change wrote the tree (%d writes)", sink.saves)
	}
	// re-share, re-parent, a new member
	src.tree.Accounts[4].Shares = 80
	src.tree.Accounts[3].Parent = "etaba"
	src.tree.Users = append(src.tree.Users, sacctmgr.User{Name: "bob", Account: "lab-nlp"})
	res = step("changes", false, "applied", "reparented:lab-chem shares:lab-nlp members:lab-nlp")
	if res.Run.SharesChanged != 1 || res.Run.Reparented != 1 || res.Run.Members != 1 || res.Run.Unchanged != 2 {
		t.Errorf("counts %+v", res.Run)
	}
	// removed in Slurm: disabled, never deleted
	src.tree.Accounts = src.tree.Accounts[:4]
	src.tree.Users = nil
	res = step("removed", false, "applied", "disabled:lab-nlp")
	var nlp *llmflow.Account
	for i := range res.Accounts {
		if res.Accounts[i].Name == "lab-nlp" {
			nlp = &res.Accounts[i]
		}
	}
	if nlp == nil || !nlp.Disabled {
		t.Fatalf("removed account: %+v, want kept and disabled", nlp)
	}
	step("removed again", false, "unchanged", "")
	// back in Slurm
	src.tree = hgxTree()
	step("re-added", false, "applied", "reparented:lab-chem shares:lab-nlp re-enabled:lab-nlp members:lab-nlp")
	// a failing source is recorded and keeps the tree
	src.err = errors.New("sacctmgr: Connection refused")
	before := len(sink.accts)
	res = step("failure", false, "failed", "")
	if !strings.Contains(res.Run.Error, "Connection refused") || len(sink.accts) != before || sink.runs[len(sink.runs)-1].Outcome != "failed" {
		t.Errorf("failed run %+v; stored %d accounts (had %d)", res.Run, len(sink.accts), before)
	}
}

func TestCombine(t *testing.T) {
	slurm := llmflow.Accounts{
		{Name: "etaba", Kind: llmflow.KindOrg, Shares: 13, Source: "slurm"},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 60, Source: "slurm"},
	}
	cfg := llmflow.Accounts{
		{Name: "etabA", Kind: llmflow.KindOrg, Shares: 0.8, Source: "config"},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etabA", Shares: 1, Source: "config"},
		{Name: "lab-extra", Kind: llmflow.KindTeam, Parent: "etabA", Shares: 0.5, Source: "config"},
	}
	where := func(name string) string { return "gateway.hcl:3:8" }
	got, err := Combine(slurm, cfg, where)
	if err != nil {
		t.Fatal(err)
	}
	want := llmflow.Accounts{
		{Name: "etaba", Kind: llmflow.KindOrg, Shares: 13, Source: "slurm"},
		{Name: "lab-extra", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 0.5, Source: "config"},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 60, Source: "slurm"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("combined (-want +got):\n%s", diff)
	}
	cfg[1].Parent = "etabB"
	cfg = append(cfg, llmflow.Account{Name: "etabB", Kind: llmflow.KindOrg, Shares: 0.2})
	_, err = Combine(slurm, cfg, where)
	if err == nil || !strings.Contains(err.Error(), "gateway.hcl:3:8") || !strings.Contains(err.Error(), `Slurm has account "lab-nlp" under "etaba"`) {
		t.Errorf("conflicting parent: %v", err)
	}
}

// TestSyncerProgress: the stages a run tells Progress: the associations
// read, then the changes applied when it writes some (none for a dry run,
// a run without change or a failed read).
func TestSyncerProgress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored bool // the tree imported before
		dry    bool
		err    error
		want   []string
	}{
		{"First", false, false, nil, []string{"reading test:hgx associations 0/0", "reading test:hgx associations 6/6",
			"applying changes 0/4", "applying changes 4/4"}},
		{"Dry", false, true, nil, []string{"reading test:hgx associations 0/0", "reading test:hgx associations 6/6"}},
		{"Unchanged", true, false, nil, []string{"reading test:hgx associations 0/0", "reading test:hgx associations 6/6"}},
		{"Failed", false, false, errors.New("sacctmgr: Connection refused"), []string{"reading test:hgx associations 0/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := &memSink{}
			if tc.stored {
				if _, err := (&Syncer{Source: &fakeSource{tree: hgxTree()}, Name: "test:hgx", Sink: sink}).Run(context.Background(), false); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			s := &Syncer{Source: &fakeSource{tree: hgxTree(), err: tc.err}, Name: "test:hgx", Sink: sink,
				Progress: func(stage, unit string, done, total int) {
					got = append(got, fmt.Sprintf("%s %s %d/%d", stage, unit, done, total))
				}}
			if _, err := s.Run(context.Background(), tc.dry); (err != nil) != (tc.err != nil) {
				t.Fatalf("run: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("told (-want +got):\n%s", diff)
			}
		})
	}
}
