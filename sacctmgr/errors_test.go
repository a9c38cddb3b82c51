package sacctmgr_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

const fmtHead = "Cluster|Account|User|Partition|Share|ParentName\n"

func TestParseAssociations_Errors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		opts  sacctmgr.Options
		line  int    // ParseError.Line
		want  string // in the message
	}{
		{"Empty", "", sacctmgr.Options{}, 0, "empty input"},
		{"Blank", "\n  \n", sacctmgr.Options{}, 0, "empty input"},
		{"UnknownColumnStdout", string(mustRead(t, "assoc.unknown-column.psv")), sacctmgr.Options{}, 0, "empty input"},
		{"UnknownColumnStderrAsInput", string(mustRead(t, "assoc.unknown-column.psv.stderr")), sacctmgr.Options{}, 1, "no Account column"},
		{"HeaderOnly", fmtHead, sacctmgr.Options{}, 0, "no rows"},
		{"BadColumnCapture", string(mustRead(t, "assoc.bad-column.psv")), sacctmgr.Options{}, 1, "no Share column"},
		{"NoAccount", "Cluster|User|Share\nhgx|bob|1\n", sacctmgr.Options{}, 1, "no Account column"},
		{"NoUser", "Account|Descr|Org\nroot|x|y\n", sacctmgr.Options{}, 1, "no User column"},
		{"NoParentInfo", string(mustRead(t, "assoc.psv")), sacctmgr.Options{}, 4, `cannot place account "etaba"`},
		{"TableOutput", string(mustRead(t, "assoc.table.txt")), sacctmgr.Options{}, 2, "table output"},
		{"PipeInDescrAndOrg", string(mustRead(t, "account.withassoc.psv")), sacctmgr.Options{}, 13, "unescaped '|' in Descr or Org"},
		{"PipeNoFreeText", fmtHead + "hgx|root|||1|\nhgx|a|||1|root|x\n", sacctmgr.Options{}, 3, "7 fields for 6 columns, and no free-text column"},
		{"TruncatedLine", fmtHead + "hgx|root|||1|\nhgx|a|||1\n", sacctmgr.Options{}, 3, "5 fields for 6 columns (truncated line?)"},
		{"TruncatedParsable1", "Account|User|Share|ParentName|\nroot||1||\na||1|ro\n", sacctmgr.Options{}, 3, "no '|' at the end"},
		{"ShareNotNumber", fmtHead + "hgx|root|||1|\nhgx|a|||lots|root\n", sacctmgr.Options{}, 3, `Share "lots" is neither a number nor "parent"`},
		{"ShareTooLarge", fmtHead + "hgx|root|||4294967296|\n", sacctmgr.Options{}, 2, "neither a number"},
		{"EmptyShare", fmtHead + "hgx|root|||1|\nhgx|a||||root\n", sacctmgr.Options{}, 3, `Share ""`},
		{"EmptyAccount", fmtHead + "hgx|root|||1|\nhgx||bob||1|\n", sacctmgr.Options{}, 3, "empty Account"},
		{"UnknownParent", fmtHead + "hgx|root|||1|\nhgx|a|||1|nosuch\n", sacctmgr.Options{}, 3, `parent "nosuch" is not an account of the listing`},
		{"Cycle", fmtHead + "hgx|root|||1|\nhgx|a|||1|b\nhgx|b|||1|a\n", sacctmgr.Options{}, 3, `account "a" is in a parent cycle (a → b → a)`},
		{"SelfParent", fmtHead + "hgx|root|||1|\nhgx|a|||1|a\n", sacctmgr.Options{}, 3, "parent cycle (a → a)"},
		{"TwoRoots", fmtHead + "hgx|root|||1|\nhgx|other|||1|\n", sacctmgr.Options{}, 3, `"root" is already the root`},
		{"NoRoot", fmtHead + "hgx|a|||1|b\nhgx|b|||1|a\n", sacctmgr.Options{}, 2, "parent cycle"},
		{"DuplicateAccount", fmtHead + "hgx|root|||1|\nhgx|a|||1|root\nhgx|a|||2|root\n", sacctmgr.Options{}, 4, `account "a" listed twice (first on line 3)`},
		{"DuplicateUser", fmtHead + "hgx|root|||1|\nhgx|root|bob||1|\nhgx|root|bob||1|\n", sacctmgr.Options{}, 4, "listed twice (first on line 3)"},
		{"DifferentSharesNoPartition", "Account|User|Share|ParentName\nroot||1|\nroot|bob|1|\nroot|bob|2|\n", sacctmgr.Options{}, 4, "no Partition column"},
		{"UserOfUnknownAccount", fmtHead + "hgx|root|||1|\nhgx|nosuch|bob||1|\n", sacctmgr.Options{}, 3, `account "nosuch" is not an account of the listing`},
		{"TwoClusters", fmtHead + "hgx|root|||1|\nother|root|||1|\n", sacctmgr.Options{}, 3, `second cluster "other"`},
		{"ClusterAbsent", fmtHead + "hgx|root|||1|\n", sacctmgr.Options{Cluster: "other"}, 0, `no rows of cluster "other"`},
		{"HeaderWithColumns", string(mustRead(t, "assoc.format.psv")), sacctmgr.Options{Columns: formatColumns}, 1, "looks like a header"},
		{"ColumnsEmpty", "x\n", sacctmgr.Options{Columns: []string{}}, 0, "no columns named"},
		{"DuplicateColumn", "Account|User|Share|Fairshare\n", sacctmgr.Options{}, 1, `column "Fairshare" given twice`},
		{"PipeColumnNotFreeText", fmtHead, sacctmgr.Options{PipeColumn: "User"}, 1, "not a free-text column"},
		{"PipeColumnAbsent", fmtHead, sacctmgr.Options{PipeColumn: "Descr"}, 1, "not a column of the listing"},
		{"IndentSkipsLevel", "Account|User|Share\nroot||1\n  a||1\n", sacctmgr.Options{}, 3, "deeper than its parent"},
		{"IndentUserElsewhere", "Account|User|Share\nroot||1\n a||1\n  root|bob|1\n", sacctmgr.Options{}, 4, "not under that account"},
		{"UnknownParentID", "Account|User|Share|ID|ParentID\nroot||1|1|0\na||1|2|9\n", sacctmgr.Options{}, 3, "ParentID 9"},
		{"BadID", "Account|User|Share|ID|ParentID\nroot||1|x|0\n", sacctmgr.Options{}, 2, `ID "x" is not a number`},
		{"NestedSetOverlap", "Account|User|Share|LFT|RGT\nroot||1|1|10\na||1|2|5\nb||1|4|8\n", sacctmgr.Options{}, 4, "overlap"},
		{"NestedSetInverted", "Account|User|Share|LFT|RGT\nroot||1|10|1\n", sacctmgr.Options{}, 2, "LFT 10 is not below RGT 1"},
		{"UserListing", string(mustRead(t, "user.psv")), sacctmgr.Options{}, 1, "no Account column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := sacctmgr.ParseAssociations(strings.NewReader(tc.input), tc.opts)
			if err == nil {
				t.Fatalf("no error; got\n%v", tr)
			}
			var pe *sacctmgr.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("%T %v, want a *ParseError", err, err)
			}
			if pe.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (line %d), want line %d and %q", err, pe.Line, tc.line, tc.want)
			}
		})
	}
}

