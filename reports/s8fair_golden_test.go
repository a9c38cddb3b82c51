package reports_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/reports"
)

// s8fairDir holds a second real capture (Slurm 22.05.8, cluster s8fair of
// scripts/slurm/sshare-lab.sh after its jobs): slurmdbd's own rollup of
// real jobs with cpu, node and billing rows whose users rank differently
// by each TRES, a tree with later-added siblings placed first in lft
// order, and the sreport commands in sreport/cmds.txt (file|arguments).
const s8fairDir = "testdata/s8fair"

func s8tsv(t testing.TB, name string) []map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(s8fairDir, "db", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var head []string
	var rows []map[string]string
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if head == nil {
			head = fields
			continue
		}
		row := map[string]string{}
		for i, h := range head {
			row[h] = fields[i]
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// loadS8fair loads the s8fair tables as loadLab loads hgx's.
func loadS8fair(t testing.TB) reports.Data {
	d := reports.Data{Cluster: "s8fair", Now: time.Date(2026, 12, 1, 6, 30, 0, 0, time.UTC), Location: time.UTC,
		ProperName: func(string) string { return "" }} // the lab's s8 users have no GECOS
	type tres struct {
		id   uint64
		name string
	}
	var ts []tres
	tresName := map[string]string{}
	for _, r := range s8tsv(t, "tres_table.tsv") {
		name := r["type"]
		if r["name"] != "" {
			name += "/" + r["name"]
		}
		tresName[r["id"]] = name
		if r["deleted"] == "0" {
			ts = append(ts, tres{num(t, r["id"]), name})
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].id < ts[j].id })
	for _, x := range ts {
		d.TRES = append(d.TRES, x.name)
	}
	assocs := s8tsv(t, "s8fair_assoc_table.tsv")
	sort.Slice(assocs, func(i, j int) bool { return num(t, assocs[i]["lft"]) < num(t, assocs[j]["lft"]) })
	idx := map[string]int{}
	for _, r := range assocs {
		if r["user"] == "" {
			d.Accounts = append(d.Accounts, reports.Account{Name: r["acct"], Parent: r["parent_acct"], Deleted: r["deleted"] == "1"})
			continue
		}
		idx[r["id_assoc"]] = len(d.Assocs)
		d.Assocs = append(d.Assocs, reports.Assoc{Account: r["acct"], User: r["user"], Partition: r["partition"], Deleted: r["deleted"] == "1"})
	}
	for g, file := range map[reports.Granularity]string{reports.Hour: "s8fair_assoc_usage_hour_table.tsv",
		reports.Day: "s8fair_assoc_usage_day_table.tsv", reports.Month: "s8fair_assoc_usage_month_table.tsv"} {
		for _, r := range s8tsv(t, file) {
			d.Usage[g] = append(d.Usage[g], reports.UsageRow{Assoc: idx[r["id"]], TRES: tresName[r["id_tres"]],
				Start: epoch(t, r["time_start"]), Secs: num(t, r["alloc_secs"])})
		}
	}
	for g, file := range map[reports.Granularity]string{reports.Hour: "s8fair_usage_hour_table.tsv",
		reports.Day: "s8fair_usage_day_table.tsv", reports.Month: "s8fair_usage_month_table.tsv"} {
		for _, r := range s8tsv(t, file) {
			d.ClusterUsage[g] = append(d.ClusterUsage[g], clusterRow(t, tresName, r))
		}
	}
	return d
}

// TestGoldenS8fair: every report's user order against real sreport with
// TRES that rank the users differently (TopUsage by the first selected
// TRES, the other user lists by cpu whatever -T says), and TopUsage group
// joining a user's accounts in lft order.
func TestGoldenS8fair(t *testing.T) {
	data := loadS8fair(t)
	b, err := os.ReadFile(filepath.Join(s8fairDir, "sreport", "cmds.txt"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		file, args, _ := strings.Cut(line, "|")
		n++
		t.Run(file, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(s8fairDir, "sreport", file))
			if err != nil {
				t.Fatal(err)
			}
			req, err := reports.ParseArgs(strings.Fields(args))
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := reports.Run(&got, req, data); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("sreport %s\n--- got\n%s--- want\n%s", args, got.String(), want)
			}
		})
	}
	if n != 12 {
		t.Errorf("%d captures, want 12", n)
	}
}
