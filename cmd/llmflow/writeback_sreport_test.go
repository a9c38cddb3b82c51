package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/store"
)

// After a write-back, the real sreport on the written cluster and
// llmflow report print the same rows, byte for byte, for every report.
func TestWritebackMatchesRealSreport(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	cluster := "llmt_" + hex.EncodeToString(b)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })

	dir := t.TempDir()
	cfgPath := seedUsage(t, dir, hex.EncodeToString(b), "", time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
	ctx := context.Background()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("llmflow %v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	wb := []string{"sync", "-c", cfgPath, "--to-slurmdbd", "--from", "2026-11-02", "--to", "2026-11-04",
		"--writeback-dsn-file", filepath.Join(dir, "wb.dsn"), "--writeback-cluster", cluster, "--writeback-tz", "UTC"}
	run(wb...)
	sreport := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("sreport", args...)
		cmd.Env = append(os.Environ(), "TZ=UTC")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("sreport %v: %v", args, err)
		}
		return string(out)
	}
	compare := func(when string) {
		t.Helper()
		for _, report := range [][]string{
			{"cluster", "AccountUtilizationByUser", "-t", "seconds"},
			{"cluster", "AccountUtilizationByUser", "-t", "hours"},
			{"cluster", "AccountUtilizationByUser", "-t", "percent"},
			{"cluster", "UserUtilizationByAccount", "-t", "seconds"},
			{"cluster", "Utilization", "-t", "seconds"},
			{"user", "TopUsage", "-t", "minutes"},
		} {
			common := append(append([]string{"-P", "-T", "gres/gpu"}, report...), "start=2026-11-02", "end=2026-11-04")
			want := sreport(append(common, "cluster="+cluster)...)
			got := run(append([]string{"report", "-c", cfgPath, "--as-cluster", cluster}, common...)...)
			if got != want {
				t.Errorf("%s, %v:\nllmflow report:\n%s\nsreport:\n%s", when, report, got, want)
			}
		}
	}
	compare("after the write-back")
	run(wb...) // idempotent: the same hours again
	compare("after writing the same hours again")
}

