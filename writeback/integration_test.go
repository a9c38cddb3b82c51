package writeback_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/writeback"

	"github.com/go-llmflow/llmflow/internal/slurmtest"
)

// SkipEnv, set to 1, skips the tests that need MariaDB, slurmdbd, sacctmgr
// and sreport (scripts/slurm/setup.sh). Without it they fail when those are
// not reachable.
const SkipEnv = "LLMFLOW_SKIP_SLURM"

const setupHint = "run scripts/slurm/setup.sh (as root) first, or set " + SkipEnv + "=1 to skip the Slurm tests"

var (
	rootOnce sync.Once
	rootDB   *sql.DB
	rootErr  error
)

// rootDSNs are tried in order: the write-back needs INSERT/DELETE on the
// test cluster's usage tables and INSERT on tres_table, which the lab's
// llmflow_test user does not have; root over the local socket (no password
// in the lab) has. LLMFLOW_WRITEBACK_TEST_DSN overrides.
func rootDSNs() []string {
	if d := os.Getenv("LLMFLOW_WRITEBACK_TEST_DSN"); d != "" {
		return []string{d}
	}
	return []string{"root@unix(/run/mysqld/mysqld.sock)/slurm_acct_db", "root@tcp(127.0.0.1:3306)/slurm_acct_db"}
}

// needSlurm returns a handle on slurm_acct_db with write access, skipping
// the test only when LLMFLOW_SKIP_SLURM=1.
func needSlurm(t *testing.T) *sql.DB {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skip(SkipEnv + "=1: skipping a test that needs MariaDB, slurmdbd, sacctmgr and sreport")
	}
	rootOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, dsn := range rootDSNs() {
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				rootErr = fmt.Errorf("test DSN does not parse")
				continue
			}
			cfg.Timeout = 5 * time.Second
			conn, _ := mysql.NewConnector(cfg)
			db := sql.OpenDB(conn)
			if err := db.PingContext(ctx); err != nil {
				db.Close()
				rootErr = fmt.Errorf("MariaDB (%s@%s): %v", cfg.User, cfg.Addr, err)
				continue
			}
			rootDB, rootErr = db, nil
			break
		}
		if rootErr != nil {
			return
		}
		for _, c := range []string{"sacctmgr", "sreport"} {
			if _, err := exec.LookPath(c); err != nil {
				rootErr = fmt.Errorf("%s: %v", c, err)
				return
			}
		}
		if out, err := exec.CommandContext(ctx, "sacctmgr", "-i", "show", "cluster").CombinedOutput(); err != nil {
			rootErr = fmt.Errorf("sacctmgr -i show cluster: %v: %s", err, strings.TrimSpace(string(out)))
		}
	})
	if rootErr != nil {
		t.Fatalf("Slurm test environment not reachable: %v\n%s", rootErr, setupHint)
	}
	return rootDB
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	return slurmtest.Run(t, name, args...)
}

// fixture is the llmflow side of the test: a tree and rollups for a few
// hours on each side of a day boundary, plus a day in October (read from
// the month table), with two user associations in every account.
type fixture struct {
	p       string // unique prefix of this run's names
	cluster string
	svc     string
	users   []string // the run's Slurm users (removed at the end)
	tree    llmflow.Accounts
	rollups []llmflow.Rollup
}

