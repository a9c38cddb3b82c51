package main

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/store"
	"github.com/spf13/pflag"
)

// llmflow report prints the store's rollups as sreport would: requests of a
// key with an owner count under (project or team, owner), the others under
// the service user.
func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k"), []byte("secret-0123456789abcdef0123456789abcdef\n"), 0o600)
	cfgPath := filepath.Join(dir, "gateway.hcl")
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
`), 0o600)
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	tree := llmflow.Accounts{
		{Name: "root", Kind: llmflow.KindRoot, Users: []llmflow.UserAssoc{{User: "root", Shares: 5}}, Source: "slurm"}, // root's own user share: no account row
		{Name: "etaba", Kind: llmflow.KindOrg, Shares: 13, Source: "slurm"},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 60, Source: "slurm"},
		{Name: "nlp-llm", Kind: llmflow.KindProject, Parent: "lab-nlp", Shares: 70, Source: "slurm"},
		{Name: "etabb", Kind: llmflow.KindOrg, Shares: 3, Source: "slurm"},
		{Name: "lab-chem", Kind: llmflow.KindTeam, Parent: "etabb", Shares: 100, Source: "slurm"},
	}
	t0 := time.Unix(0, 0)
	if _, err := db.SaveSync(ctx, tree, llmflow.SyncRun{Started: t0, Finished: t0, Source: "test", Outcome: "applied"}); err != nil {
		t.Fatal(err)
	}
	alice := llmflow.Key{ID: "key_a", Hash: [32]byte{1}, Org: "etaba", Team: "lab-nlp", Project: "nlp-llm", Owner: "alice", CreatedAt: t0}
	service := llmflow.Key{ID: "key_s", Hash: [32]byte{2}, Org: "etabb", Team: "lab-chem", CreatedAt: t0}
	for _, k := range []llmflow.Key{alice, service} {
		if err := db.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 2, 10, 15, 0, 0, time.UTC)
	recs := []llmflow.Record{
		{Time: at, RequestID: "r1", KeyID: "key_a", Org: "etaba", Team: "lab-nlp", Project: "nlp-llm", Model: "m", Pool: "p", GPUHours: 2.5, Status: 200, Outcome: llmflow.OutcomeOK},
		{Time: at.Add(time.Hour), RequestID: "r2", KeyID: "key_s", Org: "etabb", Team: "lab-chem", Model: "m", Pool: "p", GPUHours: 1.0, Status: 200, Outcome: llmflow.OutcomeOK},
	}
	if err := db.WriteRecords(ctx, recs); err != nil {
		t.Fatal(err)
	}
	db.Close()

	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(ctx, append([]string{"report", "-c", cfgPath}, args...), &out, &errb); code != 0 {
			t.Fatalf("report %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	got := run("cluster", "AccountUtilizationByUser", "start=2026-11-02", "end=2026-11-03", "-T", "gres/gpu", "-t", "seconds", "-P")
	want := `--------------------------------------------------------------------------------
Cluster/Account/User Utilization 2026-11-02T00:00:00 - 2026-11-02T23:59:59 (86400 secs)
Usage reported in TRES Seconds
--------------------------------------------------------------------------------
Cluster|Account|Login|Proper Name|TRES Name|Used
llm|root|||gres/gpu|12600
llm|etaba|||gres/gpu|9000
llm|lab-nlp|||gres/gpu|9000
llm|nlp-llm|||gres/gpu|9000
llm|nlp-llm|alice||gres/gpu|9000
llm|etabb|||gres/gpu|3600
llm|lab-chem|||gres/gpu|3600
llm|lab-chem|llmflow||gres/gpu|3600
`
	if got != want {
		t.Errorf("AccountUtilizationByUser:\n%s\nwant\n%s", got, want)
	}
	// 2.5 GPU-hours print as 2 (round half to even), as sreport does
	hours := run("cluster", "AccountUtilizationByUser", "start=2026-11-02", "end=2026-11-03", "-T", "gres/gpu", "-t", "hours", "-P", "-n")
	if !strings.Contains(hours, "llm|nlp-llm|alice||gres/gpu|2\n") {
		t.Errorf("hours:\n%s", hours)
	}
	util := run("cluster", "Utilization", "start=2026-11-02", "end=2026-11-03", "-T", "gres/gpu", "-t", "seconds", "-P", "-n")
	// The gateway served from its first record (10:15, the 10:00 hour) on:
	// 4 GPUs × 14 hours, not the whole day (slurmdbd holds only the hours
	// the write-back wrote, and it writes capacity from that hour on too).
	if want := "llm|gres/gpu|12600|0|0|189000|0|201600\n"; util != want {
		t.Errorf("Utilization %q, want %q", util, want)
	}
	// The next day counts every hour; the day before none.
	if util := run("cluster", "Utilization", "start=2026-11-03", "end=2026-11-04", "-T", "gres/gpu", "-t", "seconds", "-P", "-n"); util != "llm|gres/gpu|0|0|0|345600|0|345600\n" {
		t.Errorf("Utilization of the next day %q", util)
	}
	if util := run("cluster", "Utilization", "start=2026-11-01", "end=2026-11-02", "-T", "gres/gpu", "-t", "seconds", "-P", "-n"); util != "" {
		t.Errorf("Utilization before the gateway served: %q, want no row", util)
	}
	top := run("user", "TopUsage", "start=2026-11-02", "end=2026-11-03", "-T", "gres/gpu", "-t", "seconds", "-P", "-n", "--as-cluster", "gpu-llm")
	if !strings.HasPrefix(top, "gpu-llm|alice||nlp-llm|gres/gpu|9000\n") {
		t.Errorf("TopUsage:\n%s", top)
	}
}

// The report takes its configuration from LLMFLOW_CONFIG as every command
// does, and its cluster, service user and time zone from the writeback
// block (slurmdbd's zone: the period and the day rows follow it); the
// flags override them.
func TestReportConfigFromEnvAndWritebackBlock(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k"), []byte("secret-0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "dsn"), []byte("u:p@tcp(127.0.0.1:1)/slurm_acct_db\n"), 0o600)
	cfgPath := filepath.Join(dir, "gateway.hcl")
	os.WriteFile(cfgPath, []byte(`
