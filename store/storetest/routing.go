package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

// RoutingStore is what RunRouting tests: upstreams and aliases registered
// through the admin API, and the generation their changes bump.
type RoutingStore interface {
	AdminGeneration(ctx context.Context) (int64, error)
	// PutUpstream creates or replaces (Model, Name), keeping CreatedAt.
	PutUpstream(ctx context.Context, u llmflow.RuntimeUpstream) error
	// DeleteUpstream removes one; ErrNotFound when there is none.
	DeleteUpstream(ctx context.Context, model, name string) error
	// Upstreams returns every one by model and name.
	Upstreams(ctx context.Context) ([]llmflow.RuntimeUpstream, error)
	// PutAlias creates or switches an alias.
	PutAlias(ctx context.Context, a llmflow.ModelAlias) error
	// DeleteAlias removes one; ErrNotFound when there is none.
	DeleteAlias(ctx context.Context, name string) error
	// Aliases returns every alias by name.
	Aliases(ctx context.Context) ([]llmflow.ModelAlias, error)
}

// RunRouting is the contract of RoutingStore. open must return a new,
// empty store each time it is called; reopen, when not nil, opens the
// same store again (the rows must survive a restart).
func RunRouting(t *testing.T, open func(t *testing.T) RoutingStore, reopen func(t *testing.T, s RoutingStore) RoutingStore) {
	t.Run("Upstreams", func(t *testing.T) { testUpstreams(t, open(t), reopen) })
	t.Run("Aliases", func(t *testing.T) { testAliases(t, open(t), reopen) })
	t.Run("Invalid", func(t *testing.T) { testRoutingInvalid(t, open(t)) })
}

func testUpstreams(t *testing.T, s RoutingStore, reopen func(t *testing.T, s RoutingStore) RoutingStore) {
	ctx := t.Context()
	if us, err := s.Upstreams(ctx); err != nil || len(us) != 0 {
		t.Fatalf("empty: %v %v", us, err)
	}
	g0, err := s.AdminGeneration(ctx)
	mustNil(t, err)
	b := llmflow.RuntimeUpstream{Model: "m", Name: "b", BaseURL: "http://10.0.0.2:8000", CreatedAt: base, UpdatedAt: base, By: "alice", KeyName: "gpu02.key"}
	a := llmflow.RuntimeUpstream{Model: "m", Name: "a", BaseURL: "http://10.0.0.1:8000", CreatedAt: base, UpdatedAt: base, By: "alice"}
	other := llmflow.RuntimeUpstream{Model: "l", Name: "z", BaseURL: "https://gpu.example/v", CreatedAt: base, UpdatedAt: base}
	mustNil(t, s.PutUpstream(ctx, b))
	mustNil(t, s.PutUpstream(ctx, a))
	mustNil(t, s.PutUpstream(ctx, other))
	g1, err := s.AdminGeneration(ctx)
	mustNil(t, err)
	if g1 <= g0 {
		t.Errorf("generation %d after puts, was %d", g1, g0)
	}
	// replace: new URL, updated time and actor, first created time kept
	a2 := a
	a2.BaseURL, a2.UpdatedAt, a2.CreatedAt, a2.By = "http://10.0.0.9:8000", base.Add(time.Hour), base.Add(time.Hour), "bob"
	mustNil(t, s.PutUpstream(ctx, a2))
	a2.CreatedAt = base
	got, err := s.Upstreams(ctx)
	mustNil(t, err)
	if diff := cmp.Diff([]llmflow.RuntimeUpstream{other, a2, b}, got); diff != "" {
		t.Errorf("upstreams by model, name (-want +got):\n%s", diff)
	}
	for _, u := range got {
		checkUTC(t, "created_at", u.CreatedAt)
		checkUTC(t, "updated_at", u.UpdatedAt)
	}
	checkCode(t, s.DeleteUpstream(ctx, "m", "nope"), llmflow.ENOTFOUND)
	checkCode(t, s.DeleteUpstream(ctx, "l", "b"), llmflow.ENOTFOUND) // the name belongs to another model
	g2, _ := s.AdminGeneration(ctx)
	mustNil(t, s.DeleteUpstream(ctx, "m", "b"))
	if g3, _ := s.AdminGeneration(ctx); g3 <= g2 {
		t.Errorf("generation %d after delete, was %d", g3, g2)
	}
	if reopen != nil {
		s = reopen(t, s)
	}
	got, err = s.Upstreams(ctx)
	mustNil(t, err)
	if diff := cmp.Diff([]llmflow.RuntimeUpstream{other, a2}, got); diff != "" {
		t.Errorf("after delete and reopen (-want +got):\n%s", diff)
	}
}

func testAliases(t *testing.T, s RoutingStore, reopen func(t *testing.T, s RoutingStore) RoutingStore) {
	ctx := t.Context()
	if as, err := s.Aliases(ctx); err != nil || len(as) != 0 {
		t.Fatalf("empty: %v %v", as, err)
	}
	fast := llmflow.ModelAlias{Name: "fast", Model: "m", UpdatedAt: base, By: "alice"}
	gpt := llmflow.ModelAlias{Name: "gpt-4o", Model: "m", UpdatedAt: base}
	mustNil(t, s.PutAlias(ctx, gpt))
	mustNil(t, s.PutAlias(ctx, fast))
	g0, _ := s.AdminGeneration(ctx)
	fast.Model, fast.UpdatedAt, fast.By = "l", base.Add(time.Minute), "bob" // switched
	mustNil(t, s.PutAlias(ctx, fast))
	if g1, _ := s.AdminGeneration(ctx); g1 <= g0 {
		t.Errorf("generation %d after a switch, was %d", g1, g0)
	}
	if reopen != nil {
		s = reopen(t, s)
	}
	got, err := s.Aliases(ctx)
	mustNil(t, err)
	if diff := cmp.Diff([]llmflow.ModelAlias{fast, gpt}, got); diff != "" {
		t.Errorf("aliases (-want +got):\n%s", diff)
	}
	checkUTC(t, "updated_at", got[0].UpdatedAt)
	checkCode(t, s.DeleteAlias(ctx, "slow"), llmflow.ENOTFOUND)
	mustNil(t, s.DeleteAlias(ctx, "fast"))
	checkCode(t, s.DeleteAlias(ctx, "fast"), llmflow.ENOTFOUND)
	got, err = s.Aliases(ctx)
	mustNil(t, err)
	if diff := cmp.Diff([]llmflow.ModelAlias{gpt}, got); diff != "" {
		t.Errorf("after delete (-want +got):\n%s", diff)
	}
}

func testRoutingInvalid(t *testing.T, s RoutingStore) {
	ctx := t.Context()
	checkCode(t, s.PutUpstream(ctx, llmflow.RuntimeUpstream{Model: "m", Name: "a", CreatedAt: base, UpdatedAt: base}), llmflow.EINVALID)
	checkCode(t, s.PutUpstream(ctx, llmflow.RuntimeUpstream{Name: "a", BaseURL: "http://x", CreatedAt: base, UpdatedAt: base}), llmflow.EINVALID)
	checkCode(t, s.PutAlias(ctx, llmflow.ModelAlias{Name: "a", UpdatedAt: base}), llmflow.EINVALID)
	if us, err := s.Upstreams(ctx); err != nil || len(us) != 0 {
		t.Errorf("invalid puts stored %v (%v)", us, err)
	}
}
