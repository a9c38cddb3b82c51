package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/google/go-cmp/cmp"
)

// BudgetStore is what the budget contract tests: budgets, their
// increases, the spend they read from rollups, and the key settings that
// come with per-key limits.
type BudgetStore interface {
	PutBudget(ctx context.Context, b budgets.Budget) error
	DeleteBudget(ctx context.Context, sc budgets.Scope) error
	ListBudgets(ctx context.Context) ([]budgets.Budget, error)
	AddIncrease(ctx context.Context, in budgets.Increase) (budgets.Increase, error)
	Increases(ctx context.Context, now time.Time) ([]budgets.Increase, error)
	BudgetSpend(ctx context.Context, sc budgets.Scope, from, recent time.Time) (budgets.StoredSpend, error)
	SetKeyLimits(ctx context.Context, id string, rpm, tpm, maxInFlight int) error
	SetKeyDisabled(ctx context.Context, id string, disabled bool) error

	CreateKey(ctx context.Context, k llmflow.Key) error
	KeyByID(ctx context.Context, id string) (llmflow.Key, error)
	KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error)
	WriteRecords(ctx context.Context, rs []llmflow.Record) error
}

// RunBudgets runs the budget contract; open returns a new, empty store.
func RunBudgets(t *testing.T, open func(t *testing.T) BudgetStore) {
	t.Run("PutListDelete", func(t *testing.T) { testBudgetsCRUD(t, open(t)) })
	t.Run("Invalid", func(t *testing.T) { testBudgetsInvalid(t, open(t)) })
	t.Run("Increases", func(t *testing.T) { testIncreases(t, open(t)) })
	t.Run("Spend", func(t *testing.T) { testBudgetSpend(t, open(t)) })
	t.Run("KeyLimits", func(t *testing.T) { testKeyLimits(t, open(t)) })
}