func newFixture() *fixture {
	b := make([]byte, 3)
	rand.Read(b)
	r := hex.EncodeToString(b)
	f := &fixture{p: "wb" + r + "-", cluster: "llmwb_" + r, svc: "wb" + r + "svc"}
	n := func(s string) string { return f.p + s }
	f.users = []string{n("alice"), n("bob"), n("carol"), n("dave")}
	f.tree = llmflow.Accounts{
		{Name: n("etaba"), Kind: llmflow.KindOrg, Shares: 13, Source: "slurm"},
		{Name: n("nlp"), Kind: llmflow.KindTeam, Parent: n("etaba"), Shares: 60, Members: []string{n("alice")}, Source: "slurm"},
		{Name: n("llm"), Kind: llmflow.KindProject, Parent: n("nlp"), Shares: 70, Members: []string{n("alice"), n("bob")}, Source: "slurm"},
		{Name: n("asr"), Kind: llmflow.KindProject, Parent: n("nlp"), UseParent: true, Source: "slurm"},
		{Name: n("vision"), Kind: llmflow.KindTeam, Parent: n("etaba"), Shares: 40, Members: []string{n("bob")}, Source: "slurm"},
		{Name: n("etabb"), Kind: llmflow.KindOrg, Shares: 3, Source: "slurm"},
		{Name: n("chem"), Kind: llmflow.KindTeam, Parent: n("etabb"), Shares: 100, Members: []string{n("carol")}, Source: "slurm"},
	}
	h := func(s string) time.Time {
		t, err := time.Parse("2006-01-02T15", s)
		if err != nil {
			panic(err)
		}
		return t
	}
	add := func(hour, org, team, project, owner, model string, gpuHours float64) {
		f.rollups = append(f.rollups, llmflow.Rollup{Hour: h(hour), Org: org, Team: team, Project: project, Owner: owner,
			KeyID: "key_" + owner + project, Model: model, Pool: "h100", Requests: 10, GPUHours: gpuHours})
	}
	A, B := n("etaba"), n("etabb")
	// 2026-11-20 20:00 → 2026-11-21 03:00 UTC, across midnight.
	for i, hr := range []string{"2026-11-20T20", "2026-11-20T21", "2026-11-20T22", "2026-11-20T23", "2026-11-21T00", "2026-11-21T01", "2026-11-21T02"} {
		x := float64(i + 1)
		add(hr, A, n("nlp"), n("llm"), n("alice"), "llama-70b", 1.25*x) // project key with owner
		add(hr, A, n("nlp"), n("llm"), n("alice"), "qwen-7b", 0.1)      // same association, another model
		add(hr, A, n("nlp"), n("llm"), "", "llama-70b", 0.5)            // project key without owner → service user
		add(hr, A, n("nlp"), "", n("alice"), "qwen-7b", 0.3*x)          // team key with owner
		add(hr, A, n("nlp"), "", "", "qwen-7b", 0.2)                    // team key without owner
		if i%2 == 0 {
			add(hr, A, n("vision"), "", n("bob"), "llava", 2)
			add(hr, A, n("vision"), "", n("dave"), "llava", 0.75) // an owner who is not a member
		}
		add(hr, B, n("chem"), "", n("carol"), "llama-70b", 3.5)
		add(hr, B, n("chem"), "", "", "llama-70b", 1.0/3) // 1200 s
	}
	add("2026-11-22T10", A, n("nlp"), n("asr"), n("bob"), "whisper", 0.01) // 36 s
	add("2026-11-22T10", A, n("nlp"), n("asr"), "", "whisper", 0.0001)     // rounds to 0 s: no row
	add("2026-11-22T11", "", "", "", "", "llama-70b", 5)                   // no key: unattributed
	// October, read back from the month table.
	add("2026-10-15T08", A, n("nlp"), n("llm"), n("bob"), "llama-70b", 8)
	add("2026-10-15T09", A, n("nlp"), n("llm"), n("bob"), "llama-70b", 8)
	add("2026-10-15T09", B, n("chem"), "", "", "llama-70b", 2.5)
	return f
}

