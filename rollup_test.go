package llmflow_test

import (
	"slices"
	"testing"

	"github.com/go-llmflow/llmflow"
)

func TestRollupFilter_NeedsTags(t *testing.T) {
	for _, c := range []struct {
		name string
		f    llmflow.RollupFilter
		want bool
	}{
		{"Zero", llmflow.RollupFilter{}, false},
		{"GroupByOrg", llmflow.RollupFilter{GroupBy: []string{"org", "team"}}, false},
		{"GroupByTag", llmflow.RollupFilter{GroupBy: []string{"org", "tag"}}, true},
		{"TagFilter", llmflow.RollupFilter{Tag: "teaching"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.f.NeedsTags(); got != c.want {
				t.Errorf("NeedsTags() = %v, want %v", got, c.want)
			}
		})
	}
}

func TestRollupDimensions(t *testing.T) {
	want := []string{"org", "team", "project", "key", "owner", "model", "pool", "tag"}
	got := llmflow.RollupDimensions()
	if !slices.Equal(got, want) {
		t.Fatalf("RollupDimensions() = %v, want %v", got, want)
	}
	got[0] = "changed"
	if llmflow.RollupDimensions()[0] != "org" {
		t.Error("RollupDimensions returns the package's own slice")
	}
	for _, d := range want {
		if !llmflow.IsRollupDimension(d) {
			t.Errorf("IsRollupDimension(%q) = false", d)
		}
	}
	for _, d := range []string{"", "Org", "key_id", "cluster"} {
		if llmflow.IsRollupDimension(d) {
			t.Errorf("IsRollupDimension(%q) = true", d)
		}
	}
}

func TestRollup_Dimension(t *testing.T) {
	r := llmflow.Rollup{Org: "o", Team: "t", Project: "p", KeyID: "k", Owner: "u", Model: "m", Pool: "pl", Tag: "g"}
	want := map[string]string{"org": "o", "team": "t", "project": "p", "key": "k", "owner": "u", "model": "m", "pool": "pl", "tag": "g", "cluster": ""}
	for d, v := range want {
		if got := r.Dimension(d); got != v {
			t.Errorf("Dimension(%q) = %q, want %q", d, got, v)
		}
	}
}
