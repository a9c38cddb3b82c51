package storetest

import (
	"fmt"
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
	// a large tree (more rows than one statement writes) with a path given
	// twice: every path once, the last value given
	var big []llmflow.ShareUsage
	for i := range 1201 {
		big = append(big, llmflow.ShareUsage{Path: []string{"org", fmt.Sprintf("u%04d", i)}, GPUHours: float64(i)})
	}
	big = append(big, llmflow.ShareUsage{Path: []string{"org", "u0007"}, GPUHours: 0.5})
	if err := s.SaveShareUsage(ctx, "p", t0.Add(2*time.Minute), big); err != nil {
		t.Fatal(err)
	}
	got, _, err = s.ShareUsage(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1201 {
		t.Fatalf("%d rows saved of 1201 paths", len(got))
	}
	for _, u := range got {
		var n int
		fmt.Sscanf(u.Path[1], "u%d", &n)
		want := float64(n)
		if u.Path[1] == "u0007" {
			want = 0.5
		}
		if u.GPUHours != want {
			t.Errorf("%v: %v GPU-hours, want %v", u.Path, u.GPUHours, want)
		}
	}
}

func testShareUsageZeroTime(t *testing.T, s Store) {
	err := s.SaveShareUsage(t.Context(), "p", time.Time{}, nil)
	if llmflow.ErrorCode(err) != llmflow.EINVALID {
		t.Fatalf("zero time: %v, want EINVALID", err)
	}
}
