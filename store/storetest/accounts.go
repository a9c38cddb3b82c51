package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

// AccountStore is what RunAccounts tests: the organisation tree imported
// from Slurm and the history of the imports.
type AccountStore interface {
	// Accounts returns the stored tree in the order it was saved; nil
	// before any import.
	Accounts(ctx context.Context) (llmflow.Accounts, error)
	// SaveSync records run and, when next is not nil, replaces the tree,
	// atomically; it returns the run's ID.
	SaveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun) (int64, error)
	// SyncRuns returns the last limit runs, newest first.
	SyncRuns(ctx context.Context, limit int) ([]llmflow.SyncRun, error)
}

// RunAccounts is the contract of AccountStore.
func RunAccounts(t *testing.T, open func(t *testing.T) AccountStore) {
	t.Run("Empty", func(t *testing.T) {
		s := open(t)
		accts, err := s.Accounts(t.Context())
		runs, err2 := s.SyncRuns(t.Context(), 10)
		if err != nil || err2 != nil || accts != nil || runs != nil {
			t.Fatalf("empty store: %v %v %v %v", accts, err, runs, err2)
		}
	})
	t.Run("RoundTrip", func(t *testing.T) {
		s := open(t)
		ctx := t.Context()
		tree := llmflow.Accounts{
			{Name: "root", Kind: llmflow.KindRoot, Users: []llmflow.UserAssoc{{User: "root", Shares: 5}}, Source: "slurm"},
			{Name: "etaba", Kind: llmflow.KindOrg, Shares: 13, Source: "slurm"},
			{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 60, Members: []string{"alice", "bob"},
				Users: []llmflow.UserAssoc{{User: "alice", Shares: 5}, {User: "bob", Partition: "gpu", UseParent: true}}, Source: "slurm"},
			{Name: "nlp-asr", Kind: llmflow.KindProject, Parent: "lab-nlp", UseParent: true, Source: "slurm"},
			{Name: "lab-old", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 1, Disabled: true, Source: "slurm"},
		}
		t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
		run := llmflow.SyncRun{Started: t0, Finished: t0.Add(time.Second), Source: "slurmdbd:hgx", Created: 4, Outcome: "applied"}
		id, err := s.SaveSync(ctx, tree, run)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Accounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tree, got); diff != "" {
			t.Errorf("accounts (-want +got):\n%s", diff)
		}
		// a run without a tree keeps the tree
		run2 := llmflow.SyncRun{Started: t0.Add(time.Minute), Finished: t0.Add(time.Minute), Source: "slurmdbd:hgx", Unchanged: 4, Outcome: "unchanged"}
		id2, err := s.SaveSync(ctx, nil, run2)
		if err != nil || id2 <= id {
			t.Fatalf("second run id %d (first %d): %v", id2, id, err)
		}
		if got, _ := s.Accounts(ctx); len(got) != 5 {
			t.Errorf("a run without a tree changed it: %v", got)
		}
		runs, err := s.SyncRuns(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		run.ID, run2.ID = id, id2
		if diff := cmp.Diff([]llmflow.SyncRun{run2, run}, runs); diff != "" {
			t.Errorf("runs (-want +got):\n%s", diff)
		}
		if runs, _ := s.SyncRuns(ctx, 1); len(runs) != 1 || runs[0].ID != id2 {
			t.Errorf("limit 1: %v", runs)
		}
		// a new tree replaces the old one whole
		if _, err := s.SaveSync(ctx, tree[:1], llmflow.SyncRun{Started: t0, Finished: t0, Source: "x", Outcome: "applied"}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Accounts(ctx); len(got) != 1 {
			t.Errorf("after replace: %v", got)
		}
	})
	t.Run("Atomic", func(t *testing.T) {
		s := open(t)
		ctx := t.Context()
		good := llmflow.Accounts{{Name: "a", Kind: llmflow.KindOrg, Shares: 1}}
		if _, err := s.SaveSync(ctx, good, llmflow.SyncRun{Started: time.Unix(1, 0), Finished: time.Unix(1, 0), Source: "x", Outcome: "applied"}); err != nil {
			t.Fatal(err)
		}
		dup := llmflow.Accounts{{Name: "b", Kind: llmflow.KindOrg}, {Name: "b", Kind: llmflow.KindOrg}}
		if _, err := s.SaveSync(ctx, dup, llmflow.SyncRun{Started: time.Unix(2, 0), Finished: time.Unix(2, 0), Source: "x", Outcome: "applied"}); err == nil {
			t.Fatal("a tree with a duplicate name was saved")
		}
		got, _ := s.Accounts(ctx)
		runs, _ := s.SyncRuns(ctx, 10)
		if len(got) != 1 || got[0].Name != "a" || len(runs) != 1 {
			t.Errorf("a failed save left accounts %v and runs %v: want the first tree and one run", got, runs)
		}
	})
}