// seedUsage writes a configuration (a pool of 4 GPUs, extra appended), a
// Slurm-like tree of org → team → project plus a second team, keys with and
// without owners, and records; it returns the configuration's path and the
// tree's names.
func seedUsage(t *testing.T, dir, suffix, extra string, recsAt time.Time) (cfgPath string) {
	t.Helper()
	org, team, proj, team2 := "wo"+suffix, "wt"+suffix, "wp"+suffix, "wu"+suffix
	os.WriteFile(filepath.Join(dir, "k"), []byte("secret-0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "wb.dsn"), []byte("root@tcp(127.0.0.1:3306)/slurm_acct_db\n"), 0o600)
	cfgPath = filepath.Join(dir, "gateway.hcl")
	os.WriteFile(cfgPath, []byte(`
master_key_file = "k"
pool "p" {
  capacity = 16
  gpus     = 4
}
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:1" }
}
store { path = "llmflow.db" }
`+extra), 0o600)
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t0 := time.Unix(0, 0)
	tree := llmflow.Accounts{
		{Name: org, Kind: llmflow.KindOrg, Shares: 3, Source: "slurm"},
		{Name: team, Kind: llmflow.KindTeam, Parent: org, Shares: 60, Source: "slurm"},
		{Name: proj, Kind: llmflow.KindProject, Parent: team, Shares: 70, Source: "slurm"},
		{Name: team2, Kind: llmflow.KindTeam, Parent: org, Shares: 40, Source: "slurm"},
	}
	seedSlurmSource(t, "llmt_src"+suffix, tree, "alice", "bob")
	if _, err := db.SaveSync(ctx, tree, llmflow.SyncRun{Started: t0, Finished: t0, Source: "test", Outcome: "applied"}); err != nil {
		t.Fatal(err)
	}
	keys := []llmflow.Key{
		{ID: "k1", Hash: [32]byte{1}, Org: org, Team: team, Project: proj, Owner: "alice", CreatedAt: t0},
		{ID: "k2", Hash: [32]byte{2}, Org: org, Team: team, Owner: "bob", CreatedAt: t0},
		{ID: "k3", Hash: [32]byte{3}, Org: org, Team: team2, CreatedAt: t0},
	}
	for _, k := range keys {
		if err := db.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	var recs []llmflow.Record
	add := func(id string, k llmflow.Key, at time.Duration, gpuHours float64) {
		recs = append(recs, llmflow.Record{Time: recsAt.Add(at), RequestID: id, KeyID: k.ID, Org: k.Org, Team: k.Team, Project: k.Project,
			Model: "m", Pool: "p", GPUHours: gpuHours, Status: 200, Outcome: llmflow.OutcomeOK})
	}
	add("r1", keys[0], 10*time.Hour+5*time.Minute, 2.5)
	add("r2", keys[0], 10*time.Hour+50*time.Minute, 0.25)
	add("r3", keys[1], 23*time.Hour+30*time.Minute, 1.2)
	add("r4", keys[2], 24*time.Hour+time.Hour, 3.75) // the next day
	add("r5", keys[1], 36*time.Hour, 0.0001)         // rounds to 0 GPU-seconds at most
	if err := db.WriteRecords(ctx, recs); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}

// serve writes back on its schedule: the rows appear in the real sreport.
func TestServeWritesBack(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	cluster := "llmt_" + hex.EncodeToString(b)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	dir := t.TempDir()
	// records in the last two days, so that the last 48 hours hold them
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	cfgPath := seedUsage(t, dir, hex.EncodeToString(b),
		"writeback {\n  dsn_file = \"wb.dsn\"\n  cluster = \""+cluster+"\"\n  schedule = \"@every 1s\"\n  lookback = \"48h\"\n}\n", day)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, "127.0.0.1:0", slog.New(slog.DiscardHandler), nil) }()
	defer func() { cancel(); <-done }()
	start, end := day.Format("2006-01-02"), time.Now().UTC().Truncate(time.Hour).Format("2006-01-02T15:04:05")
	args := []string{"-P", "-n", "-T", "gres/gpu", "cluster", "AccountUtilizationByUser", "start=" + start, "end=" + end, "-t", "seconds"}
	var got string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cmd := exec.Command("sreport", append(args, "cluster="+cluster)...)
		cmd.Env = append(os.Environ(), "TZ=UTC")
		out, _ := cmd.Output()
		if got = string(out); strings.Contains(got, "|alice||gres/gpu|") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var want bytes.Buffer
	if code := Run(context.Background(), append([]string{"report", "-c", cfgPath, "--as-cluster", cluster}, args...), &want, io.Discard); code != 0 {
		t.Fatal("llmflow report failed")
	}
	if got != want.String() || !strings.Contains(got, "|alice||gres/gpu|") {
		t.Fatalf("sreport after serve's write-back:\n%s\nllmflow report:\n%s", got, want.String())
	}
}

// TestReportTRESLikeSreport: -T takes the names the real sreport takes,
// and fails like it when none is a TRES ("-T gpu": "fatal: No valid TRES
// given", exit 1; it printed an empty report and exited 0).
func TestReportTRESLikeSreport(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	dir := t.TempDir()
	cfgPath := seedUsage(t, dir, hex.EncodeToString(b), "", time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
	lab := cmp.Or(os.Getenv("LLMFLOW_SLURM_CLUSTER"), "llmflow") // scripts/slurm/setup.sh's cluster, gres/gpu registered
	for _, tres := range []string{"gpu", "", "foo", "gres/gpuz", "gres/gpu", "GRES/GPU", "gres/gpu,foo", "cpu,gpu", "energy", "ALL"} {
		args := []string{"-P", "-T", tres, "cluster", "Utilization", "start=2026-11-02", "end=2026-11-03"}
		c := exec.Command("sreport", append(args, "cluster="+lab)...)
		c.Env = append(os.Environ(), "TZ=UTC")
		var sout, serr bytes.Buffer
		c.Stdout, c.Stderr = &sout, &serr
		sreportOK := c.Run() == nil
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"report", "-c", cfgPath}, args...), &out, &errb)
		switch {
		case sreportOK != (code == 0):
			t.Errorf("-T %q: sreport ok %v (%s), llmflow report exit %d (%s)", tres, sreportOK, serr.String(), code, errb.String())
		case !sreportOK && strings.TrimPrefix(serr.String(), "sreport: ") != strings.TrimPrefix(errb.String(), "llmflow: "):
			t.Errorf("-T %q: sreport %q, llmflow report %q", tres, serr.String(), errb.String())
		case !sreportOK && out.Len() > 0:
			t.Errorf("-T %q: a failed report printed %q", tres, out.String())
		}
	}
}

