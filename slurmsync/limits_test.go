package slurmsync

import (
	"testing"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// Map carries an account's GPU limits; Diff reports a change of them as
// one "limits" change, counted in the run.
func TestLimitsMapDiff(t *testing.T) {
	tree := &sacctmgr.Tree{Cluster: "c", Accounts: []sacctmgr.Account{
		{Name: "root"},
		{Name: "org", Parent: "root", Shares: 1, Limits: llmflow.GPULimits{GPUs: 8, HasGPUs: true}},
		{Name: "team", Parent: "org", Shares: 1, Limits: llmflow.GPULimits{Minutes: 90, HasMinutes: true}},
	}}
	cur, err := Map(tree)
	if err != nil {
		t.Fatal(err)
	}
	if cur[0].Limits != tree.Accounts[1].Limits || cur[1].Limits != tree.Accounts[2].Limits {
		t.Fatalf("Map lost the limits: %+v", cur)
	}
	old := append(llmflow.Accounts(nil), cur...)
	old[0].Limits = llmflow.GPULimits{}
	old[1].Limits = llmflow.GPULimits{Minutes: 60, HasMinutes: true}
	changes, next := Diff(old, cur)
	want := []string{
		"limits      org      org: none → GrpTRES=gres/gpu=8",
		"limits      team     team: GrpTRESMins=gres/gpu=60 (1 GPU-hours) → GrpTRESMins=gres/gpu=90 (1.5 GPU-hours)",
	}
	if len(changes) != len(want) {
		t.Fatalf("changes %v", changes)
	}
	for i, c := range changes {
		if c.Kind != LimitsChanged || c.String() != want[i] {
			t.Errorf("got  %s\nwant %s", c, want[i])
		}
	}
	var run llmflow.SyncRun
	Count(&run, changes, len(next))
	if run.LimitsChanged != 2 || run.Unchanged != 0 || run.SharesChanged != 0 {
		t.Errorf("run %+v", run)
	}
	if changes, _ := Diff(cur, cur); len(changes) != 0 {
		t.Errorf("no change, yet %v", changes)
	}
}
