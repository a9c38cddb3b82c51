package storetest

import (
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

// RunAccountLimits is the contract of the accounts' Slurm GPU limits
// (llmflow.Account.Limits) and of SyncRun.LimitsChanged: stored with the
// tree and read back as they were, no limit and a limit of 0 told apart.
func RunAccountLimits(t *testing.T, open func(t *testing.T) AccountStore) {
	s := open(t)
	ctx := t.Context()
	tree := llmflow.Accounts{
		{Name: "etaba", Kind: llmflow.KindOrg, Shares: 13, Source: "slurm",
			Limits: llmflow.GPULimits{Minutes: 600000, HasMinutes: true, GPUs: 26, HasGPUs: true}},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 60, Source: "slurm",
			Limits: llmflow.GPULimits{Minutes: 6000, HasMinutes: true}},
		{Name: "lab-cv", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 40, Source: "slurm",
			Limits: llmflow.GPULimits{HasGPUs: true}}, // GrpTRES=gres/gpu=0: no GPU at all
		{Name: "etabb", Kind: llmflow.KindOrg, Shares: 3, Source: "slurm"},
	}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	run := llmflow.SyncRun{Started: t0, Finished: t0, Source: "sacctmgr:hgx", Created: 4, LimitsChanged: 3, Outcome: "applied"}
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
	runs, err := s.SyncRuns(ctx, 1)
	run.ID = id
	if err != nil || len(runs) != 1 || runs[0] != run {
		t.Errorf("runs %+v, %v; want %+v", runs, err, run)
	}
}
