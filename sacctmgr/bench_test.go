package sacctmgr_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

// genListing writes a -P listing (the slurmsync format) of a tree of
// accounts accounts (root, 100 organisations, teams under them) and users
// user associations spread over the teams.
func genListing(accounts, users int) []byte {
	var b bytes.Buffer
	b.WriteString("Cluster|Account|User|Partition|Share|ParentName\n")
	b.WriteString("big|root|||1|\n")
	const orgs = 100
	for i := 1; i < accounts; i++ {
		name, parent := fmt.Sprintf("acct%05d", i), "root"
		if i > orgs {
			parent = fmt.Sprintf("acct%05d", 1+i%orgs)
		}
		fmt.Fprintf(&b, "big|%s|||%d|%s\n", name, 1+i%97, parent)
	}
	for j := 0; j < users; j++ {
		fmt.Fprintf(&b, "big|acct%05d|user%06d||%d|\n", 1+orgs+j%(accounts-1-orgs), j, 1+j%13)
	}
	return b.Bytes()
}

func BenchmarkParseAssociations(b *testing.B) {
	data := genListing(10_000, 100_000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		t, err := sacctmgr.ParseAssociations(bytes.NewReader(data), sacctmgr.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if len(t.Accounts) != 10_000 || len(t.Users) != 100_000 {
			b.Fatalf("%d accounts, %d users", len(t.Accounts), len(t.Users))
		}
	}
}
