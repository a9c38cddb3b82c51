package writeback

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-llmflow/llmflow"
)

// The association tree of the write-back cluster is built with sacctmgr,
// never by inserting into <cluster>_assoc_table: that table is a nested set
// (lft/rgt, renumbered on every insert, with new children placed at the
// left of their parent), each change is also recorded in txn_table, and
// slurmdbd keeps the associations in memory (assoc_mgr) and pushes changes
// to its clients. sacctmgr goes through slurmdbd, which does all of that in
// one transaction. The usage rows, which slurmdbd only ever reads back or
// re-sums, are written with SQL.

// nameRE is what the write-back accepts as a Slurm account or user name:
// lower case (slurmdbd lower-cases names), no separators sacctmgr would
// split on (',', '=', space, quotes, '|').
var nameRE = regexp.MustCompile(`^[a-z0-9_][a-z0-9_.@+-]{0,127}$`)

// ValidName reports whether name can be written as a Slurm account or user.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// wantAccount is an account the write-back cluster must have.
type wantAccount struct {
	name, parent string // parent "root" for an organisation
	fairshare    string // sacctmgr value: an integer or "parent"
	depth        int
}

// haveAssoc is a live association row of <cluster>_assoc_table.
type haveAssoc struct {
	acct, user, parent string
	shares             int64
}

// TreeChange is one sacctmgr command the write-back ran (or, in a dry run,
// would run).
type TreeChange struct {
	Args []string // sacctmgr arguments after -i
}

func (c TreeChange) String() string { return "sacctmgr -i " + strings.Join(c.Args, " ") }