func TestParseAssociations_Recover(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		opts        sacctmgr.Options
		descr, org  string
	}{
		{"OnlyFreeTextLast", "Account|User|Share|ParentName|Descr\nroot||1||a | b|c\n", sacctmgr.Options{}, "a | b|c", ""},
		{"OnlyFreeTextMiddle", "Account|Descr|User|Share|ParentName\nroot|a|b||1|\n", sacctmgr.Options{}, "a|b", ""},
		{"PipeColumnDescr", "Account|Descr|Org|User|Share|ParentName\nroot|a|b|o||1|\n", sacctmgr.Options{PipeColumn: "descr"}, "a|b", "o"},
		{"PipeColumnOrg", "Account|Descr|Org|User|Share|ParentName\nroot|d|a|b||1|\n", sacctmgr.Options{PipeColumn: "Organization"}, "d", "a|b"},
		{"Parsable1", "Account|User|Share|ParentName|Descr|\nroot||1||a|b|\n", sacctmgr.Options{}, "a|b", ""},
		{"NoheaderParsable1", "root||1||a|b|\n", sacctmgr.Options{Columns: []string{"Account", "User", "Fairshare", "ParentName", "Description"}, Format: sacctmgr.FormatParsable}, "a|b", ""},
		{"CRLF", "Account|User|Share|ParentName|Descr\r\nroot||1||a|b\r\n", sacctmgr.Options{}, "a|b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := sacctmgr.ParseAssociations(strings.NewReader(tc.input), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if a := tr.Accounts[0]; a.Description != tc.descr || a.Organization != tc.org {
				t.Errorf("Description %q, Organization %q; want %q, %q", a.Description, a.Organization, tc.descr, tc.org)
			}
		})
	}
}

