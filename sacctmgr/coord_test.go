package sacctmgr_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/google/go-cmp/cmp"
)

// The four real listings of one state (testdata/coord/README.md) give the
// same pairs: every account each user coordinates, sub-accounts included.
func TestParseCoordinatorsCaptures(t *testing.T) {
	want := []sacctmgr.Coord{{User: "c11v", Account: "c11org"}, {User: "c11v", Account: "c11proj"}, {User: "c11v", Account: "c11team"}}
	files, _ := filepath.Glob("testdata/coord/*.psv")
	if len(files) != 4 {
		t.Fatalf("captures: %v", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sacctmgr.ParseCoordinators(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", f, d)
		}
	}
}

func TestParseCoordinators(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []sacctmgr.Coord
		err      string
	}{
		{name: "pipe in description", in: "Account|Descr|Org|Coord Accounts\nlab|a | b|org|Alice,bob\n",
			want: []sacctmgr.Coord{{User: "alice", Account: "lab"}, {User: "bob", Account: "lab"}}},
		{name: "crlf and blank lines", in: "User|Coord Accounts\r\n\r\nalice|x\r\n",
			want: []sacctmgr.Coord{{User: "alice", Account: "x"}}},
		{name: "no coordinators", in: "User|Coord Accounts\nalice|\n"},
		{name: "noheader", in: "alice|x\n", err: "line 1: want the header line"},
		{name: "empty", in: "", err: "empty coordinator listing"},
		{name: "assoc listing", in: "Cluster|Account|User|Share\nc|a|u|1\n", err: "want the header line"},
		{name: "coord first", in: "Coord Accounts|User\nx|alice\n", err: "comes before the User column"},
		{name: "short line", in: "User|Def Acct|Coord Accounts\nalice\n", err: "line 2: 1 fields"},
		{name: "space in name", in: "User|Coord Accounts\nalice|a b\n", err: `line 2: invalid name "a b"`},
		{name: "empty user", in: "User|Coord Accounts\n|a\n", err: `line 2: invalid name ""`},
		{name: "empty item", in: "User|Coord Accounts\nalice|a,,b\n", err: `invalid name "" in Coord Accounts`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sacctmgr.ParseCoordinators(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if _, ok := err.(*sacctmgr.ParseError); !ok {
					t.Errorf("error %T, want *ParseError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// FuzzParseCoordinators: no panic; what is returned is sorted, without
// duplicates, and made of names without separators or spaces.
func FuzzParseCoordinators(f *testing.F) {
	files, _ := filepath.Glob("testdata/coord/*.psv")
	for _, name := range files {
		b, _ := os.ReadFile(name)
		f.Add(b)
	}
	f.Add([]byte("Account|Descr|Org|Coord Accounts\nlab|a | b|org|alice,bob\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cs, err := sacctmgr.ParseCoordinators(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		for i, c := range cs {
			for _, n := range []string{c.User, c.Account} {
				if n == "" || strings.ContainsAny(n, " \t|,=\r\n") || n != strings.ToLower(n) {
					t.Fatalf("name %q", n)
				}
			}
			if i > 0 && !(cs[i-1].User < c.User || cs[i-1].User == c.User && cs[i-1].Account < c.Account) {
				t.Fatalf("not sorted or duplicate: %v", cs)
			}
		}
	})
}
