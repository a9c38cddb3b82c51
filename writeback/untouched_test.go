package writeback_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/writeback"
)

// dumpRows returns every row of query, each as its columns joined by '|'.
func dumpRows(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		s := make([]string, len(vals))
		for i, v := range vals {
			s[i] = cols[i] + "=" + string(v)
		}
		out = append(out, strings.Join(s, "|"))
	}
	return out
}

// clusterTables returns every row of every table of cluster.
func clusterTables(t *testing.T, db *sql.DB, cluster string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, tbl := range dumpRows(t, db, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?",
		strings.ReplaceAll(cluster, "_", `\_`)+`\_%`) {
		name := strings.TrimPrefix(strings.TrimPrefix(tbl, "table_name="), "TABLE_NAME=")
		out[name] = dumpRows(t, db, "SELECT * FROM `"+name+"` ORDER BY 1")
	}
	return out
}

// TestIntegrationTouchesNothingElse writes usage back, including usage of
// an account deleted in slurmdbd, of a user deleted in slurmdbd and of a
// live account with a description, and diffs acct_table, user_table and
// every table of another cluster before and after: the rows of accounts
// and users that existed are unchanged (the deleted ones stay deleted, the
// description stays), the other cluster is untouched; the usage that
// could only be written by reviving the account or user, or by creating
// one Slurm does not have (an account only llmflow knows, a key owner who
// is no Slurm user), is reported as not written, the rest is written: no
// account or user row is added, but the service user's.
func TestIntegrationTouchesNothingElse(t *testing.T) {
	db := needSlurm(t)
	b := make([]byte, 3)
	rand.Read(b)
	r := hex.EncodeToString(b)
	p := "s8" + r + "-"
	n := func(s string) string { return p + s }
	other, wb := "s8o_"+r, "s8w_"+r
	sam := func(args ...string) { run(t, "sacctmgr", append([]string{"-i"}, args...)...) }
	t.Cleanup(func() {
		for _, args := range [][]string{
			{"-i", "delete", "cluster", other}, {"-i", "delete", "cluster", wb},
			{"-i", "delete", "user", strings.Join([]string{n("kept"), n("old"), n("fresh"), n("svc")}, ",")},
			{"-i", "delete", "account", strings.Join([]string{n("desc"), n("gone"), n("team"), n("live")}, ",")},
		} {
			if out, err := exec.Command("sacctmgr", args...).CombinedOutput(); err != nil {
				t.Logf("cleanup: sacctmgr %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		for _, c := range []string{other, wb} {
			db.Exec("DROP TABLE IF EXISTS `" + c + "_job_env_table`, `" + c + "_job_script_table`")
		}
	})
	sam("add", "cluster", other)
	sam("add", "account", n("desc"), "cluster="+other, "description=keep this | \"text\"", "organization=uni desc")
	sam("add", "account", n("gone"), "cluster="+other, "description=deleted account")
	sam("add", "account", n("live"), "cluster="+other)
	sam("add", "user", n("kept"), "account="+n("desc")+","+n("gone"), "cluster="+other)
	sam("add", "user", n("old"), "account="+n("desc"), "cluster="+other)
	sam("add", "user", n("kept"), "account="+n("live"), "cluster="+other)
	// slurmdbd hard-deletes records younger than a day that never had
	// jobs: backdate them so that the deletes leave deleted=1 rows, as on
	// a long-lived cluster (see the lab's setup.sh).
	old := time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC).Unix()
	for _, q := range []string{
		"UPDATE acct_table SET creation_time = ?, mod_time = ? WHERE name = '" + n("gone") + "'",
		"UPDATE user_table SET creation_time = ?, mod_time = ? WHERE name IN ('" + n("old") + "', '" + n("kept") + "')",
		"UPDATE `" + other + "_assoc_table` SET creation_time = ?, mod_time = ? WHERE acct IN ('" + n("gone") + "', '" + n("desc") + "')",
	} {
		if _, err := db.Exec(q, old, old); err != nil {
			t.Fatal(err)
		}
	}
	sam("delete", "user", "name="+n("old"))
	sam("delete", "user", "name="+n("kept"), "account="+n("gone"), "cluster="+other)
	sam("delete", "account", n("gone"))

	like := strings.ReplaceAll(p, "_", `\_`) + "%"
	accts := func() []string {
		return dumpRows(t, db, "SELECT * FROM acct_table WHERE name LIKE ? ORDER BY name", like)
	}
	users := func() []string {
		return dumpRows(t, db, "SELECT * FROM user_table WHERE name LIKE ? ORDER BY name", like)
	}
	acctsBefore, usersBefore, otherBefore := accts(), users(), clusterTables(t, db, other)
	if !slices.ContainsFunc(acctsBefore, func(s string) bool { return strings.Contains(s, "name="+n("gone")) && strings.Contains(s, "deleted=1") }) {
		t.Fatalf("setup: %s is not deleted: %v", n("gone"), acctsBefore)
	}

	// llmflow has not synced since: it still has gone and old.
	tree := llmflow.Accounts{
		{Name: n("desc"), Kind: llmflow.KindOrg, Shares: 3, Members: []string{n("kept"), n("old")}, Source: "slurm"},
		{Name: n("team"), Kind: llmflow.KindTeam, Parent: n("desc"), Shares: 1, Members: []string{n("fresh")}, Source: "slurm"},
		{Name: n("gone"), Kind: llmflow.KindOrg, Shares: 1, Members: []string{n("kept")}, Source: "slurm"},
		{Name: n("live"), Kind: llmflow.KindOrg, Shares: 1, Members: []string{n("kept")}, Source: "slurm"},
	}
	hour := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	roll := func(org, team, owner string, g float64) llmflow.Rollup {
		return llmflow.Rollup{Hour: hour, Org: org, Team: team, Owner: owner, KeyID: "k", Model: "m", Pool: "p", Requests: 1, GPUHours: g}
	}
	rollups := []llmflow.Rollup{
		roll(n("desc"), n("desc"), n("kept"), 1),  // live account, live user: written
		roll(n("desc"), n("desc"), n("old"), 2),   // deleted user: not written
		roll(n("gone"), n("gone"), n("kept"), 3),  // deleted account: not written
		roll(n("desc"), n("team"), n("fresh"), 4), // an account and a user Slurm does not have: not written
		roll(n("live"), n("live"), n("kept"), 5),  // live: written
		roll(n("live"), n("live"), n("fresh"), 6), // a key owner who is no Slurm user: not written
		roll(n("live"), n("live"), "", 7),         // the service user: created, written
	}
	w, err := writeback.New(db, writeback.Config{Cluster: wb, ServiceUser: n("svc"), GPUs: 8, Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(context.Background(), hour, hour.Add(time.Hour), tree, rollups, false)
	if err != nil {
		t.Fatalf("write-back: %v", err)
	}
	for _, c := range res.Tree {
		t.Logf("%s", c)
		if strings.Contains(c.String(), n("gone")) || strings.Contains(c.String(), n("old")) {
			t.Errorf("ran %s: revives a deleted account or user", c)
		}
	}
	if got := res.GPUSeconds; got != (1+5+7)*3600 {
		t.Errorf("wrote %d GPU-seconds, want %d", got, (1+5+7)*3600)
	}
	var nw []string
	for _, x := range res.NotWritten {
		nw = append(nw, x.Account+"/"+x.User)
	}
	if want := []string{n("desc") + "/" + n("old"), n("gone") + "/" + n("kept"), n("live") + "/" + n("fresh"), n("team") + "/" + n("fresh")}; !slices.Equal(nw, want) {
		t.Errorf("not written %v, want %v (%+v)", nw, want, res.NotWritten)
	}

	// Rows of accounts and users: unchanged, none added but the service
	// user's.
	if after := accts(); !slices.Equal(after, acctsBefore) {
		t.Errorf("acct_table changed:\nbefore: %v\n after: %v", acctsBefore, after)
	}
	var added []string
	for _, row := range users() {
		if !slices.Contains(usersBefore, row) {
			added = append(added, row)
		}
	}
	for _, row := range usersBefore {
		if !slices.Contains(users(), row) {
			t.Errorf("user row changed or removed: %s", row)
		}
	}
	if len(added) != 1 || !strings.Contains(added[0], "name="+n("svc")+"|") {
		t.Errorf("user rows added: %v, want the service user's only", added)
	}
	otherAfter := clusterTables(t, db, other)
	if len(otherAfter) == 0 || len(otherAfter) != len(otherBefore) {
		t.Errorf("cluster %s: %d tables before, %d after", other, len(otherBefore), len(otherAfter))
	}
	for tbl, rows := range otherBefore {
		if !slices.Equal(rows, otherAfter[tbl]) {
			t.Errorf("cluster %s table %s changed:\nbefore: %v\n after: %v", other, tbl, rows, otherAfter[tbl])
		}
	}
	if out := run(t, "sacctmgr", "-nP", "show", "account", n("desc"), "format=Descr"); strings.TrimSpace(out) != "keep this | `text`" { // slurmdbd stores '"' as '`'
		t.Errorf("description of %s is now %q", n("desc"), out)
	}
	if out := run(t, "sacctmgr", "-nP", "show", "account", n("gone"), "format=Account"); strings.TrimSpace(out) != "" {
		t.Errorf("%s is live again: %q", n("gone"), out)
	}
}