func TestParseDump_Errors(t *testing.T) {
	const cl = "Cluster - 'hgx':Fairshare=1\n"
	for _, tc := range []struct {
		name, input string
		line        int
		want        string
	}{
		{"Empty", "", 0, "no Cluster line"},
		{"CommentsOnly", "# nothing\n", 0, "no Cluster line"},
		{"BeforeCluster", "Parent - 'root'\n", 1, "parent line before the Cluster line"},
		{"SecondCluster", cl + cl, 2, "second Cluster line"},
		{"NotARecord", cl + "Parent root\n", 2, "not a dump record"},
		{"UnknownRecord", cl + "Coordinator - 'x'\n", 2, `unknown record "coordinator"`},
		{"UnknownParent", cl + "Parent - 'nosuch'\n", 2, `Parent "nosuch" is not an account defined above`},
		{"AccountBeforeParent", cl + "Account - 'a'\n", 2, "before any Parent line"},
		{"UserBeforeParent", cl + "User - 'u'\n", 2, "before any Parent line"},
		{"DuplicateAccount", cl + "Parent - 'root'\nAccount - 'a'\nAccount - 'A'\n", 4, `account "a" defined twice`},
		{"DuplicateUser", cl + "Parent - 'root'\nUser - 'u'\nUser - 'u'\n", 4, "listed twice (first on line 3)"},
		{"BadFairshare", cl + "Parent - 'root'\nAccount - 'a':Fairshare=x\n", 3, `Share "x"`},
		{"Unterminated", cl + "Parent - 'root'\nAccount - 'a':Description='oops\n", 3, "unterminated quote"},
		{"QuoteNotClosedBeforeColon", cl + "Parent - 'root'\nAccount - 'a'x\n", 3, "unterminated quote"},
		{"NoEquals", cl + "Parent - 'root'\nAccount - 'a':Fairshare\n", 3, "want Key=Value"},
		{"EmptyName", cl + "Parent - ''\n", 2, "empty name"},
		{"BadGrpTRES", cl + "Parent - 'root'\nAccount - 'a':GrpTRES=gres/gpu=lots\n", 3, `account "a": GrpTRES`},
		{"NegativeGrpTRESMins", cl + "Parent - 'root'\nAccount - 'a':GrpTRESMins=gres/gpu=-5\n", 3, `account "a": GrpTRESMins`},
		{"BadRootGrpTRES", "Cluster - 'hgx':GrpTRES=gres/gpu=\n", 1, `cluster "hgx": GrpTRES`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := sacctmgr.ParseDump([]byte(tc.input))
			if err == nil {
				t.Fatalf("no error; got\n%v", tr)
			}
			var pe *sacctmgr.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("%T %v, want a *ParseError", err, err)
			}
			if pe.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (line %d), want line %d and %q", err, pe.Line, tc.line, tc.want)
			}
		})
	}
}

func TestTree_Validate(t *testing.T) {
	ok := func() *sacctmgr.Tree {
		return &sacctmgr.Tree{Accounts: []sacctmgr.Account{{Name: "root"}, {Name: "a", Parent: "root"}}, Users: []sacctmgr.User{{Name: "u", Account: "a"}}}
	}
	if err := ok().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*sacctmgr.Tree)
		want   string
	}{
		{"NoName", func(t *sacctmgr.Tree) { t.Accounts[1].Name = "" }, "account without a name"},
		{"Duplicate", func(t *sacctmgr.Tree) { t.Accounts = append(t.Accounts, t.Accounts[1]) }, `account "a" listed twice`},
		{"TwoRoots", func(t *sacctmgr.Tree) { t.Accounts[1].Parent = "" }, "already the root"},
		{"UnknownParent", func(t *sacctmgr.Tree) { t.Accounts[1].Parent = "x" }, `parent "x" is not an account`},
		{"Cycle", func(t *sacctmgr.Tree) { t.Accounts[0].Parent = "a" }, "parent cycle"},
		{"UserNoName", func(t *sacctmgr.Tree) { t.Users[0].Name = "" }, "without a user name"},
		{"UserUnknownAccount", func(t *sacctmgr.Tree) { t.Users[0].Account = "x" }, `account "x" is not an account`},
		{"UserDuplicate", func(t *sacctmgr.Tree) { t.Users = append(t.Users, t.Users[0]) }, "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := ok()
			tc.change(tr)
			if err := tr.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestTree_Depths(t *testing.T) {
	tr := mustParse(t, "assoc.format.psv", sacctmgr.Options{})
	d := tr.Depths()
	for name, want := range map[string]int{"root": 0, "etaba": 1, "etabb": 1, "lab-nlp": 2, "nlp-llm": 3, "nlp-asr": 3, "lab-chem": 2} {
		if d[name] != want {
			t.Errorf("depth of %s = %d, want %d", name, d[name], want)
		}
	}
	if a, ok := tr.FindAccount("nlp-asr"); !ok || !a.UseParent || a.Shares != sacctmgr.ParentShares || a.Parent != "lab-nlp" {
		t.Errorf("FindAccount(nlp-asr) = %+v, %v", a, ok)
	}
	if _, ok := tr.FindAccount("nosuch"); ok {
		t.Error("FindAccount(nosuch) found it")
	}
}

func TestParseAssociations_LowerCase(t *testing.T) {
	tr, err := sacctmgr.ParseAssociations(strings.NewReader("Cluster|Account|User|Partition|Share|ParentName|Descr\nHGX|Root|||1||Keep Case\nHGX|EtabA|Bob|GPU|1||\nHGX|EtabA|||1|ROOT|\n"), sacctmgr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Cluster != "hgx" || tr.Accounts[1].Name != "etaba" || tr.Accounts[1].Parent != "root" || tr.Users[0].Name != "bob" || tr.Users[0].Partition != "gpu" || tr.Accounts[0].Description != "Keep Case" {
		t.Errorf("got\n%v", tr)
	}
}
