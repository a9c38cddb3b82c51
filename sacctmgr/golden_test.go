package sacctmgr_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// capture is the directory of the real Slurm 22.05.8 captures (copied from
// shared/testdata/slurm/sacctmgr; README.md there lists every command).
const capture = "testdata/slurm/"

// Column lists of the -n captures, as given to sacctmgr format=.
var (
	defaultColumns = strings.Split("Cluster,Account,User,Partition,Share,Priority,GrpJobs,GrpTRES,GrpSubmit,GrpWall,GrpTRESMins,MaxJobs,MaxTRES,MaxTRESPerNode,MaxSubmit,MaxWall,MaxTRESMins,QOS,Def QOS,GrpTRESRunMins", ",")
	formatColumns  = strings.Split("Cluster,Account,User,Partition,Share,ParentName,ParentID,ID,LFT,RGT,QOS,DefaultQOS,GrpTRES,MaxTRES,GrpTRESMins,MaxTRESMins,GrpJobs,MaxJobs,MaxSubmitJobs,MaxWall,Priority", ",")
)

func mustRead(tb testing.TB, name string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(capture, name))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func mustParse(tb testing.TB, name string, opts sacctmgr.Options) *sacctmgr.Tree {
	tb.Helper()
	t, err := sacctmgr.ParseAssociations(bytes.NewReader(mustRead(tb, name)), opts)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return t
}

// goldenCases covers every association, account and dump capture.
var goldenCases = []struct {
	name string // golden file name
	file string
	kind string // "assoc" (default), "accounts", "dump"
	opts sacctmgr.Options
}{
	{name: "assoc.psv.partial", file: "assoc.psv", opts: sacctmgr.Options{Partial: true}},
	{name: "assoc.psv", file: "assoc.psv"},
	{name: "assoc.noheader.psv.partial", file: "assoc.noheader.psv", opts: sacctmgr.Options{Columns: defaultColumns, Partial: true}},
	{name: "assoc.parsable1.txt.partial", file: "assoc.parsable1.txt", opts: sacctmgr.Options{Partial: true}},
	{name: "assoc.withdeleted.psv.partial", file: "assoc.withdeleted.psv", opts: sacctmgr.Options{Partial: true}},
	{name: "assoc.table.txt", file: "assoc.table.txt"},
	{name: "assoc.tree.table.txt", file: "assoc.tree.table.txt"},
	{name: "assoc.format.psv", file: "assoc.format.psv"},
	{name: "assoc.format.noheader.psv", file: "assoc.format.noheader.psv", opts: sacctmgr.Options{Columns: formatColumns}},
	{name: "assoc.format.withdeleted.psv", file: "assoc.format.withdeleted.psv"},
	{name: "assoc.tree.psv", file: "assoc.tree.psv"},
	{name: "assoc.cluster-hgx.psv", file: "assoc.cluster-hgx.psv", opts: sacctmgr.Options{Cluster: "hgx"}},
	{name: "assoc.onlydefaults.psv", file: "assoc.onlydefaults.psv", opts: sacctmgr.Options{Partial: true, OnlyDefaults: true}},
	{name: "assoc.bad-column.psv", file: "assoc.bad-column.psv"},
	{name: "assoc.bad-column.psv.partial", file: "assoc.bad-column.psv", opts: sacctmgr.Options{Partial: true}},
	{name: "assoc.fairshare-alias.psv.partial", file: "assoc.fairshare-alias.psv", opts: sacctmgr.Options{Partial: true}},
	{name: "assoc.unknown-column.psv", file: "assoc.unknown-column.psv"},
	{name: "account.withassoc.psv", file: "account.withassoc.psv", opts: sacctmgr.Options{PipeColumn: "Descr"}},
	{name: "account.withassoc.psv.nopipecolumn", file: "account.withassoc.psv"},
	{name: "account.withassoc.withdeleted.psv", file: "account.withassoc.withdeleted.psv", opts: sacctmgr.Options{PipeColumn: "Descr"}},
	{name: "account.psv", file: "account.psv", kind: "accounts", opts: sacctmgr.Options{PipeColumn: "Descr"}},
	{name: "account.psv.nopipecolumn", file: "account.psv", kind: "accounts"},
	{name: "account.withdeleted.psv", file: "account.withdeleted.psv", kind: "accounts", opts: sacctmgr.Options{PipeColumn: "Descr"}},
	{name: "user.withassoc.psv.partial", file: "user.withassoc.psv", opts: sacctmgr.Options{Partial: true}},
	{name: "user.withassoc.psv", file: "user.withassoc.psv"},
	{name: "user.psv", file: "user.psv"},
	{name: "dump-hgx.cfg", file: "dump-hgx.cfg", kind: "dump"},
}

// render is the golden form: the outline (Tree.String) for reading, then
// the exact JSON; or the error.
func render(v any, err error) []byte {
	if err != nil {
		return []byte("error: " + err.Error() + "\n")
	}
	var b bytes.Buffer
	if t, ok := v.(*sacctmgr.Tree); ok {
		b.WriteString(t.String())
		b.WriteString("\n")
	}
	j, jerr := json.MarshalIndent(v, "", "  ")
	if jerr != nil {
		panic(jerr)
	}
	b.Write(j)
	b.WriteString("\n")
	return b.Bytes()
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs from the golden file (-want +got):\n%s", name, diff)
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			data := mustRead(t, tc.file)
			var got []byte
			switch tc.kind {
			case "dump":
				tr, err := sacctmgr.ParseDump(data)
				got = render(tr, err)
			case "accounts":
				a, err := sacctmgr.ParseAccounts(bytes.NewReader(data), tc.opts)
				got = render(a, err)
			default:
				tr, err := sacctmgr.ParseAssociations(bytes.NewReader(data), tc.opts)
				if err == nil && !tc.opts.Partial {
					if verr := tr.Validate(); verr != nil {
						t.Errorf("Validate: %v", verr)
					}
				}
				got = render(tr, err)
			}
			checkGolden(t, tc.name, got)
		})
	}
}

// TestGolden_MergeDeleted: the plain and withdeleted listings together
// flag lab-old and erin as deleted.
func TestGolden_MergeDeleted(t *testing.T) {
	plain := mustParse(t, "assoc.format.psv", sacctmgr.Options{})
	wd := mustParse(t, "assoc.format.withdeleted.psv", sacctmgr.Options{})
	m := sacctmgr.MergeDeleted(plain, wd)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "merge-deleted", render(m, nil))

	var deleted []string
	for _, a := range m.Accounts {
		if a.Deleted {
			deleted = append(deleted, a.Name)
		}
	}
	for _, u := range m.Users {
		if u.Deleted {
			deleted = append(deleted, u.Name+"@"+u.Account)
		}
	}
	if diff := cmp.Diff([]string{"lab-old", "erin@lab-old"}, deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
}
