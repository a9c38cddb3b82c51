package budgets_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
)

func TestFromSlurm(t *testing.T) {
	mins := func(n int64) llmflow.GPULimits { return llmflow.GPULimits{Minutes: n, HasMinutes: true} }
	accts := llmflow.Accounts{
		{Name: "root", Kind: llmflow.KindRoot, Limits: mins(60)},                          // root: never a budget
		{Name: "etaba", Kind: llmflow.KindOrg, Limits: mins(120000)},                      // 2000 GPU-hours
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Limits: mins(0)},       // 0 is a real budget
		{Name: "nlp-llm", Kind: llmflow.KindProject, Parent: "lab-nlp", Limits: mins(90)}, // 1.5
		{Name: "lab-vision", Kind: llmflow.KindTeam, Parent: "etaba", Users: []llmflow.UserAssoc{ // user associations
			{User: "Ann", Limits: mins(30)},                                  // 0.5 GPU-hours over ann's keys in lab-vision
			{User: "ann", Partition: "gpu", Limits: mins(6)},                 // a partition's: keys have none
			{User: "bob", Limits: llmflow.GPULimits{GPUs: 1, HasGPUs: true}}, // a cap, not a budget
		}},
		{Name: "lab-old", Kind: llmflow.KindTeam, Parent: "etaba", Limits: mins(60), Disabled: true}, // deleted in Slurm
		{Name: "etabb", Kind: llmflow.KindOrg, Limits: llmflow.GPULimits{GPUs: 16, HasGPUs: true}},   // GrpTRES only: a cap, not a budget
	}
	got := budgets.FromSlurm(accts, budgets.Period("week"), 80)
	want := []budgets.Budget{
		{Scope: budgets.Scope{Kind: budgets.KindOrg, Name: "etaba"}, Period: "week", MaxCost: 2000, SoftLimit: 1600, Source: budgets.SourceSlurm},
		{Scope: budgets.Scope{Kind: budgets.KindTeam, Name: "lab-nlp"}, Period: "week", MaxCost: 0, Source: budgets.SourceSlurm},
		{Scope: budgets.Scope{Kind: budgets.KindProject, Name: "nlp-llm"}, Period: "week", MaxCost: 1.5, SoftLimit: 1.2, Source: budgets.SourceSlurm},
		{Scope: budgets.Scope{Kind: budgets.KindUser, Name: "lab-vision/ann"}, Period: "week", MaxCost: 0.5, SoftLimit: 0.4, Source: budgets.SourceSlurm},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("FromSlurm (-want +got):\n%s", d)
	}
	for _, b := range got {
		if err := b.Validate(); err != nil {
			t.Errorf("%s: %v", b.ID(), err)
		}
	}
	if got := budgets.FromSlurm(accts[:2], "month", 0); got[0].SoftLimit != 0 {
		t.Errorf("soft percent 0 gave a soft limit %v", got[0].SoftLimit)
	}
	// an admin budget on the same scope wins
	admin := []budgets.Budget{{Scope: budgets.Scope{Kind: budgets.KindOrg, Name: "etaba"}, Period: "month", MaxCost: 5}}
	m := budgets.Merge(admin, got)
	if len(m) != 4 || m[0].MaxCost != 5 || m[0].Source != budgets.SourceAdmin {
		t.Errorf("Merge: %+v", m)
	}
}
