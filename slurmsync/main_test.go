package slurmsync

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow/internal/redact"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// TestMain lets the test binary act as a fake sacctmgr (the helper-process
// pattern): a test runs os.Args[0] with FAKE_SACCTMGR set.
func TestMain(m *testing.M) {
	if mode := os.Getenv("FAKE_SACCTMGR"); mode != "" {
		os.Exit(fakeSacctmgr(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

const captures = "../testdata/slurm"

// fakeSacctmgr answers like sacctmgr would for the captured hgx state.
func fakeSacctmgr(mode string, args []string) int {
	if log := os.Getenv("FAKE_SACCTMGR_LOG"); log != "" {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, strings.Join(args, " "))
			f.Close()
		}
	}
	switch mode {
	case "fail":
		b, _ := os.ReadFile(filepath.Join(captures, "sacctmgr/assoc.unknown-column.psv.stderr"))
		os.Stderr.Write(b)
		os.Stderr.WriteString("\n\n")
		return 1
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	case "captures":
	default:
		fmt.Fprintln(os.Stderr, "fake sacctmgr: unknown mode", mode)
		return 2
	}
	a := " " + strings.Join(args, " ") + " "
	if !strings.Contains(a, " --parsable2 ") {
		fmt.Fprintln(os.Stderr, "fake sacctmgr: want --parsable2")
		return 1
	}
	var file string
	switch {
	case strings.Contains(a, " show account withdeleted "):
		file = "account.withdeleted.psv"
	case strings.Contains(a, " show user withcoord "):
		file = "user.withcoord.psv"
	case !strings.Contains(a, " show assoc ") || !strings.Contains(a, " where cluster=hgx "):
		fmt.Fprintln(os.Stderr, "fake sacctmgr: unexpected arguments:", a)
		return 1
	case strings.Contains(a, " onlydefaults "):
		file = "assoc.onlydefaults.psv"
	case strings.Contains(a, " withdeleted "):
		file = "assoc.format.withdeleted.psv"
	default:
		file = "assoc.format.psv"
	}
	b, err := os.ReadFile(filepath.Join(captures, "sacctmgr", file))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Stdout.Write(b)
	return 0
}

// captureFiles is the sacctmgr side of the captured hgx state.
func captureFiles() map[Listing]string {
	d := filepath.Join(captures, "sacctmgr")
	return map[Listing]string{
		Assocs:        filepath.Join(d, "assoc.format.withdeleted.psv"),
		LiveAssocs:    filepath.Join(d, "assoc.format.psv"),
		Defaults:      filepath.Join(d, "assoc.onlydefaults.psv"),
		Descriptions:  filepath.Join(d, "account.withdeleted.psv"),
		Organizations: filepath.Join(d, "account.withdeleted.psv"),
		Coordinators:  filepath.Join(d, "user.withcoord.psv"),
	}
}

// ---------------------------------------------------------------- real Slurm

// SkipEnv, set to 1, skips the tests that need MariaDB, slurmdbd and
// sacctmgr (scripts/slurm/setup.sh). Without it they fail when those are
// not reachable.
const SkipEnv = "LLMFLOW_SKIP_SLURM"

const setupHint = "run scripts/slurm/setup.sh (as root) first, or set " + SkipEnv + "=1 to skip the Slurm tests"

// dsnFile returns the DSN in the file named by $env or path.
func dsnFile(env, path string) (string, error) {
	if p := os.Getenv(env); p != "" {
		path = p
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

type slurmEnv struct {
	testDSN string // llmflow_test: scratch databases, UPDATE on slurm_acct_db
	roDSN   string // llmflow: SELECT on slurm_acct_db
	db      *sql.DB
	err     error
}

var (
	envOnce sync.Once
	env     slurmEnv
)

func probeSlurm() {
	e := &env
	e.testDSN, e.err = dsnFile("LLMFLOW_SLURM_TEST_DSN_FILE", "/etc/slurm/llmflow-test.dsn")
	if e.err != nil {
		return
	}
	if e.roDSN, e.err = dsnFile("LLMFLOW_SLURM_DSN_FILE", "/etc/slurm/llmflow-slurmdbd.dsn"); e.err != nil {
		return
	}
	cfg, err := mysql.ParseDSN(e.testDSN)
	if err != nil {
		e.err = fmt.Errorf("test DSN: %v", redact.String(err.Error(), e.testDSN))
		return
	}
	cfg.MultiStatements = true
	cfg.Timeout = 5 * time.Second
	conn, _ := mysql.NewConnector(cfg)
	e.db = sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.db.PingContext(ctx); err != nil {
		e.err = fmt.Errorf("MariaDB: %v", redact.String(err.Error(), cfg.Passwd))
		return
	}
	out, err := exec.CommandContext(ctx, "sacctmgr", "-i", "show", "cluster").CombinedOutput()
	if err != nil {
		e.err = fmt.Errorf("sacctmgr -i show cluster: %v: %s", err, strings.TrimSpace(string(out)))
	}
}

// needSlurm returns the environment of the real-Slurm tests, skipping the
// test only when LLMFLOW_SKIP_SLURM=1.
func needSlurm(t testing.TB) *slurmEnv {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skip(SkipEnv + "=1: skipping a test that needs MariaDB, slurmdbd and sacctmgr")
	}
	envOnce.Do(probeSlurm)
	if env.err != nil {
		t.Fatalf("Slurm test environment not reachable: %v\n%s", env.err, setupHint)
	}
	return &env
}

// scratchDB creates (afresh) the database llmflow_test_<name> and returns a
// test-user DSN for it; it is dropped at the end of the test unless keep.
func scratchDB(t testing.TB, e *slurmEnv, name string, keep bool) string {
	t.Helper()
	db := "llmflow_test_" + name
	if !keep {
		if _, err := e.db.Exec("DROP DATABASE IF EXISTS `" + db + "`"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.db.Exec("DROP DATABASE IF EXISTS `" + db + "`") })
	}
	if _, err := e.db.Exec("CREATE DATABASE IF NOT EXISTS `" + db + "`"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := mysql.ParseDSN(e.testDSN)
	cfg.DBName = db
	cfg.MultiStatements = true
	return cfg.FormatDSN()
}

// loadCaptures loads schema.sql and the TSV dumps into the database of dsn.
func loadCaptures(t testing.TB, dsn string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schema, err := os.ReadFile(filepath.Join(captures, "db/schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	for _, l := range strings.Split(string(schema), "\n") {
		if strings.HasPrefix(l, "/*M!999999") { // mysql client sandbox command
			continue
		}
		stmts = append(stmts, l)
	}
	if _, err := db.Exec(strings.Join(stmts, "\n")); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	for _, table := range []string{"acct_table", "user_table", "hgx_assoc_table", "tres_table"} {
		loadTSV(t, db, table, filepath.Join(captures, "db", table+".tsv"))
	}
}

// loadTSV inserts the rows of a `mysql --batch` dump (header line, tabs,
// NULL, backslash escapes) into table.
func loadTSV(t testing.TB, db *sql.DB, table, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatalf("%s: empty", path)
	}
	cols := strings.Split(sc.Text(), "\t")
	q := "INSERT INTO `" + table + "` (`" + strings.Join(cols, "`,`") + "`) VALUES (" +
		strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
	unescape := strings.NewReplacer(`\t`, "\t", `\n`, "\n", `\0`, "\x00", `\\`, `\`)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != len(cols) {
			t.Fatalf("%s: %d fields for %d columns", path, len(fields), len(cols))
		}
		args := make([]any, len(fields))
		for i, v := range fields {
			if v == "NULL" {
				args[i] = nil
			} else {
				args[i] = unescape.Replace(v)
			}
		}
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// sameTree fails the test when a and b differ.
func sameTree(t testing.TB, what string, a, b *sacctmgr.Tree) {
	t.Helper()
	if d := diffTrees(a, b); d != "" {
		t.Fatalf("%s: trees differ: %s\n--- first:\n%s\n--- second:\n%s", what, d, a, b)
	}
}

func diffTrees(a, b *sacctmgr.Tree) string {
	if a.Cluster != b.Cluster {
		return fmt.Sprintf("cluster %q != %q", a.Cluster, b.Cluster)
	}
	for i := 0; i < max(len(a.Accounts), len(b.Accounts)); i++ {
		switch {
		case i >= len(a.Accounts):
			return fmt.Sprintf("account %d: missing != %+v", i, b.Accounts[i])
		case i >= len(b.Accounts):
			return fmt.Sprintf("account %d: %+v != missing", i, a.Accounts[i])
		case a.Accounts[i] != b.Accounts[i]:
			return fmt.Sprintf("account %d: %+v != %+v", i, a.Accounts[i], b.Accounts[i])
		}
	}
	for i := 0; i < max(len(a.Users), len(b.Users)); i++ {
		switch {
		case i >= len(a.Users):
			return fmt.Sprintf("user %d: missing != %+v", i, b.Users[i])
		case i >= len(b.Users):
			return fmt.Sprintf("user %d: %+v != missing", i, a.Users[i])
		case a.Users[i] != b.Users[i]:
			return fmt.Sprintf("user %d: %+v != %+v", i, a.Users[i], b.Users[i])
		}
	}
	if a.CoordsKnown != b.CoordsKnown || !slices.Equal(a.Coords, b.Coords) {
		return fmt.Sprintf("coordinators (known %v) %v != (known %v) %v", a.CoordsKnown, a.Coords, b.CoordsKnown, b.Coords)
	}
	return ""
}
