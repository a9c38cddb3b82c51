package llmflow_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/deptest"
)

func TestAssociation(t *testing.T) {
	for _, c := range []struct {
		r             llmflow.Rollup
		svc           string
		account, user string
	}{
		{llmflow.Rollup{Team: "Lab-NLP", Project: "NLP-LLM", Owner: "Alice"}, "", "nlp-llm", "alice"},
		{llmflow.Rollup{Team: "lab-nlp", Owner: "bob"}, "", "lab-nlp", "bob"},
		{llmflow.Rollup{Team: "lab-nlp", Project: "nlp-llm"}, "", "nlp-llm", llmflow.DefaultServiceUser},
		{llmflow.Rollup{Team: "lab-chem"}, "svc-gw", "lab-chem", "svc-gw"},
		{llmflow.Rollup{Owner: "carol"}, "", "", "carol"}, // no key: no account
	} {
		a, u := llmflow.Association(c.r, c.svc)
		if a != c.account || u != c.user {
			t.Errorf("Association(%+v, %q) = (%q, %q), want (%q, %q)", c.r, c.svc, a, u, c.account, c.user)
		}
	}
}

func TestAssocHours(t *testing.T) {
	h := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	rs := []llmflow.Rollup{
		{Hour: h, Team: "t", Project: "p", Owner: "alice", Model: "a", GPUHours: 0.1},
		{Hour: h, Team: "t", Project: "p", Owner: "alice", Model: "b", GPUHours: 0.2}, // summed, then rounded once: 1080 s
		{Hour: h, Team: "t", GPUHours: 1.0 / 3},                                       // 1200 s, service user
		{Hour: h.Add(time.Hour), Team: "t", GPUHours: 0.0001},                         // 0.36 s → no row
		{Hour: h, GPUHours: 2},                          // no account
		{Team: "t", GPUHours: 7},                        // a range total: ignored
		{Hour: h, Team: "t", Owner: "bob", GPUHours: 0}, // nothing
	}
	got, un := llmflow.AssocHours(rs, "svc")
	want := []llmflow.AssocHour{{"p", "alice", h, 1080}, {"t", "svc", h, 1200}}
	if !slices.Equal(got, want) {
		t.Errorf("AssocHours = %+v, want %+v", got, want)
	}
	if un.Rollups != 1 || un.GPUHours != 2 {
		t.Errorf("unattributed = %+v", un)
	}
	// The order of the rollups never changes the result.
	slices.Reverse(rs)
	if again, _ := llmflow.AssocHours(rs, "svc"); !slices.Equal(again, want) {
		t.Errorf("reversed input: %+v", again)
	}
}

func TestValidClusterName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"llm", true},
		{"hgx", true},
		{"a", true},
		{"0cluster", true},
		{"gpu-a100_2", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{"-llm", false},
		{"_llm", false},
		{"LLM", false},
		{"a b", false},
		{"x/y", false},
		{"hgx`; DROP TABLE acct_table; --", false},
		{"hgx; rm -rf /", false},
		{"café", false},
	} {
		if got := llmflow.ValidClusterName(c.name); got != c.ok {
			t.Errorf("ValidClusterName(%q) = %v, want %v", c.name, got, c.ok)
		}
	}
}

// TestDepsStdlibOnly keeps the root package, the domain vocabulary every
// other package uses, free of any dependency but the standard library.
func TestDepsStdlibOnly(t *testing.T) {
	deptest.CheckStdlib(t, "github.com/go-llmflow/llmflow")
	deptest.Check(t, "github.com/go-llmflow/llmflow", deptest.Impure)
}
