package sacctmgr_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// project keeps the named columns of a -P listing with a header (no '|'
// inside fields), in the given order: the same capture seen through a
// narrower format=.
func project(tb testing.TB, data []byte, keep ...string) []byte {
	tb.Helper()
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	head := strings.Split(lines[0], "|")
	var idx []int
	for _, k := range keep {
		found := false
		for i, h := range head {
			if h == k {
				idx, found = append(idx, i), true
			}
		}
		if !found {
			tb.Fatalf("no column %q in %q", k, lines[0])
		}
	}
	var b bytes.Buffer
	for _, line := range lines {
		f := strings.Split(line, "|")
		for j, i := range idx {
			if j > 0 {
				b.WriteByte('|')
			}
			b.WriteString(f[i])
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// byName orders a Tree by names only, for comparing forms whose order is
// not the tree order (Partial listings).
func byName(t *sacctmgr.Tree) *sacctmgr.Tree {
	c := t.Clone()
	sort.Slice(c.Accounts, func(i, j int) bool { return c.Accounts[i].Name < c.Accounts[j].Name })
	sort.Slice(c.Users, func(i, j int) bool {
		a, b := c.Users[i], c.Users[j]
		if a.Account != b.Account {
			return a.Account < b.Account
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Partition < b.Partition
	})
	return c
}

// without returns a copy of t with the fields a form lacks cleared.
func without(t *sacctmgr.Tree, parents, text, defaults, partitions bool) *sacctmgr.Tree {
	c := t.Clone()
	for i := range c.Accounts {
		if parents {
			c.Accounts[i].Parent = ""
		}
		if text {
			c.Accounts[i].Description, c.Accounts[i].Organization = "", ""
		}
	}
	var users []sacctmgr.User
	for _, u := range c.Users {
		if defaults {
			u.Default = false
		}
		if partitions && u.Partition != "" {
			continue // collapsed into the partition-less row
		}
		users = append(users, u)
	}
	c.Users = users
	return c
}

// withLimits is a copy of t with the accounts' Limits of from.
func withLimits(t, from *sacctmgr.Tree) *sacctmgr.Tree {
	c := t.Clone()
	limits := map[string]llmflow.GPULimits{}
	for _, a := range from.Accounts {
		limits[a.Name] = a.Limits
	}
	for i := range c.Accounts {
		c.Accounts[i].Limits = limits[c.Accounts[i].Name]
	}
	return c
}

// TestSameState: every form of the same Slurm state gives the same Tree,
// up to the fields the form lacks.
func TestSameState(t *testing.T) {
	ref := mustParse(t, "assoc.format.psv", sacctmgr.Options{})
	accts, err := sacctmgr.ParseAccounts(bytes.NewReader(mustRead(t, "account.psv")), sacctmgr.Options{PipeColumn: "Descr"})
	if err != nil {
		t.Fatal(err)
	}
	users := mustParse(t, "user.withassoc.psv", sacctmgr.Options{Partial: true})
	full := ref.Clone()
	full.Annotate(accts, users.Users)

	parse := func(data []byte, opts sacctmgr.Options) *sacctmgr.Tree {
		t.Helper()
		tr, err := sacctmgr.ParseAssociations(bytes.NewReader(data), opts)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	dump, err := sacctmgr.ParseDump(mustRead(t, "dump-hgx.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	format := mustRead(t, "assoc.format.psv")
	tree := mustRead(t, "assoc.tree.psv")
	for _, tc := range []struct {
		name string
		got  *sacctmgr.Tree
		want *sacctmgr.Tree // nil: ref
	}{
		// -n with the format columns.
		{"assoc.format.noheader.psv", mustParse(t, "assoc.format.noheader.psv", sacctmgr.Options{Columns: formatColumns}), nil},
		// tree listing: indented Account field, also has ParentName.
		{"assoc.tree.psv", mustParse(t, "assoc.tree.psv", sacctmgr.Options{}), nil},
		{"assoc.cluster-hgx.psv", mustParse(t, "assoc.cluster-hgx.psv", sacctmgr.Options{}), nil},
		// parents from the indentation alone.
		{"assoc.tree.psv indentation", parse(project(t, tree, "Cluster", "Account", "User", "Partition", "Share"), sacctmgr.Options{}), nil},
		// parents from ID/ParentID alone, then from LFT/RGT alone.
		{"assoc.format.psv ID", parse(project(t, format, "Account", "User", "Partition", "Share", "ID", "ParentID", "Cluster"), sacctmgr.Options{}), nil},
		{"assoc.format.psv LFT", parse(project(t, format, "RGT", "LFT", "Cluster", "User", "Account", "Partition", "Share"), sacctmgr.Options{}), nil},
		// the default columns lack parents: Partial.
		{"assoc.psv", byName(mustParse(t, "assoc.psv", sacctmgr.Options{Partial: true})), byName(without(ref, true, false, false, false))},
		{"assoc.parsable1.txt", byName(mustParse(t, "assoc.parsable1.txt", sacctmgr.Options{Partial: true})), byName(without(ref, true, false, false, false))},
		{"assoc.noheader.psv", byName(mustParse(t, "assoc.noheader.psv", sacctmgr.Options{Columns: defaultColumns, Partial: true})), byName(without(ref, true, false, false, false))},
		// the dump has everything but deleted rows, GPU limits included
		// (the listing's GrpTRES column, read with Options.Limits).
		{"dump-hgx.cfg", dump, withLimits(full, mustParse(t, "assoc.format.psv", sacctmgr.Options{Limits: true}))},
		// show account withassoc lacks partitions and defaults.
		{"account.withassoc.psv", mustParse(t, "account.withassoc.psv", sacctmgr.Options{PipeColumn: "Descr"}), without(full, false, false, true, true)},
		// show user withassoc has users and defaults only.
		{"user.withassoc.psv", byName(users), byName(&sacctmgr.Tree{Cluster: "hgx", Accounts: []sacctmgr.Account{}, Users: full.Users})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want == nil {
				want = ref
			}
			if diff := cmp.Diff(want, tc.got, ignoreUnknownLimits); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// readTSV reads a mysql --batch dump: header line, tab-separated fields.
func readTSV(tb testing.TB, name string) []map[string]string {
	tb.Helper()
	f, err := os.Open(filepath.Join(capture, "db", name))
	if err != nil {
		tb.Fatal(err)
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
		if len(fields) != len(head) {
			tb.Fatalf("%s: %d fields for %d columns", name, len(fields), len(head))
		}
		r := map[string]string{}
		for i, h := range head {
			r[h] = fields[i]
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return rows
}

// treeFromDB builds the expected Tree from the slurmdbd tables: an
// account row's parent is the account row of its parent_acct, a user
// row's the account row of its acct (lft/rgt are not used).
func treeFromDB(tb testing.TB) *sacctmgr.Tree {
	tb.Helper()
	acct := map[string]map[string]string{}
	for _, r := range readTSV(tb, "acct_table.tsv") {
		acct[r["name"]] = r
	}
	t := &sacctmgr.Tree{Cluster: "hgx"}
	for _, r := range readTSV(tb, "hgx_assoc_table.tsv") {
		shares, err := strconv.ParseUint(r["shares"], 10, 32)
		if err != nil {
			tb.Fatal(err)
		}
		useParent := shares == sacctmgr.ParentShares
		if r["user"] == "" {
			t.Accounts = append(t.Accounts, sacctmgr.Account{
				Name: r["acct"], Parent: r["parent_acct"],
				Description:  acct[r["acct"]]["description"],
				Organization: acct[r["acct"]]["organization"],
				Shares:       uint32(shares), UseParent: useParent,
				Deleted: r["deleted"] == "1",
			})
			continue
		}
		t.Users = append(t.Users, sacctmgr.User{
			Name: r["user"], Account: r["acct"], Partition: r["partition"],
			Shares: uint32(shares), UseParent: useParent,
			Default: r["is_def"] == "1", Deleted: r["deleted"] == "1",
		})
	}
	if err := t.Validate(); err != nil {
		tb.Fatal(err)
	}
	t.Sort()
	return t
}

// TestDatabase: the withdeleted listing merged with the plain one, with
// descriptions (show account withdeleted) and defaults (show user
// withassoc), is the Tree slurmdbd's tables hold; the dump is that Tree
// without its deleted rows.
func TestDatabase(t *testing.T) {
	want := treeFromDB(t)

	plain := mustParse(t, "assoc.format.psv", sacctmgr.Options{})
	wd := mustParse(t, "assoc.format.withdeleted.psv", sacctmgr.Options{})
	accts, err := sacctmgr.ParseAccounts(bytes.NewReader(mustRead(t, "account.withdeleted.psv")), sacctmgr.Options{PipeColumn: "Descr"})
	if err != nil {
		t.Fatal(err)
	}
	users := mustParse(t, "user.withassoc.psv", sacctmgr.Options{Partial: true})
	got := sacctmgr.MergeDeleted(plain, wd)
	got.Annotate(accts, users.Users)
	if diff := cmp.Diff(want, got, ignoreUnknownLimits); diff != "" {
		t.Errorf("listings vs database (-want +got):\n%s", diff)
	}

	live := want.Clone()
	live.Accounts, live.Users = nil, nil
	for _, a := range want.Accounts {
		if !a.Deleted {
			live.Accounts = append(live.Accounts, a)
		}
	}
	for _, u := range want.Users {
		if !u.Deleted {
			live.Users = append(live.Users, u)
		}
	}
	// treeFromDB reads no limits: the dump's GrpTRES are the listing's
	live = withLimits(live, mustParse(t, "assoc.format.psv", sacctmgr.Options{Limits: true}))
	dump, err := sacctmgr.ParseDump(mustRead(t, "dump-hgx.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(live, dump); diff != "" {
		t.Errorf("dump vs database (-want +got):\n%s", diff)
	}
}

// ignoreUnknownLimits: the same state listed with and without the limit
// columns differs only in what the source says it knows.
var ignoreUnknownLimits = cmpopts.IgnoreFields(sacctmgr.Tree{}, "MinutesUnknown", "GPUsUnknown")