master_key_file = "k"
pool "p" {
  capacity = 16
  gpus     = 1
}
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:1" }
}
store { path = "llmflow.db" }
writeback {
  dsn_file     = "dsn"
  cluster      = "llmx"
  service_user = "svc"
  timezone     = "Europe/Paris"
}
`), 0o600)
	if _, err := time.LoadLocation("Europe/Paris"); err != nil {
		t.Skip("no tzdata:", err)
	}
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	tree := llmflow.Accounts{
		{Name: "etaba", Kind: llmflow.KindOrg, Shares: 1, Source: "slurm"},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etaba", Shares: 1, Source: "slurm"},
	}
	if _, err := db.SaveSync(ctx, tree, llmflow.SyncRun{Started: t0, Finished: t0, Source: "test", Outcome: "applied"}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateKey(ctx, llmflow.Key{ID: "key_s", Hash: [32]byte{2}, Org: "etaba", Team: "lab-nlp", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	// 23:30 UTC on Nov 2 is 00:30 on Nov 3 in Paris.
	at := time.Date(2026, 11, 2, 23, 30, 0, 0, time.UTC)
	rec := llmflow.Record{Time: at, RequestID: "r1", KeyID: "key_s", Org: "etaba", Team: "lab-nlp", Model: "m", Pool: "p", GPUHours: 2, Status: 200, Outcome: llmflow.OutcomeOK}
	if err := db.WriteRecords(ctx, []llmflow.Record{rec}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	t.Setenv("LLMFLOW_CONFIG", cfgPath)
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(ctx, append([]string{"report"}, args...), &out, &errb); code != 0 {
			t.Fatalf("report %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	args := []string{"cluster", "AccountUtilizationByUser", "start=2026-11-03", "end=2026-11-04", "-T", "gres/gpu", "-t", "seconds", "-P"}
	for _, c := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"WritebackBlock", nil, `--------------------------------------------------------------------------------
Cluster/Account/User Utilization 2026-11-03T00:00:00 - 2026-11-03T23:59:59 (86400 secs)
Usage reported in TRES Seconds
--------------------------------------------------------------------------------
Cluster|Account|Login|Proper Name|TRES Name|Used
llmx|root|||gres/gpu|7200
llmx|etaba|||gres/gpu|7200
llmx|lab-nlp|||gres/gpu|7200
llmx|lab-nlp|svc||gres/gpu|7200
`},
		// UTC: Nov 3 starts after the request, and sreport prints no row
		// for a cluster without usage.
		{"FlagsOverride", []string{"--timezone", "UTC", "--as-cluster", "other", "--service-user=ops"}, `--------------------------------------------------------------------------------
