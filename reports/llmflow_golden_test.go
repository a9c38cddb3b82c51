package reports_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/reports"
)

// llmData is what llmflow's write-back produces: a cluster "llm" with only
// gres/gpu rows (no cpu TRES, so sreport's cpu-based user sort has nothing
// to compare), names longer than sreport's columns, and usage above 10^8
// GPU-seconds (wider Used column).
func llmData() reports.Data {
	at := func(d, h int) time.Time { return time.Date(2026, 10, d, h, 0, 0, 0, time.UTC) }
	d := reports.Data{
		Cluster: "llm",
		Now:     time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC),
		ProperName: func(login string) string {
			return map[string]string{"alice": "Alice Martin", "llmflow-svc": "llmflow service account, do not use"}[login]
		},
		Accounts: []reports.Account{
			{Name: "root"},
			{Name: "etaba", Parent: "root"},
			{Name: "lab-natural-language-processing", Parent: "etaba"},
			{Name: "proj-a-very-long-project-name", Parent: "lab-natural-language-processing"},
		},
		Assocs: []reports.Assoc{
			{Account: "proj-a-very-long-project-name", User: "zed"},
			{Account: "proj-a-very-long-project-name", User: "alice"},
			{Account: "lab-natural-language-processing", User: "llmflow-svc"},
			{Account: "etaba", User: "bob"},
		},
	}
	d.TRES = append(append([]string{}, reports.DefaultTRES...), "gres/gpu")
	for day := 1; day <= 3; day++ {
		for h := 0; h < 24; h++ {
			d.Usage[reports.Hour] = append(d.Usage[reports.Hour],
				reports.UsageRow{Assoc: 0, TRES: "gres/gpu", Start: at(day, h), Secs: 1_500_000},
				reports.UsageRow{Assoc: 1, TRES: "gres/gpu", Start: at(day, h), Secs: 1_500_000},
				reports.UsageRow{Assoc: 2, TRES: "gres/gpu", Start: at(day, h), Secs: 9_000},
			)
			d.ClusterUsage[reports.Hour] = append(d.ClusterUsage[reports.Hour], reports.ClusterRow{
				TRES: "gres/gpu", Start: at(day, h), Count: 1000, Alloc: 3_009_000, Idle: 3_600_000 - 3_009_000})
		}
	}
	return d
}

// TestGolden_LLM checks llmflow-shaped data against golden files written
// by this package (go test -run TestGolden_LLM -update rewrites them).
// They were not produced by sreport: they pin down the behaviour derived
// from its source where the captures are silent.
func TestGolden_LLM(t *testing.T) {
	d := llmData()
	for _, c := range []struct{ name, args string }{
		{"au-table", "cluster AccountUtilizationByUser start=2026-10-01T01:00:00 end=2026-10-04 -T gres/gpu -t seconds"},
		{"au-tree-table", "cluster AccountUtilizationByUser start=2026-10-01T01:00:00 end=2026-10-04 -T gres/gpu tree -t hourper"},
		{"ua-P", "-P cluster UserUtilizationByAccount start=2026-10-01T01:00:00 end=2026-10-04 -T gres/gpu -t hours"},
		{"top-table", "user TopUsage start=2026-10-01T01:00:00 end=2026-10-04 -T gres/gpu -t minper"},
		{"top-group-P", "-P user TopUsage start=2026-10-01T01:00:00 end=2026-10-04 -T gres/gpu group TopCount=2"},
		{"util-table", "cluster Utilization start=2026-10-01T01:00:00 end=2026-10-04 -T gres/gpu -t secper format=Cluster,TresName,Count,Allocated,Idle,Reported%5"},
		{"au-no-cluster-rows", "cluster AccountUtilizationByUser start=2026-09-01 end=2026-10-01 -T gres/gpu"},
		{"au-other-cluster", "-p cluster AccountUtilizationByUser start=2026-10-01T01:00:00 end=2026-10-04 -T gres/gpu cluster=hgx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := reports.ParseArgs(strings.Fields(c.args))
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := reports.Run(&got, req, d); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", c.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("llmflow report %s\n--- got\n%s--- want\n%s", c.args, got.String(), want)
			}
		})
	}
}
