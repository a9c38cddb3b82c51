package storetest

import (
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

func testShareUsageNever(t *testing.T, s Store) {
	got, at, err := s.ShareUsage(t.Context(), "p")
	if err != nil || got != nil || !at.IsZero() {
		t.Fatalf("never saved: %v %v %v, want nothing and a zero time", got, at, err)
	}
}

func testShareUsageRoundTrip(t *testing.T, s Store) {
	ctx := t.Context()
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 123000, time.UTC)
	first := []llmflow.ShareUsage{
		{Path: []string{"etabA"}, GPUHours: 12.5},
		{Path: []string{"etabA", "lab-nlp"}, GPUHours: 10.25},
		{Path: []string{"etabA", "lab-nlp", "p|1/x"}, GPUHours: 1e-9},
		{Path: []string{"etabB"}, GPUHours: 0.1 + 0.2},
	}
	if err := s.SaveShareUsage(ctx, "p", t0, first); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveShareUsage(ctx, "other", t0, []llmflow.ShareUsage{{Path: []string{"x"}, GPUHours: 1}}); err != nil {
		t.Fatal(err)
	}
	got, at, err := s.ShareUsage(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if !at.Equal(t0) {
		t.Errorf("saved at %v, want %v", at, t0)
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	// a second save replaces the pool's usage; accounts gone from it are gone
	second := []llmflow.ShareUsage{{Path: []string{"etabB"}, GPUHours: 2}}
	if err := s.SaveShareUsage(ctx, "p", t0.Add(time.Minute), second); err != nil {
		t.Fatal(err)
	}
	got, at, _ = s.ShareUsage(ctx, "p")
	if diff := cmp.Diff(second, got); diff != "" || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("after replace at %v (-want +got):\n%s", at, diff)
	}
	if other, _, _ := s.ShareUsage(ctx, "other"); len(other) != 1 {
		t.Errorf("another pool's usage changed: %v", other)
	}
}

func testShareUsageZeroTime(t *testing.T, s Store) {
	err := s.SaveShareUsage(t.Context(), "p", time.Time{}, nil)
	if llmflow.ErrorCode(err) != llmflow.EINVALID {
		t.Fatalf("zero time: %v, want EINVALID", err)
	}
}