// desiredTree computes the accounts and user associations the write-back
// cluster must have: every enabled account of llmflow's tree (parents
// first, fairshare from its shares), every account on the path of a used
// association (disabled or not, so its usage has a home; missing from the
// tree: fairshare 1), every member's association, and every association
// the usage is written to.
func desiredTree(tree llmflow.Accounts, chains [][]string, used [][2]string) (map[string]*wantAccount, map[[2]string]bool, error) {
	tree = accountsOnly(tree)
	byName := map[string]llmflow.Account{}
	for _, a := range tree {
		a.Name = strings.ToLower(a.Name)
		a.Parent = strings.ToLower(a.Parent)
		byName[a.Name] = a
	}
	shares := fairshares(tree)
	accts := map[string]*wantAccount{}
	var add func(name string, seen int) error
	add = func(name string, seen int) error {
		if _, ok := accts[name]; ok {
			return nil
		}
		if seen > 64 {
			return fmt.Errorf("account %q: parent cycle", name)
		}
		a, ok := byName[name]
		if !ok {
			return fmt.Errorf("account %q is not in the tree", name)
		}
		w := &wantAccount{name: name, parent: "root", fairshare: shares[name], depth: 1}
		if a.Parent != "" {
			if err := add(a.Parent, seen+1); err != nil {
				return err
			}
			w.parent = a.Parent
			w.depth = accts[a.Parent].depth + 1
		}
		accts[name] = w
		return nil
	}
	// Accounts only known from the rollups (org → team → project chains).
	for _, ch := range chains {
		parent := ""
		for _, n := range ch {
			if _, ok := byName[n]; !ok {
				byName[n] = llmflow.Account{Name: n, Parent: parent, Shares: 1}
				shares[n] = "1"
			}
			parent = n
		}
	}
	for _, a := range tree {
		if !a.Disabled {
			if err := add(strings.ToLower(a.Name), 0); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, ch := range chains {
		if len(ch) > 0 {
			if err := add(ch[len(ch)-1], 0); err != nil {
				return nil, nil, err
			}
		}
	}
	users := map[[2]string]bool{}
	for _, a := range tree {
		if a.Disabled {
			continue
		}
		for _, m := range a.Members {
			users[[2]string{strings.ToLower(a.Name), strings.ToLower(m)}] = true
		}
	}
	for _, u := range used {
		if _, ok := accts[u[0]]; !ok {
			if err := add(u[0], 0); err != nil {
				return nil, nil, err
			}
		}
		users[u] = true
	}
	var bad []string
	for n := range accts {
		if !ValidName(n) {
			bad = append(bad, "account "+strconv.Quote(n))
		}
	}
	for u := range users {
		if !ValidName(u[1]) {
			bad = append(bad, "user "+strconv.Quote(u[1]))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, nil, fmt.Errorf("names Slurm cannot take (want %s): %s", nameRE, strings.Join(bad, ", "))
	}
	return accts, users, nil
}

// accountsOnly is tree without Slurm's root itself (KindRoot, present to
// carry root's own user shares): the cluster's root exists already.
func accountsOnly(tree llmflow.Accounts) llmflow.Accounts {
	out := make(llmflow.Accounts, 0, len(tree))
	for _, a := range tree {
		if a.Kind != llmflow.KindRoot {
			out = append(out, a)
		}
	}
	return out
}

// fairshares turns llmflow's shares into sacctmgr Fairshare values per
// account: Slurm's integers as they are; a sibling group with fractional
// shares (from the configuration) is scaled by 1000 and rounded, so only
// ratios matter as in llmflow; Fairshare=parent stays "parent".
func fairshares(tree llmflow.Accounts) map[string]string {
	groups := map[string][]llmflow.Account{}
	for _, a := range tree {
		groups[strings.ToLower(a.Parent)] = append(groups[strings.ToLower(a.Parent)], a)
	}
	out := map[string]string{}
	for _, g := range groups {
		scale := 1.0
		for _, a := range g {
			if !a.UseParent && a.Shares != math.Trunc(a.Shares) {
				scale = 1000
			}
		}
		for _, a := range g {
			n := strings.ToLower(a.Name)
			switch {
			case a.UseParent:
				out[n] = "parent"
			case a.Shares <= 0:
				out[n] = "0"
			default:
				out[n] = strconv.FormatInt(max(1, int64(math.Round(a.Shares*scale))), 10)
			}
		}
	}
	return out
}

// planTree returns the sacctmgr commands that bring the cluster's live
// associations (have) in line with the desired tree: accounts added parents
// first (one command per parent and fairshare), re-parented and re-shared
// accounts, user associations added (one command per account). Nothing is
// ever removed: the write-back cluster keeps the history.
func planTree(cluster string, want map[string]*wantAccount, wantUsers map[[2]string]bool, have []haveAssoc) []TreeChange {
	haveAcct := map[string]haveAssoc{}
	haveUser := map[[2]string]bool{}
	for _, h := range have {
		if h.user == "" {
			haveAcct[h.acct] = h
		} else {
			haveUser[[2]string{h.acct, h.user}] = true
		}
	}
	var accts []*wantAccount
	for _, w := range want {
		accts = append(accts, w)
	}
	slices.SortFunc(accts, func(a, b *wantAccount) int {
		return cmp.Or(cmp.Compare(a.depth, b.depth), cmp.Compare(a.parent, b.parent),
			cmp.Compare(a.fairshare, b.fairshare), cmp.Compare(a.name, b.name))
	})
	var out []TreeChange
	cl := "cluster=" + cluster
	// Adds, grouped by (depth, parent, fairshare) in chunks.
	for i := 0; i < len(accts); {
		j := i
		var names []string
		for ; j < len(accts) && accts[j].depth == accts[i].depth && accts[j].parent == accts[i].parent &&
			accts[j].fairshare == accts[i].fairshare; j++ {
			if _, ok := haveAcct[accts[j].name]; !ok {
				names = append(names, accts[j].name)
			}
		}
		for _, ch := range chunks(names, 100) {
			out = append(out, TreeChange{[]string{"add", "account", strings.Join(ch, ","), cl,
				"parent=" + accts[i].parent, "fairshare=" + accts[i].fairshare}})
		}
		i = j
	}
	for _, w := range accts {
		h, ok := haveAcct[w.name]
		if !ok {
			continue
		}
		if h.parent != w.parent {
			out = append(out, TreeChange{[]string{"modify", "account", "where", "name=" + w.name, cl, "set", "parent=" + w.parent}})
		}
		if fs := sharesString(h.shares); fs != w.fairshare {
			out = append(out, TreeChange{[]string{"modify", "account", "where", "name=" + w.name, cl, "set", "fairshare=" + w.fairshare}})
		}
	}
	// User associations: accounts that miss the same users share one
	// command (sacctmgr adds the cross product of users and accounts).
	byAcct := map[string][]string{}
	for u := range wantUsers {
		if !haveUser[u] {
			byAcct[u[0]] = append(byAcct[u[0]], u[1])
		}
	}
	byUsers := map[string][]string{}
	for _, a := range slices.Sorted(maps.Keys(byAcct)) {
		us := byAcct[a]
		slices.Sort(us)
		k := strings.Join(us, ",")
		byUsers[k] = append(byUsers[k], a)
	}
	groups := slices.Collect(maps.Keys(byUsers))
	slices.SortFunc(groups, func(a, b string) int { return cmp.Compare(byUsers[a][0], byUsers[b][0]) })
	for _, k := range groups {
		for _, us := range chunks(strings.Split(k, ","), 100) {
			for _, as := range chunks(byUsers[k], 100) {
				out = append(out, TreeChange{[]string{"add", "user", strings.Join(us, ","), "account=" + strings.Join(as, ","), cl}})
			}
		}
	}
	return out
}

func sharesString(s int64) string {
	if s == 2147483647 { // SLURMDB_FS_USE_PARENT
		return "parent"
	}
	return strconv.FormatInt(s, 10)
}

func chunks(s []string, n int) [][]string {
	var out [][]string
	for len(s) > 0 {
		k := min(n, len(s))
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// deletedSet holds what slurmdbd has of accounts and users (acct_table,
// user_table): the deleted names, and the live ones. The write-back never
// creates an account or a user (sacctmgr add would revive a deleted one on
// every cluster, and a name Slurm does not have would become a new Slurm
// account or user), with one exception: the configured service user.
type deletedSet struct {
	accts, users         map[string]bool // deleted = 1
	liveAccts, liveUsers map[string]bool // deleted = 0
	service              string          // the service user, created if missing
}

// missingAcct reports whether name is no live account of slurmdbd.
func (d deletedSet) missingAcct(name string) bool { return !d.liveAccts[name] }

// missingUser reports whether name is no live user of slurmdbd (the
// service user excepted).
func (d deletedSet) missingUser(name string) bool { return !d.liveUsers[name] && name != d.service }

// prune removes from the desired tree every account that slurmdbd does
// not have live (deleted, or never created) or that lies under one, and
// every user association of a user slurmdbd does not have live or of a
// removed account. It returns what it removed, sorted.
func (d deletedSet) prune(accts map[string]*wantAccount, users map[[2]string]bool) []string {
	gone := map[string]bool{}
	var under func(name string, depth int) bool
	under = func(name string, depth int) bool {
		if d.missingAcct(name) {
			return true
		}
		w := accts[name]
		if w == nil || w.parent == "root" || depth > 64 {
			return false
		}
		return under(w.parent, depth+1)
	}
	var out []string
	for n := range accts {
		if under(n, 0) {
			gone[n] = true
			out = append(out, "account "+n)
		}
	}
	for n := range gone {
		delete(accts, n)
	}
	for u := range users {
		if gone[u[0]] || d.users[u[1]] || d.missingUser(u[1]) {
			delete(users, u)
			out = append(out, "user "+u[1]+" in account "+u[0])
		}
	}
	slices.Sort(out)
	return out
}

// unwritable splits usage into what can be written (its association is
// in the desired tree, or the cluster has it, deleted or not) and what
// cannot: an association whose account or user slurmdbd does not have
// live (deleted, or never a Slurm name) and that the cluster never had.
func (d deletedSet) unwritable(usage []llmflow.AssocHour, users map[[2]string]bool, existing []haveAssoc) ([]llmflow.AssocHour, []NotWritten, []llmflow.Unwritten) {
	had := map[[2]string]bool{}
	for _, h := range existing {
		had[[2]string{h.acct, h.user}] = true
	}
	var keep, lostRows []llmflow.AssocHour
	lost := map[[2]string]int64{}
	for _, u := range usage {
		k := [2]string{u.Account, u.User}
		if users[k] || had[k] {
			keep = append(keep, u)
			continue
		}
		lost[k] += u.AllocSecs
		lostRows = append(lostRows, u)
	}
	reasons := map[[2]string]string{}
	var out []NotWritten
	for _, k := range slices.SortedFunc(maps.Keys(lost), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	}) {
		var reason string
		switch a, u := k[0], k[1]; {
		case d.accts[a]:
			reason = "account " + a + " is deleted in slurmdbd"
		case d.missingAcct(a):
			reason = "account " + a + " is not a Slurm account (the write-back creates none)"
		case d.users[u]:
			reason = "user " + u + " is deleted in slurmdbd"
		case d.missingUser(u):
			reason = "user " + u + " is not a Slurm user (the write-back creates none)"
		default:
			reason = "account " + a + " lies under an account deleted in, or missing from, slurmdbd"
		}
		reasons[k] = reason + ", and cluster never had the association"
		out = append(out, NotWritten{Account: k[0], User: k[1], GPUSeconds: lost[k], Reason: reasons[k]})
	}
	rows := make([]llmflow.Unwritten, 0, len(lostRows))
	for _, u := range lostRows {
		rows = append(rows, llmflow.Unwritten{AssocHour: u, Reason: reasons[[2]string{u.Account, u.User}]})
	}
	return keep, out, rows
}