Cluster/Account/User Utilization 2026-11-03T00:00:00 - 2026-11-03T23:59:59 (86400 secs)
Usage reported in TRES Seconds
--------------------------------------------------------------------------------
Cluster|Account|Login|Proper Name|TRES Name|Used
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := run(append(c.flags, args...)...); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
	// The cluster and service user of the flags, on Nov 2 in UTC.
	got := run("--timezone", "UTC", "--service-user", "ops", "--as-cluster=other", "cluster", "AccountUtilizationByUser", "start=2026-11-02", "end=2026-11-03", "-T", "gres/gpu", "-t", "seconds", "-P", "-n")
	if !strings.Contains(got, "other|lab-nlp|ops||gres/gpu|7200\n") {
		t.Errorf("UTC, Nov 2:\n%s", got)
	}

	var out, errb bytes.Buffer
	if code := Run(ctx, []string{"report", "--timezone", "Nowhere/Atlantis", "cluster", "Utilization"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "--timezone") {
		t.Errorf("bad --timezone: exit %d, %q", code, errb.String())
	}

	// Without the GPU count, nothing that shows the capacity: refused, not
	// "Reported 7900.00%".
	for _, a := range [][]string{
		{"cluster", "Utilization", "-t", "percent"},
		{"cluster", "Utilization"},
		{"cluster", "AccountUtilizationByUser", "-t", "hourper"},
	} {
		out.Reset()
		errb.Reset()
		code := Run(ctx, append([]string{"report", "--gpus", "0"}, a...), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "gpus") || out.Len() != 0 {
			t.Errorf("%v without GPUs: exit %d, stdout %q, stderr %q", a, code, out.String(), errb.String())
		}
	}

	// A period that takes in the hour running now says its usage so far is shown.
	out.Reset()
	errb.Reset()
	hour := time.Now().UTC().Truncate(time.Hour)
	if code := Run(ctx, []string{"report", "--timezone", "UTC", "cluster", "AccountUtilizationByUser",
		"start=" + hour.Format("2006-01-02T15:04:05"), "end=" + hour.Add(2*time.Hour).Format("2006-01-02T15:04:05"), "-P"}, &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "is still running and is not shown") {
		t.Errorf("current hour: exit %d, stderr %q", code, errb.String())
	}
}

// TestReportFirstHour: right after install every request is in the hour
// running now, which reports never show (slurmdbd rolls up ended hours).
// sreport's default period (yesterday) is empty and says where the usage
// is and when it shows; start= that hour says the hour is still running
// and not shown (not "partial").
func TestReportFirstHour(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k"), []byte("secret-0123456789abcdef0123456789abcdef\n"), 0o600)
	cfgPath := filepath.Join(dir, "gateway.hcl")
	os.WriteFile(cfgPath, []byte(`
master_key_file = "k"
pool "p" {
  capacity = 16
  gpus     = 1
}
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:1" }
}
org "etaba" {
  share = 1
  team "lab-nlp" {}
}
store { path = "llmflow.db" }
`), 0o600)
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(dir, "llmflow.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := db.CreateKey(ctx, llmflow.Key{ID: "key_s", Hash: [32]byte{2}, Org: "etaba", Team: "lab-nlp", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	rec := llmflow.Record{Time: now, RequestID: "r1", KeyID: "key_s", Org: "etaba", Team: "lab-nlp", Model: "m", Pool: "p", GPUHours: 2, Status: 200, Outcome: llmflow.OutcomeOK}
	if err := db.WriteRecords(ctx, []llmflow.Record{rec}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	hour := now.Truncate(time.Hour).Format("2006-01-02T15:04:05")
	for _, tc := range []struct {
		name               string
		args               []string
		wantOut, wantNote  string
		wantNoteNotContain string
	}{
		{"DefaultPeriod", nil, "", "usage from " + hour + " on is after this period (start=" + hour + " shows it once its hour has ended", "partial"},
		{"StartThisHour", []string{"start=" + hour}, "", "is still running and is not shown", "partial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"report", "-c", cfgPath, "--timezone", "UTC", "cluster", "AccountUtilizationByUser", "-T", "gres/gpu", "-t", "seconds", "-P", "-n"}, tc.args...)
			if code := Run(ctx, args, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if tc.wantOut == "" && out.Len() != 0 || !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("stdout %q, want %q", out.String(), tc.wantOut)
			}
			if !strings.Contains(errb.String(), tc.wantNote) || strings.Contains(errb.String(), tc.wantNoteNotContain) {
				t.Errorf("stderr %q, want a note with %q and without %q", errb.String(), tc.wantNote, tc.wantNoteNotContain)
			}
		})
	}
}

// -c/--config is one persistent flag: it is taken before or after any
// subcommand, and LLMFLOW_CONFIG stands in for it.
func TestConfigFlagPersistent(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k"), []byte("secret-0123456789abcdef0123456789abcdef\n"), 0o600)
	cfgPath := filepath.Join(dir, "gateway.hcl")
	os.WriteFile(cfgPath, []byte(`
master_key_file = "k"
pool "p" { capacity = 4 }
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:1" }
}
`), 0o600)
	for _, c := range []struct {
		name string
		env  string
		args []string
	}{
		{"ShortAfter", "", []string{"check-config", "-c", cfgPath}},
		{"LongAfter", "", []string{"check-config", "--config=" + cfgPath}},
		{"Before", "", []string{"-c", cfgPath, "check-config"}},
		{"Env", cfgPath, []string{"check-config"}},
		{"FlagOverEnv", filepath.Join(dir, "missing.hcl"), []string{"check-config", "-c", cfgPath}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("LLMFLOW_CONFIG", c.env)
			var out, errb bytes.Buffer
			if code := Run(context.Background(), c.args, &out, &errb); code != 0 || !strings.Contains(out.String(), cfgPath+": ok") {
				t.Errorf("%v: exit %d, %q %q", c.args, code, out.String(), errb.String())
			}
		})
	}
}

