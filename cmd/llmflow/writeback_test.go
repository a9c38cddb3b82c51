package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/writeback"
)

// llmflow sync --to-slurmdbd writes the store's rollups into the real
// slurmdbd; the real sreport then prints exactly what llmflow report prints
// for the same period (header block included), before and after a second
// run of the same period.
func TestSyncToSlurmdbd(t *testing.T) {
	if os.Getenv("LLMFLOW_SKIP_SLURM") == "1" {
		t.Skip("LLMFLOW_SKIP_SLURM=1: skipping a test that needs MariaDB, slurmdbd, sacctmgr and sreport")
	}
	dsn := os.Getenv("LLMFLOW_WRITEBACK_TEST_DSN")
	if dsn == "" {
		dsn = "root@unix(/run/mysqld/mysqld.sock)/slurm_acct_db"
	}
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal("LLMFLOW_WRITEBACK_TEST_DSN does not parse")
	}
	conn, _ := mysql.NewConnector(mc)
	sqlDB := sql.OpenDB(conn)
	t.Cleanup(func() { sqlDB.Close() }) // after the cleanup below (LIFO)
	if err := sqlDB.Ping(); err != nil {
		t.Fatalf("MariaDB: %v\nrun scripts/slurm/setup.sh (as root) first, or set LLMFLOW_SKIP_SLURM=1 to skip the Slurm tests", err)
	}
	if out, err := exec.Command("sacctmgr", "-i", "show", "cluster").CombinedOutput(); err != nil {
		t.Fatalf("sacctmgr: %v: %s\nrun scripts/slurm/setup.sh (as root) first, or set LLMFLOW_SKIP_SLURM=1 to skip the Slurm tests", err, out)
	}

	b := make([]byte, 3)
	rand.Read(b)
	r := hex.EncodeToString(b)
	p, cluster, svc := "wbc"+r+"-", "llmwbc_"+r, "wbc"+r+"svc"
	alice := p + "alice"
	t.Cleanup(func() {
		for _, args := range [][]string{
			{"-i", "delete", "cluster", cluster},
			{"-i", "delete", "user", alice + "," + svc},
			{"-i", "delete", "account", p + "etaba," + p + "nlp," + p + "llm," + p + "etabb," + p + "chem"},
		} {
			if out, err := exec.Command("sacctmgr", args...).CombinedOutput(); err != nil {
				t.Logf("cleanup: sacctmgr %v: %v: %s", args, err, out)
			}
		}
		sqlDB.Exec("DROP TABLE IF EXISTS `" + cluster + "_job_env_table`, `" + cluster + "_job_script_table`")
	})

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "k"), []byte("secret-0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "wb.dsn"), []byte(dsn+"\n"), 0o600)
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
	t0 := time.Unix(0, 0)
	tree := llmflow.Accounts{
		{Name: p + "etaba", Kind: llmflow.KindOrg, Shares: 13, Source: "slurm"},
		{Name: p + "nlp", Kind: llmflow.KindTeam, Parent: p + "etaba", Shares: 60, Source: "slurm"},
		{Name: p + "llm", Kind: llmflow.KindProject, Parent: p + "nlp", Shares: 70, Members: []string{alice}, Source: "slurm"},
		{Name: p + "etabb", Kind: llmflow.KindOrg, Shares: 3, Source: "slurm"},
		{Name: p + "chem", Kind: llmflow.KindTeam, Parent: p + "etabb", Shares: 100, Source: "slurm"},
	}
	seedSlurmSource(t, cluster+"s", tree, alice)
	if _, err := db.SaveSync(ctx, tree, llmflow.SyncRun{Started: t0, Finished: t0, Source: "test", Outcome: "applied"}); err != nil {
		t.Fatal(err)
	}
	keys := []llmflow.Key{
		{ID: "key_a", Hash: [32]byte{1}, Org: p + "etaba", Team: p + "nlp", Project: p + "llm", Owner: alice, CreatedAt: t0},
		{ID: "key_t", Hash: [32]byte{2}, Org: p + "etaba", Team: p + "nlp", CreatedAt: t0},
		{ID: "key_s", Hash: [32]byte{3}, Org: p + "etabb", Team: p + "chem", CreatedAt: t0},
	}
	for _, k := range keys {
		if err := db.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	var recs []llmflow.Record
	at := time.Date(2026, 11, 2, 21, 15, 0, 0, time.UTC)
	for i := range 6 { // 21:00 → 02:00, across midnight
		for j, k := range keys {
			recs = append(recs, llmflow.Record{Time: at.Add(time.Duration(i) * time.Hour), RequestID: "r" + string(rune('a'+i)) + string(rune('a'+j)),
				KeyID: k.ID, Org: k.Org, Team: k.Team, Project: k.Project, Model: "m", Pool: "p",
				GPUHours: 0.25 * float64(i+j+1), Status: 200, Outcome: llmflow.OutcomeOK})
		}
	}
	if err := db.WriteRecords(ctx, recs); err != nil {
		t.Fatal(err)
	}
	db.Close()

	llmflowCmd := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("llmflow %v: exit %d: %s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	wb := []string{"sync", "-c", cfgPath, "--to-slurmdbd", "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-04T00:00:00Z",
		"--writeback-dsn-file", filepath.Join(dir, "wb.dsn"), "--writeback-cluster", cluster, "--service-user", svc, "--writeback-tz", "UTC"}
	// without writeback { timezone } or --writeback-tz: UTC, as report's
	// default, never the process's local zone ("Local")
	if noTZ := llmflowCmd(append(slices.Clone(wb[:len(wb)-2]), "--dry-run")...); !strings.Contains(noTZ, "days and months in UTC)") {
		t.Errorf("dry run without a time zone:\n%s", noTZ)
	}
	var rout, rerr bytes.Buffer
	if code := Run(ctx, []string{"report", "-c", cfgPath, "--as-cluster", cluster, "cluster", "Utilization", "-P"}, &rout, &rerr); code != 0 ||
		!strings.Contains(rerr.String(), "note: periods, days and months in UTC, llmflow's default") {
		t.Errorf("report without a time zone: exit %d, stderr %q", code, rerr.String())
	}
	dry := llmflowCmd(append(wb, "--dry-run")...)
	if !strings.Contains(dry, "dry run: would write cluster "+cluster) || !strings.Contains(dry, "sacctmgr -i add cluster "+cluster) {
		t.Errorf("dry run:\n%s", dry)
	}
	out := llmflowCmd(wb...)
	t.Logf("llmflow sync --to-slurmdbd:\n%s", out)
	if strings.Contains(out, "\r") {
		t.Errorf("progress written to a pipe:\n%q", out)
	}
	if !strings.Contains(out, "(4 GPUs)") { // the pool's gpus
		t.Errorf("cluster rows not counted with the pool's 4 GPUs:\n%s", out)
	}

	compare := func(step string) {
		t.Helper()
		for _, period := range [][2]string{{"2026-11-02T00:00:00", "2026-11-04T00:00:00"}, {"2026-11-02T22:00:00", "2026-11-03T01:00:00"}} {
			for _, args := range [][]string{
				{"-P", "-T", "gres/gpu", "cluster", "AccountUtilizationByUser", "start=" + period[0], "end=" + period[1], "-t", "seconds"},
				{"-P", "-T", "gres/gpu", "cluster", "AccountUtilizationByUser", "start=" + period[0], "end=" + period[1], "-t", "hours"},
				{"-P", "-T", "gres/gpu", "cluster", "Utilization", "start=" + period[0], "end=" + period[1], "-t", "seconds"},
				// one user with two accounts: sorted by usage, as the cpu
				// rows the write-back mirrors make sreport sort
				{"-P", "-T", "gres/gpu", "cluster", "UserUtilizationByAccount", "start=" + period[0], "end=" + period[1], "-t", "seconds"},
				{"-P", "-T", "gres/gpu", "user", "TopUsage", "start=" + period[0], "end=" + period[1], "-t", "minutes"},
			} {
				c := exec.Command("sreport", append(args, "cluster="+cluster)...)
				c.Env = append(os.Environ(), "TZ=UTC")
				real, err := c.CombinedOutput()
				if err != nil {
					t.Fatalf("sreport %v: %v: %s", args, err, real)
				}
				ours := llmflowCmd(append([]string{"report", "-c", cfgPath, "--as-cluster", cluster, "--service-user", svc}, args...)...)
				if string(real) != ours {
					t.Errorf("%s: sreport %s\nreal sreport:\n%s\nllmflow report:\n%s", step, strings.Join(args, " "), real, ours)
				}
			}
		}
	}
	compare("after the write-back")
	llmflowCmd(wb...)
	compare("after writing the same period again")
}

// A failed write-back prints no line that reads like success, only the
// association tree changes made before it failed.
func TestWriteWriteback_Failure(t *testing.T) {
	res := writeback.Result{Cluster: "llm", ClusterCreated: true,
		Tree: []writeback.TreeChange{{Args: []string{"add", "account", "etaba", "cluster=llm"}}}}
	var b strings.Builder
	writeWriteback(&b, res, 8, time.UTC, errors.New("write-back: writing association hours: disk full"))
	got := b.String()
	for _, bad := range []string{"wrote", "would write"} {
		if strings.Contains(got, bad) {
			t.Errorf("failure output has %q:\n%s", bad, got)
		}
	}
	if !strings.Contains(got, "write-back failed") || !strings.Contains(got, "sacctmgr -i add account etaba cluster=llm") ||
		!strings.Contains(got, "sacctmgr -i add cluster llm") {
		t.Errorf("failure output:\n%s", got)
	}
	b.Reset()
	writeWriteback(&b, writeback.Result{Cluster: "llm"}, 8, time.UTC, errors.New("write-back: connect: refused"))
	if b.Len() != 0 {
		t.Errorf("a failure before any change printed:\n%s", b.String())
	}
	b.Reset()
	writeWriteback(&b, writeback.Result{Cluster: "llm", AssocHours: 3}, 8, time.UTC, nil)
	if !strings.HasPrefix(b.String(), "wrote cluster llm") {
		t.Errorf("success output:\n%s", b.String())
	}
}

// seedSlurmSource creates the Slurm a tree was imported from: a cluster of
// its own (removed at the end) with the accounts of tree and the users in
// the first account. The write-back creates no Slurm account or user
// (the service user excepted), so the names it writes must exist.
func seedSlurmSource(t *testing.T, cluster string, tree llmflow.Accounts, users ...string) {
	t.Helper()
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	var parents []string
	children := map[string][]string{}
	for _, a := range tree {
		p := cmp.Or(a.Parent, "root")
		if _, ok := children[p]; !ok {
			parents = append(parents, p)
		}
		children[p] = append(children[p], a.Name)
	}
	for _, p := range parents { // parents before children, as in the tree
		sam(t, "add", "account", strings.Join(children[p], ","), "parent="+p, "cluster="+cluster)
	}
	if len(users) > 0 {
		sam(t, "add", "user", strings.Join(users, ","), "account="+tree[0].Name, "cluster="+cluster)
	}
}
