package reports

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

var updateSpend = flag.Bool("update-spend", false, "rewrite the spend golden files")

func TestWriteSpend(t *testing.T) {
	rows := []llmflow.Rollup{
		{Org: "etaba", Team: "lab-nlp", Requests: 3, PromptTokens: 1200, CompletionTokens: 300, CachedTokens: 100, GPUHours: 0.0842, EstimatedRequests: 1},
		{Org: "etabb", Team: "lab|chem", Requests: 1, PromptTokens: 10, CompletionTokens: 5, GPUHours: 1.5e-5},
	}
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, format := range SpendFormats {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteSpend(&b, rows, []string{"org", "team"}, format, from, to); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "spend", "org-team."+format)
			if *updateSpend {
				os.MkdirAll(filepath.Dir(path), 0o755)
				os.WriteFile(path, b.Bytes(), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update-spend)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("got\n%s\nwant\n%s", b.Bytes(), want)
			}
		})
	}
	if err := WriteSpend(new(bytes.Buffer), rows, nil, "xml", from, to); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestParseGroupByAndTime(t *testing.T) {
	if g, err := ParseGroupBy(""); err != nil || len(g) != 2 || g[0] != "org" || g[1] != "team" {
		t.Errorf("default group-by %v %v", g, err)
	}
	if g, err := ParseGroupBy(" Org, tag ,pool"); err != nil || len(g) != 3 || g[1] != "tag" {
		t.Errorf("%v %v", g, err)
	}
	for _, bad := range []string{"org,org", "user", "org,,team"} {
		if _, err := ParseGroupBy(bad); err == nil {
			t.Errorf("group-by %q accepted", bad)
		}
	}
	for in, want := range map[string]string{
		"2026-10-01":                "2026-10-01T00:00:00Z",
		"2026-10-01T10:45:00Z":      "2026-10-01T10:00:00Z",
		"2026-10-01T10:45:00+02:00": "2026-10-01T08:00:00Z",
		"2026-10-01T10:45":          "2026-10-01T10:00:00Z",
	} {
		got, err := ParseSpendTime(in)
		if err != nil || got.Format(time.RFC3339) != want {
			t.Errorf("ParseSpendTime(%q) = %v %v, want %s", in, got, err, want)
		}
	}
	if _, err := ParseSpendTime("October"); err == nil {
		t.Error("a bad time was accepted")
	}
}