// TestReportOptions_EveryFlag: every option --help lists (reportFlags) is
// taken out of the arguments by reportOptions, in both spellings, and
// what is left is sreport's.
func TestReportOptions_EveryFlag(t *testing.T) {
	values := map[string]string{"gpus": "3"}
	reportFlags().VisitAll(func(f *pflag.Flag) {
		v := cmp.Or(values[f.Name], "x")
		for _, args := range [][]string{{"--" + f.Name, v, "cluster", "Utilization"}, {"--" + f.Name + "=" + v, "cluster", "Utilization"}} {
			o, rest, err := reportOptions(args)
			if err != nil {
				t.Errorf("%q: %v", args, err)
				continue
			}
			if !slices.Equal(rest, []string{"cluster", "Utilization"}) {
				t.Errorf("%q: sreport's arguments %q", args, rest)
			}
			got := map[string]string{"as-cluster": o.cluster, "service-user": o.serviceUser, "timezone": o.timezone, "gpus": strconv.Itoa(o.gpus)}[f.Name]
			if got != v {
				t.Errorf("%q: %s = %q, want %q", args, f.Name, got, v)
			}
		}
	})
	for _, bad := range [][]string{{"--gpus", "x"}, {"--gpus=-3"}, {"--gpus", "-3"}, {"--gpus=99999999999999999999"}, {"--timezone"}} {
		if _, _, err := reportOptions(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if o, _, _ := reportOptions([]string{"cluster", "Utilization"}); o.gpus != -1 {
		t.Errorf("--gpus not given: %d, want -1", o.gpus)
	}
}

// TestSlurmSide: report and sync --to-slurmdbd resolve the Slurm side the
// same way: the flags, else writeback { }, else the defaults (sync
// --to-slurmdbd ignored writeback { cluster, service_user, timezone } and
// wrote under llm and the local zone what serve's write-back wrote under
// the block's).
func TestSlurmSide(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	wb := &config.Config{Writeback: &config.Writeback{Cluster: "hgx-llm", ServiceUser: "svc", Timezone: "Europe/Paris"}}
	for _, tc := range []struct {
		name                  string
		cfg                   *config.Config
		cluster, user, tz     string
		wantCluster, wantUser string
		wantLoc               *time.Location
		wantDefault           bool
	}{
		// one default for report and the write-back: UTC, whatever the
		// process's local zone (the write-back took "Local")
		{"defaults", &config.Config{}, "", "", "", llmflow.DefaultSlurmCluster, llmflow.DefaultServiceUser, time.UTC, true},
		{"writeback block", wb, "", "", "", "hgx-llm", "svc", paris, false},
		{"writeback block without timezone", &config.Config{Writeback: &config.Writeback{Cluster: "c"}}, "", "", "", "c", llmflow.DefaultServiceUser, time.UTC, true},
		{"flags override", wb, "other", "ops", "UTC", "other", "ops", time.UTC, false},
	} {
		cluster, user, loc, def, err := slurmSide(tc.cfg, tc.cluster, tc.user, tc.tz, "--tz")
		if err != nil || cluster != tc.wantCluster || user != tc.wantUser || loc.String() != tc.wantLoc.String() || def != tc.wantDefault {
			t.Errorf("%s: %q %q %v %v %v, want %q %q %v %v", tc.name, cluster, user, loc, def, err, tc.wantCluster, tc.wantUser, tc.wantLoc, tc.wantDefault)
		}
	}
	if _, _, _, _, err := slurmSide(wb, "", "", "Nowhere/Atlantis", "--tz"); err == nil || !strings.Contains(err.Error(), "--tz") {
		t.Errorf("bad time zone: %v, want an error naming --tz", err)
	}
}