// cleanup removes the run's cluster, accounts and users.
func (f *fixture) cleanup(t *testing.T, db *sql.DB) {
	var accts, users []string
	for _, a := range f.tree {
		accts = append(accts, a.Name)
	}
	users = append(slices.Clone(f.users), f.svc)
	for _, args := range [][]string{
		{"-i", "delete", "cluster", f.cluster},
		{"-i", "delete", "user", strings.Join(users, ",")},
		{"-i", "delete", "account", strings.Join(accts, ",")},
	} {
		if out, err := exec.Command("sacctmgr", args...).CombinedOutput(); err != nil {
			t.Logf("cleanup: sacctmgr %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// slurmdbd 22.05 drops a removed cluster's tables but these two.
	if _, err := db.Exec("DROP TABLE IF EXISTS `" + f.cluster + "_job_env_table`, `" + f.cluster + "_job_script_table`"); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// parent returns the Slurm parent of every account ("root" for orgs).
func (f *fixture) parents() map[string]string {
	m := map[string]string{}
	for _, a := range f.tree {
		m[a.Name] = cmp.Or(a.Parent, "root")
	}
	return m
}

// expectedRows computes sreport's AccountUtilizationByUser rows (-P, no
// header block) from the write-back's own hour rows: one row per user
// association with usage, account rows = subtree sums, tree order (under
// each account its users by name, then its sub-accounts by name);
// associations and accounts without usage are left out. unit is
// "seconds" or "hours" (printf %.0f, half to even).
func expectedRows(cluster string, parents map[string]string, usage []llmflow.AssocHour, from, to time.Time, unit string) []string {
	assoc := map[[2]string]int64{}
	sub := map[string]int64{}
	for _, u := range usage {
		if u.Hour.Before(from) || !u.Hour.Before(to) {
			continue
		}
		assoc[[2]string{u.Account, u.User}] += u.AllocSecs
		for a := u.Account; a != ""; a = parents[a] {
			sub[a] += u.AllocSecs
			if a == "root" {
				break
			}
		}
	}
	children := map[string][]string{}
	for a, p := range parents {
		children[p] = append(children[p], a)
	}
	usersOf := map[string][]string{}
	for k := range assoc {
		usersOf[k[0]] = append(usersOf[k[0]], k[1])
	}
	format := func(s int64) string {
		if unit == "hours" {
			return strconv.FormatFloat(float64(s)/3600, 'f', 0, 64)
		}
		return strconv.FormatInt(s, 10)
	}
	var out []string
	var walk func(a string)
	walk = func(a string) {
		if sub[a] == 0 {
			return
		}
		out = append(out, fmt.Sprintf("%s|%s|||gres/gpu|%s", cluster, a, format(sub[a])))
		us := usersOf[a]
		slices.Sort(us)
		for _, u := range us {
			out = append(out, fmt.Sprintf("%s|%s|%s||gres/gpu|%s", cluster, a, u, format(assoc[[2]string{a, u}])))
		}
		kids := children[a]
		slices.Sort(kids)
		for _, k := range kids {
			walk(k)
		}
	}
	walk("root")
	return out
}

// sreportRows runs the real sreport and returns its data rows.
func sreportRows(t *testing.T, cluster string, from, to time.Time, unit string) []string {
	t.Helper()
	out := run(t, "sreport", "-n", "-P", "-T", "gres/gpu", "cluster", "AccountUtilizationByUser", "cluster="+cluster,
		"start="+from.Format("2006-01-02T15:04:05"), "end="+to.Format("2006-01-02T15:04:05"), "-t", unit)
	var rows []string
	for l := range strings.Lines(out) {
		if l = strings.TrimRight(l, "\n"); l != "" {
			rows = append(rows, l)
		}
	}
	return rows
}

// period is a report range and which of slurmdbd's tables sreport reads
// for it (the usage tables per hour, day and month).
type period struct {
	name     string
	from, to time.Time
}

func periods() []period {
	d := func(s string) time.Time {
		t, _ := time.Parse(time.RFC3339, s)
		return t
	}
	return []period{
		{"hours (hour table)", d("2026-11-20T21:00:00Z"), d("2026-11-21T02:00:00Z")},
		{"days (day table)", d("2026-11-20T00:00:00Z"), d("2026-11-23T00:00:00Z")},
		{"one day (day table)", d("2026-11-21T00:00:00Z"), d("2026-11-22T00:00:00Z")},
		{"October (month table)", d("2026-10-01T00:00:00Z"), d("2026-11-01T00:00:00Z")},
		{"Oct 1 - Nov 30 (day table)", d("2026-10-01T00:00:00Z"), d("2026-11-30T00:00:00Z")},
	}
}

// checkSreport compares the real sreport with the rows expected from the
// write-back's hour rows, for every period, in seconds and in hours.
func checkSreport(t *testing.T, step string, f *fixture, usage []llmflow.AssocHour) {
	t.Helper()
	for _, p := range periods() {
		for _, unit := range []string{"seconds", "hours"} {
			got := sreportRows(t, f.cluster, p.from, p.to, unit)
			want := expectedRows(f.cluster, f.parents(), usage, p.from, p.to, unit)
			if !slices.Equal(got, want) {
				t.Errorf("%s: sreport %s -t %s:\n got: %s\nwant: %s", step, p.name, unit,
					strings.Join(got, "\n      "), strings.Join(want, "\n      "))
			}
		}
	}
}

// snapshot returns the values of the test cluster's usage tables (without
// creation_time and mod_time), to compare across slurmdbd rollups.
func snapshot(t *testing.T, db *sql.DB, cluster string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, tbl := range []string{"assoc_usage_hour", "assoc_usage_day", "assoc_usage_month", "usage_hour", "usage_day", "usage_month"} {
		cols := "deleted, id, id_tres, time_start, alloc_secs"
		if !strings.HasPrefix(tbl, "assoc") {
			cols = "deleted, id_tres, time_start, count, alloc_secs, down_secs, pdown_secs, idle_secs, plan_secs, over_secs"
		}
		rows, err := db.Query("SELECT CONCAT_WS(',', " + cols + ") FROM `" + cluster + "_" + tbl + "_table` ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			rows.Scan(&s)
			out[tbl] = append(out[tbl], s)
		}
		rows.Close()
	}
	return out
}

func lastRan(t *testing.T, db *sql.DB, cluster string) (h, d, m int64) {
	t.Helper()
	err := db.QueryRow("SELECT hourly_rollup, daily_rollup, monthly_rollup FROM `"+cluster+"_last_ran_table`").Scan(&h, &d, &m)
	if err != nil {
		t.Fatalf("last_ran_table: %v", err)
	}
	return
}

func sameSnapshot(t *testing.T, step string, a, b map[string][]string) {
	t.Helper()
	for tbl := range a {
		if !slices.Equal(a[tbl], b[tbl]) {
			t.Errorf("%s: %s changed:\nbefore: %v\n after: %v", step, tbl, a[tbl], b[tbl])
		}
	}
}

// TestIntegrationSreport writes rollups back to a fresh cluster of the real
// slurmdbd and checks that the real sreport reports exactly the rollups'
// numbers: after the first write, after re-writing the same period
// (idempotent), after changing one hour (replaced, not added), and across
// two real slurmdbd rollups (the periodic one, from a backdated last_ran,
// and a forced re-roll of the written days).
func TestIntegrationSreport(t *testing.T) {
	db := needSlurm(t)
	ctx := context.Background()
	f := newFixture()
	if os.Getenv("LLMFLOW_WRITEBACK_KEEP") == "1" { // keep the cluster, e.g. to watch slurmdbd's next hourly rollup
		t.Logf("LLMFLOW_WRITEBACK_KEEP=1: keeping cluster %s, accounts and users %s*", f.cluster, f.p)
	} else {
		t.Cleanup(func() { f.cleanup(t, db) })
	}
	seedSlurm(t, f.cluster+"s", f.tree, f.users)
	t.Logf("cluster %s", f.cluster)

	from, to := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	var stages []string
	w, err := writeback.New(db, writeback.Config{
		Cluster: f.cluster, ServiceUser: f.svc, GPUs: 32, Location: time.UTC,
		Progress: func(stage string, done, total int) {
			if done == total {
				stages = append(stages, stage)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	// Dry run: says what it would do, changes nothing.
	dry, err := w.Write(ctx, from, to, f.tree, f.rollups, true)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if !dry.ClusterCreated || len(dry.Tree) == 0 {
		t.Errorf("dry run: want a cluster and tree to create, got %+v", dry)
	}
	if n := strings.TrimSpace(run(t, "sacctmgr", "-nP", "show", "cluster", f.cluster, "format=Cluster")); n != "" {
		t.Fatalf("dry run created cluster %q", n)
	}

	res, err := w.Write(ctx, from, to, f.tree, f.rollups, false)
	if err != nil {
		t.Fatalf("write-back: %v", err)
	}
	t.Logf("first write: %d tree commands, %d assoc hours, %d days, %d months, %d cluster hours, %d days, %d months, %.4f GPU-h, unattributed %+v, gres/gpu id %d",
		len(res.Tree), res.AssocHours, res.AssocDays, res.AssocMonths, res.ClusterHours, res.ClusterDays, res.ClusterMonths,
		res.GPUHours(), res.Unattributed, res.TRESID)
	if res.Unattributed.Rollups != 1 || res.Unattributed.GPUHours != 5 {
		t.Errorf("unattributed = %+v, want the one keyless rollup of 5 GPU-hours", res.Unattributed)
	}
	if res.OverCapacity != 0 {
		t.Errorf("%d hours over the 32 GPUs' capacity", res.OverCapacity)
	}
	if res.ClusterHours != int(to.Sub(from)/time.Hour) {
		t.Errorf("cluster hours = %d, want every hour of the period (%d)", res.ClusterHours, int(to.Sub(from)/time.Hour))
	}
	if res.AssocDays == 0 || res.AssocMonths != 11 || res.ClusterDays != 53 || res.ClusterMonths != 2 {
		t.Errorf("day/month rows: %+v", res)
	}
	if !slices.Contains(stages, "association hours") || !slices.Contains(stages, "cluster months") {
		t.Errorf("progress stages = %v", stages)
	}
	// The tree mirrors llmflow's: parents, fairshare, users (members and
	// the associations used, the service user included).
	assocs := run(t, "sacctmgr", "-nP", "show", "assoc", "cluster="+f.cluster, "format=Account,User,Share,ParentName")
	for _, want := range []string{
		f.p + "etaba||13|root", f.p + "nlp||60|" + f.p + "etaba", f.p + "llm||70|" + f.p + "nlp",
		f.p + "asr||parent|" + f.p + "nlp", f.p + "chem||100|" + f.p + "etabb",
		f.p + "llm|" + f.p + "alice|1|", f.p + "llm|" + f.p + "bob|1|", f.p + "llm|" + f.svc + "|1|",
		f.p + "vision|" + f.p + "dave|1|", f.p + "chem|" + f.svc + "|1|",
	} {
		if !strings.Contains(assocs, want+"\n") {
			t.Errorf("sacctmgr show assoc: no line %q in\n%s", want, assocs)
		}
	}
	usage := res.AssocHourRows
	checkSreport(t, "first write", f, usage)
	// sreport's Utilization (cluster rows): allocated + idle = 32 GPUs × hours.
	u := run(t, "sreport", "-n", "-P", "-T", "gres/gpu", "cluster", "Utilization", "cluster="+f.cluster,
		"start=2026-11-20T00:00:00", "end=2026-11-22T00:00:00", "-t", "seconds")
	var alloc int64
	for _, a := range usage {
		if a.Hour.Before(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)) && !a.Hour.Before(time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)) {
			alloc += a.AllocSecs
		}
	}
	if want := fmt.Sprintf("%s|gres/gpu|%d|0|0|%d|0|%d\n", f.cluster, alloc, 32*48*3600-alloc, 32*48*3600); u != want {
		t.Errorf("sreport Utilization = %q, want %q", u, want)
	}

	// Idempotent: the same period again changes no value and runs no sacctmgr.
	before := snapshot(t, db, f.cluster)
	res2, err := w.Write(ctx, from, to, f.tree, f.rollups, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res2.Tree) != 0 || res2.ClusterCreated || res2.TRESCreated {
		t.Errorf("second write changed the tree: %v", res2.Tree)
	}
	sameSnapshot(t, "re-write", before, snapshot(t, db, f.cluster))
	checkSreport(t, "re-write", f, usage)

	// One hour changes (late records): re-writing that hour replaces it.
	changed := slices.Clone(f.rollups)
	for i := range changed {
		if changed[i].Hour.Equal(time.Date(2026, 11, 21, 1, 0, 0, 0, time.UTC)) && changed[i].Owner == f.p+"carol" {
			changed[i].GPUHours += 10
		}
	}
	h1 := time.Date(2026, 11, 21, 1, 0, 0, 0, time.UTC)
	if _, err := w.Write(ctx, h1, h1.Add(time.Hour), f.tree, changed, false); err != nil {
		t.Fatal(err)
	}
	usage2, _ := llmflow.AssocHours(changed, f.svc)
	checkSreport(t, "one hour re-written", f, usage2)
	// and back
	if _, err := w.Write(ctx, h1, h1.Add(time.Hour), f.tree, f.rollups, false); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, "hour restored", before, snapshot(t, db, f.cluster))

	// slurmdbd's own rollup. The write-back left last_ran at its end:
	hr, _, _ := lastRan(t, db, f.cluster)
	if hr < to.Unix() {
		t.Errorf("last_ran hourly_rollup = %d, want ≥ %d", hr, to.Unix())
	}
	// (a) the periodic rollup (what slurmdbd runs every hour), made to
	// re-roll every written hour by backdating last_ran to 2026-10-01.
	back := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC).Unix()
	if _, err := db.Exec("UPDATE `"+f.cluster+"_last_ran_table` SET hourly_rollup = ?, daily_rollup = ?, monthly_rollup = ?", back, back, back); err != nil {
		t.Fatal(err)
	}
	run(t, "sacctmgr", "-i", "rollup")
	h, d, m := lastRan(t, db, f.cluster)
	now := time.Now()
	if h < now.Truncate(time.Hour).Add(-time.Hour).Unix() || d <= back || m <= back {
		t.Errorf("slurmdbd did not roll up: last_ran = %d/%d/%d", h, d, m)
	}
	t.Logf("periodic rollup ran: last_ran hourly %s, daily %s, monthly %s",
		time.Unix(h, 0).UTC().Format(time.RFC3339), time.Unix(d, 0).UTC().Format(time.RFC3339), time.Unix(m, 0).UTC().Format(time.RFC3339))
	sameSnapshot(t, "after slurmdbd's periodic rollup", before, snapshot(t, db, f.cluster))
	checkSreport(t, "after slurmdbd's periodic rollup", f, usage)
	// (b) a forced re-roll of the written days (sacctmgr rollup START END:
	// hourly, daily and monthly rollups of that window, last_ran untouched).
	run(t, "sacctmgr", "-i", "rollup", "2026-11-20T00:00:00", "2026-11-23T00:00:00")
	sameSnapshot(t, "after a forced re-roll", before, snapshot(t, db, f.cluster))
	checkSreport(t, "after a forced re-roll", f, usage)
}

// TestIntegrationScale writes a month of usage of 100 accounts × 4 users
// (≈ 290,000 association-hours) and re-writes it, reporting the times.
// Skipped with -short.
func TestIntegrationScale(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	db := needSlurm(t)
	f := newFixture()
	f.tree = llmflow.Accounts{{Name: f.p + "org", Kind: llmflow.KindOrg, Shares: 1}}
	var users []string
	for u := range 4 {
		users = append(users, fmt.Sprintf("%su%d", f.p, u))
	}
	f.rollups = nil
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	for a := range 100 {
		team := fmt.Sprintf("%st%02d", f.p, a)
		f.tree = append(f.tree, llmflow.Account{Name: team, Kind: llmflow.KindTeam, Parent: f.p + "org", Shares: 1, Members: users})
		for h := from; h.Before(to); h = h.Add(time.Hour) {
			for i, u := range users {
				f.rollups = append(f.rollups, llmflow.Rollup{Hour: h, Org: f.p + "org", Team: team, Owner: u, GPUHours: 0.01 * float64(1+(a+i)%50)})
			}
		}
	}
	f.users = users
	t.Cleanup(func() { f.cleanup(t, db) })
	seedSlurm(t, f.cluster+"s", f.tree, f.users)
	w, err := writeback.New(db, writeback.Config{Cluster: f.cluster, ServiceUser: f.svc, GPUs: 4096, Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"first write (tree included)", "re-write"} {
		start := time.Now()
		res, err := w.Write(context.Background(), from, to, f.tree, f.rollups, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d rollups → %d association-hours, %d days, %d months, %d cluster hours; %d sacctmgr commands; %s",
			step, len(f.rollups), res.AssocHours, res.AssocDays, res.AssocMonths, res.ClusterHours, len(res.Tree), time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	got := sreportRows(t, f.cluster, from, to, "seconds")
	usage, _ := llmflow.AssocHours(f.rollups, f.svc)
	parents := map[string]string{}
	for _, a := range f.tree {
		parents[a.Name] = cmp.Or(a.Parent, "root")
	}
	if want := expectedRows(f.cluster, parents, usage, from, to, "seconds"); !slices.Equal(got, want) {
		t.Errorf("sreport: %d rows, want %d", len(got), len(want))
	}
	t.Logf("sreport over the month: %d rows in %s", len(got), time.Since(start).Round(time.Millisecond))
}

// seedSlurm creates the Slurm the tree was imported from: a cluster of its
// own (removed at the end) with the accounts of tree and each user in the
// first account. The write-back creates no Slurm account or user (only
// the service user), so the names it writes must exist.
func seedSlurm(t *testing.T, cluster string, tree llmflow.Accounts, users []string) {
	t.Helper()
	run(t, "sacctmgr", "-i", "add", "cluster", cluster)
	t.Cleanup(func() {
		if out, err := exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).CombinedOutput(); err != nil {
			t.Logf("cleanup: sacctmgr delete cluster %s: %v: %s", cluster, err, out)
		}
	})
	var first string
	var parents []string
	children := map[string][]string{}
	for _, a := range tree {
		if a.Kind == llmflow.KindRoot {
			continue
		}
		p := cmp.Or(strings.ToLower(a.Parent), "root")
		if _, ok := children[p]; !ok {
			parents = append(parents, p)
		}
		children[p] = append(children[p], strings.ToLower(a.Name))
		first = cmp.Or(first, strings.ToLower(a.Name))
	}
	for _, p := range parents { // the tree lists parents before children
		run(t, "sacctmgr", "-i", "add", "account", strings.Join(children[p], ","), "parent="+p, "cluster="+cluster)
	}
	if len(users) > 0 {
		run(t, "sacctmgr", "-i", "add", "user", strings.Join(users, ","), "account="+first, "cluster="+cluster)
	}
}