func testBudgetsCRUD(t *testing.T, s BudgetStore) {
	ctx := t.Context()
	if bs, err := s.ListBudgets(ctx); err != nil || len(bs) != 0 {
		t.Fatalf("empty store: %v, %v", bs, err)
	}
	team := budgets.Budget{Scope: budgets.Scope{Kind: budgets.KindTeam, Name: "lab-nlp"}, Period: budgets.Month, MaxCost: 500, SoftLimit: 400, UpdatedAt: base}
	perModel := budgets.Budget{Scope: budgets.Scope{Kind: budgets.KindTeam, Name: "lab-nlp", Model: "llama"}, Period: budgets.Day, MaxCost: 5, UpdatedAt: base}
	tag := budgets.Budget{Scope: budgets.Scope{Kind: budgets.KindTag, Name: "café ☕"}, Period: budgets.Week, MaxCost: 0, UpdatedAt: base}
	for _, b := range []budgets.Budget{perModel, team, tag} {
		if err := s.PutBudget(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// Setting again replaces.
	team.MaxCost, team.UpdatedAt = 600, base.Add(time.Hour)
	if err := s.PutBudget(ctx, team); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListBudgets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []budgets.Budget{tag, team, perModel}
	for i := range want {
		want[i].Source = budgets.SourceAdmin
		want[i].UpdatedAt = time.UnixMicro(want[i].UpdatedAt.UnixMicro()).UTC()
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("ListBudgets (-want +got):\n%s", d)
	}
	if err := s.DeleteBudget(ctx, perModel.Scope); err != nil {
		t.Fatal(err)
	}
	checkCode(t, s.DeleteBudget(ctx, perModel.Scope), llmflow.ENOTFOUND)
	if got, _ := s.ListBudgets(ctx); len(got) != 2 {
		t.Fatalf("after delete: %+v", got)
	}
}

func testBudgetsInvalid(t *testing.T, s BudgetStore) {
	for _, b := range []budgets.Budget{
		{Scope: budgets.Scope{Kind: "user", Name: "x"}, Period: budgets.Day},
		{Scope: budgets.Scope{Kind: budgets.KindOrg, Name: ""}, Period: budgets.Day},
		{Scope: budgets.Scope{Kind: budgets.KindOrg, Name: "a"}, Period: "year"},
		{Scope: budgets.Scope{Kind: budgets.KindOrg, Name: "a"}, Period: budgets.Day, MaxCost: -1},
	} {
		checkCode(t, s.PutBudget(t.Context(), b), llmflow.EINVALID)
	}
	_, err := s.AddIncrease(t.Context(), budgets.Increase{Scope: budgets.Scope{Kind: budgets.KindOrg, Name: "a"}, Amount: 1, ExpiresAt: base, CreatedAt: base})
	checkCode(t, err, llmflow.EINVALID)
}

func testIncreases(t *testing.T, s BudgetStore) {
	ctx := t.Context()
	sc := budgets.Scope{Kind: budgets.KindProject, Name: "p1"}
	a, err := s.AddIncrease(ctx, budgets.Increase{Scope: sc, Amount: 10, ExpiresAt: base.Add(time.Hour), CreatedAt: base})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.AddIncrease(ctx, budgets.Increase{Scope: sc, Amount: 2.5, ExpiresAt: base.Add(48 * time.Hour), CreatedAt: base})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || b.ID <= a.ID {
		t.Fatalf("ids %d %d", a.ID, b.ID)
	}
	got, err := s.Increases(ctx, base)
	if err != nil || len(got) != 2 || got[0].Amount != 10 || !got[1].ExpiresAt.Equal(b.ExpiresAt) || got[1].Scope != sc {
		t.Fatalf("Increases at creation: %+v, %v", got, err)
	}
	checkUTC(t, "ExpiresAt", got[0].ExpiresAt)
	got, err = s.Increases(ctx, base.Add(time.Hour)) // the first expires then
	if err != nil || len(got) != 1 || got[0].ID != b.ID {
		t.Fatalf("Increases an hour later: %+v, %v", got, err)
	}
}

func testBudgetSpend(t *testing.T, s BudgetStore) {
	ctx := t.Context()
	h0 := base.Truncate(time.Hour)
	rec := func(id string, at time.Time, org, team, project, key, model string, gh float64, tags ...string) llmflow.Record {
		return llmflow.Record{RequestID: id, Time: at, Org: org, Team: team, Project: project, KeyID: key, Model: model, GPUHours: gh, Tags: tags, Status: 200, Outcome: llmflow.OutcomeOK}
	}
	// keys owned by Alice (in team t and in its project p) and by bob
	for i, k := range []llmflow.Key{{ID: "ka", Team: "t", Owner: "Alice"}, {ID: "kp", Team: "t", Project: "p", Owner: "alice"}, {ID: "kb", Team: "t", Owner: "bob"}} {
		k.Name, k.Hash, k.CreatedAt = k.ID, [32]byte{byte(i + 1), 0x55}, base
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	rs := []llmflow.Record{
		rec("u1", h0.Add(time.Minute), "o", "t", "", "ka", "m1", 32),
		rec("u2", h0.Add(time.Minute), "o", "t", "p", "kp", "m1", 64),
		rec("u3", h0.Add(time.Minute), "o", "t", "", "kb", "m1", 128),
		rec("r1", h0.Add(-48*time.Hour), "o", "t", "p", "k1", "m1", 1, "a"),
		rec("r2", h0.Add(-time.Hour), "o", "t", "p", "k1", "m2", 2, "a", "b"),
		rec("r3", h0.Add(time.Minute), "o", "t", "", "k2", "m1", 4),
		rec("r4", h0.Add(2*time.Minute), "o", "t2", "", "k3", "m1", 8, "b"),
		rec("r5", h0.Add(-72*time.Hour), "o", "t", "p", "k1", "m1", 16), // before the period
	}
	if err := s.WriteRecords(ctx, rs); err != nil {
		t.Fatal(err)
	}
	from, recent := h0.Add(-60*time.Hour), h0.Add(-time.Hour)
	for _, tc := range []struct {
		sc    budgets.Scope
		older float64
		hours map[time.Time]float64
	}{
		{budgets.Scope{Kind: budgets.KindOrg, Name: "o"}, 1, map[time.Time]float64{h0.Add(-time.Hour): 2, h0: 12 + 224}},
		{budgets.Scope{Kind: budgets.KindTeam, Name: "t"}, 1, map[time.Time]float64{h0.Add(-time.Hour): 2, h0: 4 + 224}},
		{budgets.Scope{Kind: budgets.KindTeam, Name: "t", Model: "m1"}, 1, map[time.Time]float64{h0: 4 + 224}},
		{budgets.Scope{Kind: budgets.KindProject, Name: "p"}, 1, map[time.Time]float64{h0.Add(-time.Hour): 2, h0: 64}},
		// a user association's: the keys the user owns in that account
		// (owner names compared as Slurm keeps them, lower case)
		{budgets.Scope{Kind: budgets.KindUser, Name: "t/alice"}, 0, map[time.Time]float64{h0: 32}},
		{budgets.Scope{Kind: budgets.KindUser, Name: "p/alice"}, 0, map[time.Time]float64{h0: 64}},
		{budgets.Scope{Kind: budgets.KindUser, Name: "t/bob", Model: "m1"}, 0, map[time.Time]float64{h0: 128}},
		{budgets.Scope{Kind: budgets.KindKey, Name: "k3"}, 0, map[time.Time]float64{h0: 8}},
		{budgets.Scope{Kind: budgets.KindTag, Name: "b"}, 0, map[time.Time]float64{h0.Add(-time.Hour): 2, h0: 8}},
		{budgets.Scope{Kind: budgets.KindTag, Name: "a", Model: "m1"}, 1, map[time.Time]float64{}},
		{budgets.Scope{Kind: budgets.KindOrg, Name: "nobody"}, 0, map[time.Time]float64{}},
	} {
		got, err := s.BudgetSpend(ctx, tc.sc, from, recent)
		if err != nil {
			t.Fatalf("%v: %v", tc.sc, err)
		}
		if got.Older != tc.older || !cmp.Equal(got.Hours, tc.hours) {
			t.Errorf("%v: older %v hours %v, want %v %v", tc.sc, got.Older, got.Hours, tc.older, tc.hours)
		}
		for h := range got.Hours {
			checkUTC(t, "hour", h)
		}
	}
	_, err := s.BudgetSpend(ctx, budgets.Scope{Kind: "nope", Name: "x"}, from, recent)
	checkCode(t, err, llmflow.EINVALID)
}

func testKeyLimits(t *testing.T, s BudgetStore) {
	ctx := t.Context()
	k := NewKey("limits", base)
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKeyLimits(ctx, k.ID, 60, 1000, 4); err != nil {
		t.Fatal(err)
	}
	got, err := s.KeyByID(ctx, k.ID)
	if err != nil || got.RPM != 60 || got.TPM != 1000 || got.MaxInFlight != 4 || got.Disabled {
		t.Fatalf("after SetKeyLimits: %+v, %v", got, err)
	}
	checkCode(t, s.SetKeyLimits(ctx, k.ID, -1, 0, 0), llmflow.EINVALID)
	checkCode(t, s.SetKeyLimits(ctx, "key_nope", 1, 1, 1), llmflow.ENOTFOUND)
	if err := s.SetKeyDisabled(ctx, k.ID, true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.KeyByHash(ctx, k.Hash); err != nil || !got.Disabled || got.Active() {
		t.Fatalf("disabled: %+v, %v", got, err)
	}
	if err := s.SetKeyDisabled(ctx, k.ID, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.KeyByID(ctx, k.ID); got.Disabled || !got.Active() {
		t.Fatalf("reactivated: %+v", got)
	}
	checkCode(t, s.SetKeyDisabled(ctx, "key_nope", true), llmflow.ENOTFOUND)
}
