package sacctmgr

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Parsable2Header is the header WriteParsable2 writes: the columns of
//
//	sacctmgr show assoc -P format=Cluster,Account,User,Partition,Share,ParentName,DefaultAccount,Organization,GrpTRESMins,GrpTRES,Description
//
// (sacctmgr itself prints Def Acct, Org and Descr empty in an association
// listing; WriteParsable2 fills them).
const Parsable2Header = "Cluster|Account|User|Partition|Share|ParentName|Def Acct|Org|GrpTRESMins|GrpTRES|Descr"

// WriteParsable2 writes the Tree as a --parsable2 association listing with
// the Parsable2Header columns, in the Tree's order: account rows carry
// Org, Descr and their GPU limits (gres/gpu=N), user rows Def Acct (their
// account when Default). Deleted is not written.
// ParseAssociations(…, Options{PipeColumn: "Descr", Limits: true}) reads
// it back into an equal Tree. Description is the last column, so it may
// hold '|'; a '|' in any other field, or a line break anywhere, cannot be
// written unambiguously and is an error.
func (t *Tree) WriteParsable2(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(Parsable2Header)
	bw.WriteByte('\n')
	bad := func(s string, allowPipe bool) bool {
		return strings.ContainsAny(s, "\n\r") || (!allowPipe && strings.IndexByte(s, '|') >= 0)
	}
	share := func(n uint32, p bool) string {
		if p {
			return "parent"
		}
		return strconv.FormatUint(uint64(n), 10)
	}
	users := make(map[string][]int, len(t.Accounts))
	for i, u := range t.Users {
		users[u.Account] = append(users[u.Account], i)
	}
	writeUser := func(u *User) error {
		if bad(u.Name, false) || bad(u.Account, false) || bad(u.Partition, false) {
			return fmt.Errorf("write listing: user %q in %q: '|' or line break in a name", u.Name, u.Account)
		}
		def := ""
		if u.Default {
			def = u.Account
		}
		for _, s := range [...]string{t.Cluster, "|", u.Account, "|", u.Name, "|", u.Partition, "|", share(u.Shares, u.UseParent), "||", def, "||||\n"} {
			bw.WriteString(s)
		}
		return nil
	}
	if bad(t.Cluster, false) {
		return fmt.Errorf("write listing: cluster %q: '|' or line break", t.Cluster)
	}
	for _, a := range t.Accounts {
		if bad(a.Name, false) || bad(a.Parent, false) || bad(a.Organization, false) || bad(a.Description, true) {
			return fmt.Errorf("write listing: account %q: '|' or line break where it cannot be written unambiguously", a.Name)
		}
		mins, gpus := "", ""
		if a.Limits.HasMinutes {
			mins = GPUTRES + "=" + strconv.FormatInt(a.Limits.Minutes, 10)
		}
		if a.Limits.HasGPUs {
			gpus = GPUTRES + "=" + strconv.FormatInt(a.Limits.GPUs, 10)
		}
		for _, s := range [...]string{t.Cluster, "|", a.Name, "|||", share(a.Shares, a.UseParent), "|", a.Parent, "||", a.Organization, "|", mins, "|", gpus, "|", a.Description, "\n"} {
			bw.WriteString(s)
		}
		for _, i := range users[a.Name] {
			if err := writeUser(&t.Users[i]); err != nil {
				return err
			}
		}
		delete(users, a.Name)
	}
	for i := range t.Users { // users of accounts not in the Tree (Partial)
		if _, left := users[t.Users[i].Account]; left {
			if err := writeUser(&t.Users[i]); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}