// TestWritebackBeforeServing: a write-back of a month before the gateway
// served anything writes no cluster rows (it wrote 744 hours of idle
// GPUs: sreport's Utilization showed capacity llmflow report did not);
// the real sreport and llmflow report agree on that month and on the
// first, partial, day served.
func TestWritebackBeforeServing(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	cluster := "llmt_" + hex.EncodeToString(b)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	dir := t.TempDir()
	cfgPath := seedUsage(t, dir, hex.EncodeToString(b), "", time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)) // first record 2026-11-02T10:05
	ctx := context.Background()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("llmflow %v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	wb := func(from, to string) string {
		return run("sync", "-c", cfgPath, "--to-slurmdbd", "--from", from, "--to", to,
			"--writeback-dsn-file", filepath.Join(dir, "wb.dsn"), "--writeback-cluster", cluster, "--writeback-tz", "UTC")
	}
	if out := wb("2026-10-01", "2026-11-01"); !strings.Contains(out, "cluster rows (4 GPUs): 0 hours") {
		t.Errorf("write-back of October, before the gateway served:\n%s", out)
	}
	wb("2026-11-01", "2026-11-03")
	for _, p := range [][2]string{{"2026-10-01", "2026-11-01"}, {"2026-11-01", "2026-11-03"}, {"2026-11-02", "2026-11-03"}, {"2026-10-30", "2026-11-03"}} {
		for _, report := range [][]string{{"cluster", "Utilization", "-t", "hours"}, {"cluster", "Utilization", "-t", "percent"}} {
			args := append(append([]string{"-P", "-T", "gres/gpu"}, report...), "start="+p[0], "end="+p[1])
			c := exec.Command("sreport", append(args, "cluster="+cluster)...)
			c.Env = append(os.Environ(), "TZ=UTC")
			want, err := c.Output()
			if err != nil {
				t.Fatalf("sreport %v: %v", args, err)
			}
			if got := run(append([]string{"report", "-c", cfgPath, "--as-cluster", cluster, "--timezone", "UTC"}, args...)...); got != string(want) {
				t.Errorf("%v:\nllmflow report:\n%s\nsreport:\n%s", args, got, want)
			}
		}
	}
}

// TestReportAfterSkippedUsage: usage the write-back cannot write (its
// account was deleted in Slurm) is left out of llmflow report too, which
// then equals the real sreport byte for byte, and said apart on stderr
// (report counted it, and the totals differed from sreport's).
func TestReportAfterSkippedUsage(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	cluster := "llmt_" + sfx
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	dir := t.TempDir()
	cfgPath := seedUsage(t, dir, sfx, "", time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC))
	team2 := "wu" + sfx                // its key k3 has 3.75 GPU-hours on 2026-11-03, no owner
	sam(t, "delete", "account", team2) // deleted in Slurm since the last import
	ctx := context.Background()
	run := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("llmflow %v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	out, _ := run("sync", "-c", cfgPath, "--to-slurmdbd", "--from", "2026-11-02", "--to", "2026-11-04",
		"--writeback-dsn-file", filepath.Join(dir, "wb.dsn"), "--writeback-cluster", cluster, "--writeback-tz", "UTC")
	if !strings.Contains(out, "not written: 3.7500 GPU-hours of association ("+team2+", llmflow)") {
		t.Fatalf("the write-back wrote the deleted account's usage:\n%s", out)
	}
	for _, report := range [][]string{
		{"cluster", "AccountUtilizationByUser", "-t", "seconds"},
		{"cluster", "UserUtilizationByAccount", "-t", "seconds"},
		{"cluster", "Utilization", "-t", "seconds"},
		{"user", "TopUsage", "-t", "minutes"},
	} {
		args := append(append([]string{"-P", "-T", "gres/gpu"}, report...), "start=2026-11-02", "end=2026-11-04")
		c := exec.Command("sreport", append(args, "cluster="+cluster)...)
		c.Env = append(os.Environ(), "TZ=UTC")
		want, err := c.Output()
		if err != nil {
			t.Fatalf("sreport %v: %v", args, err)
		}
		got, stderr := run(append([]string{"report", "-c", cfgPath, "--as-cluster", cluster, "--timezone", "UTC"}, args...)...)
		if got != string(want) {
			t.Errorf("%v:\nllmflow report:\n%s\nsreport:\n%s", report, got, want)
		}
		if !strings.Contains(stderr, "3.7500 GPU-hours of association ("+team2+", llmflow) the write-back to cluster "+cluster+" could not write") {
			t.Errorf("%v: stderr does not say what was not written: %q", report, stderr)
		}
	}
}

