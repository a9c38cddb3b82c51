package reports_test

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/reports"
)

// benchData is a cluster of 1,000 accounts (ten levels of fan-out 10 under
// root… a 10-ary tree) and 10,000 user associations with hourly gres/gpu
// rows over October 2026: each association is busy one hour in ten, so
// 744,000 hour rows, plus the month rows summed from them and hourly
// cluster rows.
func benchData(tb testing.TB) reports.Data {
	tb.Helper()
	const nAcct, nUser = 1000, 10000
	d := reports.Data{
		Cluster: "llm", Now: time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC),
		TRES:       []string{"cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages", "gres/gpu"},
		ProperName: func(login string) string { return "User " + login },
	}
	d.Accounts = append(d.Accounts, reports.Account{Name: "root"})
	for i := 1; i < nAcct; i++ {
		parent := "root"
		if p := (i - 1) / 10; p > 0 {
			parent = "acct" + strconv.Itoa(p)
		}
		d.Accounts = append(d.Accounts, reports.Account{Name: "acct" + strconv.Itoa(i), Parent: parent})
	}
	for u := 0; u < nUser; u++ {
		d.Assocs = append(d.Assocs, reports.Assoc{Account: "acct" + strconv.Itoa(1+u%(nAcct-1)), User: "user" + strconv.Itoa(u)})
	}
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	month := make([]uint64, nUser)
	d.Usage[reports.Hour] = make([]reports.UsageRow, 0, nUser*744/10)
	for h := 0; h < 744; h++ {
		at := start.Add(time.Duration(h) * time.Hour)
		var alloc uint64
		for u := h % 10; u < nUser; u += 10 {
			secs := uint64(3600 * (1 + u%8))
			d.Usage[reports.Hour] = append(d.Usage[reports.Hour], reports.UsageRow{Assoc: u, TRES: "gres/gpu", Start: at, Secs: secs})
			month[u] += secs
			alloc += secs
		}
		d.ClusterUsage[reports.Hour] = append(d.ClusterUsage[reports.Hour], reports.ClusterRow{
			TRES: "gres/gpu", Start: at, Count: 8000, Alloc: alloc, Idle: 8000*3600 - alloc})
	}
	var alloc uint64
	for u, s := range month {
		d.Usage[reports.Month] = append(d.Usage[reports.Month], reports.UsageRow{Assoc: u, TRES: "gres/gpu", Start: start, Secs: s})
		alloc += s
	}
	d.ClusterUsage[reports.Month] = []reports.ClusterRow{{TRES: "gres/gpu", Start: start, Count: 8000, Alloc: alloc, Idle: 8000*744*3600 - alloc}}
	return d
}

func BenchmarkAccountUtilizationByUser(b *testing.B) {
	d := benchData(b)
	for _, bc := range []struct{ name, args string }{
		// start/end off midnight: sreport reads the 744,000 hour rows.
		{"month-from-hour-rows", "-P cluster AccountUtilizationByUser start=2026-10-01T01:00:00 end=2026-11-01T01:00:00 -T gres/gpu -t hours"},
		{"month-from-month-rows", "-P cluster AccountUtilizationByUser start=2026-10-01 end=2026-11-01 -T gres/gpu -t hours"},
		{"month-tree-table", "cluster AccountUtilizationByUser start=2026-10-01 end=2026-11-01 -T gres/gpu -t hours tree"},
	} {
		req, err := reports.ParseArgs(strings.Fields(bc.args))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := reports.Run(io.Discard, req, d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkTopUsage(b *testing.B) {
	d := benchData(b)
	req, err := reports.ParseArgs(strings.Fields("-P user TopUsage start=2026-10-01T01:00:00 end=2026-11-01T01:00:00 -T gres/gpu group"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := reports.Run(io.Discard, req, d); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScale keeps the benchmark's data honest: a month over the hour rows
// prints every account and user.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	d := benchData(t)
	req, err := reports.ParseArgs(strings.Fields("-P -n cluster AccountUtilizationByUser start=2026-10-01T01:00:00 end=2026-11-01T01:00:00 -T gres/gpu"))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	start := time.Now()
	if err := reports.Run(&out, req, d); err != nil {
		t.Fatal(err)
	}
	t.Logf("Run over %d hour rows: %v", len(d.Usage[reports.Hour]), time.Since(start))
	if n := strings.Count(out.String(), "\n"); n != 11000 {
		t.Errorf("%d rows, want 11000 (1,000 accounts + 10,000 users)", n)
	}
}