// TestTopUsageGroupOrder: sreport's TopUsage group joins a user's
// accounts in slurmdbd's lft order, where sacctmgr puts a sibling added
// later first; llmflow report joins them in that order too (it used its
// own tree order: reversed for an account the write-back added after the
// first run).
func TestTopUsageGroupOrder(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	cluster := "llmt_" + sfx
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	dir := t.TempDir()
	cfgPath := seedUsage(t, dir, sfx, "", time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)) // the service user in team wu…
	ctx := context.Background()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("llmflow %v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	wb := func() {
		run("sync", "-c", cfgPath, "--to-slurmdbd", "--from", "2026-11-02", "--to", "2026-11-04",
			"--writeback-dsn-file", filepath.Join(dir, "wb.dsn"), "--writeback-cluster", cluster, "--writeback-tz", "UTC")
	}
	wb()
	// a team created in Slurm since, imported, with usage of the service
	// user: the next write-back adds it, and sacctmgr puts it first
	org, tz := "wo"+sfx, "wz"+sfx
	sam(t, "add", "account", tz, "parent="+org, "cluster=llmt_src"+sfx)
	db, err := store.OpenSQLite(ctx, filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := db.Accounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	tree = append(tree, llmflow.Account{Name: tz, Kind: llmflow.KindTeam, Parent: org, Shares: 40, Source: "slurm"})
	if _, err := db.SaveSync(ctx, tree, llmflow.SyncRun{Started: t0, Finished: t0, Source: "test", Outcome: "applied"}); err != nil {
		t.Fatal(err)
	}
	k := llmflow.Key{ID: "kz", Hash: [32]byte{9}, Org: org, Team: tz, CreatedAt: t0}
	if err := db.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteRecords(ctx, []llmflow.Record{{Time: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC), RequestID: "rz", KeyID: k.ID,
		Org: org, Team: tz, Model: "m", Pool: "p", GPUHours: 2, Status: 200, Outcome: llmflow.OutcomeOK}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	wb()
	for _, report := range [][]string{
		{"user", "TopUsage", "-t", "minutes", "group"},
		{"user", "TopUsage", "-t", "minutes"},
		{"cluster", "AccountUtilizationByUser", "-t", "seconds"},
		{"cluster", "UserUtilizationByAccount", "-t", "seconds"},
	} {
		args := append(append([]string{"-P", "-T", "gres/gpu"}, report...), "start=2026-11-02", "end=2026-11-04")
		c := exec.Command("sreport", append(args, "cluster="+cluster)...)
		c.Env = append(os.Environ(), "TZ=UTC")
		want, err := c.Output()
		if err != nil {
			t.Fatalf("sreport %v: %v", args, err)
		}
		if got := run(append([]string{"report", "-c", cfgPath, "--as-cluster", cluster, "--timezone", "UTC"}, args...)...); got != string(want) {
			t.Errorf("%v:\nllmflow report:\n%s\nsreport:\n%s", report, got, want)
		}
	}
}
