package sacctmgr

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-llmflow/llmflow"
)

// Validate reports the first structural fault of the Tree: an account
// without a name or listed twice, no root or two roots (Parent ""), a
// parent that is not an account of the Tree, a parent cycle, a user
// association without a name, of an unknown account, or listed twice
// (same user, account and partition). It does not check the order; Sort
// establishes it.
func (t *Tree) Validate() error {
	return check(t, nil, nil, false)
}

// check is Validate with the line of each account and user (nil: no lines)
// and the Partial relaxations.
func check(t *Tree, acctLine, userLine []int, partial bool) error {
	at := func(lines []int, i int) int {
		if lines == nil {
			return 0
		}
		return lines[i]
	}
	idx := make(map[string]int, len(t.Accounts))
	root := -1
	for i, a := range t.Accounts {
		if a.Name == "" {
			return errorf(at(acctLine, i), "account without a name")
		}
		if j, dup := idx[a.Name]; dup {
			if acctLine != nil {
				return errorf(at(acctLine, i), "account %q listed twice (first on line %d)", a.Name, acctLine[j])
			}
			return errorf(0, "account %q listed twice", a.Name)
		}
		idx[a.Name] = i
		if a.Parent == "" && !partial {
			if root >= 0 {
				return errorf(at(acctLine, i), "account %q has no parent, and %q is already the root", a.Name, t.Accounts[root].Name)
			}
			root = i
		}
	}
	for i, a := range t.Accounts {
		if a.Parent == "" {
			continue
		}
		if _, ok := idx[a.Parent]; !ok && !partial {
			return errorf(at(acctLine, i), "account %q: parent %q is not an account of the listing", a.Name, a.Parent)
		}
	}
	// Cycles: walk up from every account, colouring the path.
	state := make([]uint8, len(t.Accounts)) // 0 new, 1 on the current path, 2 done
	var path []int
	for i := range t.Accounts {
		path = path[:0]
		j := i
		for j >= 0 && state[j] == 0 {
			state[j] = 1
			path = append(path, j)
			p, ok := idx[t.Accounts[j].Parent]
			if t.Accounts[j].Parent == "" || !ok {
				j = -1
				break
			}
			j = p
		}
		if j >= 0 && state[j] == 1 {
			var names []string
			start := 0
			for k, p := range path {
				if p == j {
					start = k
				}
			}
			for _, p := range path[start:] {
				names = append(names, t.Accounts[p].Name)
			}
			names = append(names, t.Accounts[j].Name)
			return errorf(at(acctLine, j), "account %q is in a parent cycle (%s)", t.Accounts[j].Name, strings.Join(names, " → "))
		}
		for _, p := range path {
			state[p] = 2
		}
	}
	if root < 0 && len(t.Accounts) > 0 && !partial {
		return errorf(0, "no root account (every account has a parent)")
	}
	users := make(map[userKey]int, len(t.Users))
	for i, u := range t.Users {
		if u.Name == "" {
			return errorf(at(userLine, i), "user association without a user name")
		}
		if _, ok := idx[u.Account]; !ok && !partial {
			return errorf(at(userLine, i), "user %q: account %q is not an account of the listing", u.Name, u.Account)
		}
		k := userKey{u.Name, u.Account, u.Partition}
		if j, dup := users[k]; dup {
			if userLine != nil {
				return errorf(at(userLine, i), "association of user %q in account %q partition %q listed twice (first on line %d)", u.Name, u.Account, u.Partition, userLine[j])
			}
			return errorf(0, "association of user %q in account %q partition %q listed twice", u.Name, u.Account, u.Partition)
		}
		users[k] = i
	}
	return nil
}

// Sort puts the Tree in tree order, the order of sacctmgr and sreport:
// depth first from the root, children by name; users in tree order, i.e.
// grouped by account in account order, by user name, then by partition
// name (sacctmgr orders one user's partition associations by lft, which
// not every source has; "" comes first). Accounts that cannot be reached
// from a root (a Partial tree) follow, by name, each with its subtree;
// then users of accounts not in the Tree, by account, user, partition.
// Sort assumes no parent cycle (Validate).
func (t *Tree) Sort() {
	n := len(t.Accounts)
	idx := make(map[string]int, n)
	for i, a := range t.Accounts {
		idx[a.Name] = i
	}
	children := make(map[string][]int, n)
	var tops []int
	for i, a := range t.Accounts {
		if _, ok := idx[a.Parent]; a.Parent == "" || !ok {
			tops = append(tops, i)
			continue
		}
		children[a.Parent] = append(children[a.Parent], i)
	}
	byName := func(s []int) {
		sort.Slice(s, func(x, y int) bool { return t.Accounts[s[x]].Name < t.Accounts[s[y]].Name })
	}
	// Roots (Parent "") before orphans, each group by name.
	sort.SliceStable(tops, func(x, y int) bool {
		ax, ay := t.Accounts[tops[x]], t.Accounts[tops[y]]
		if (ax.Parent == "") != (ay.Parent == "") {
			return ax.Parent == ""
		}
		return ax.Name < ay.Name
	})
	order := make([]int, 0, n)
	stack := make([]int, 0, 64)
	for k := len(tops) - 1; k >= 0; k-- {
		stack = append(stack, tops[k])
	}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		order = append(order, i)
		c := children[t.Accounts[i].Name]
		byName(c)
		for k := len(c) - 1; k >= 0; k-- {
			stack = append(stack, c[k])
		}
	}
	if len(order) != n { // a cycle: keep what is left, by name
		seen := make([]bool, n)
		for _, i := range order {
			seen[i] = true
		}
		var rest []int
		for i := range t.Accounts {
			if !seen[i] {
				rest = append(rest, i)
			}
		}
		byName(rest)
		order = append(order, rest...)
	}
	accts := make([]Account, n)
	rank := make(map[string]int, n)
	for k, i := range order {
		accts[k] = t.Accounts[i]
		rank[accts[k].Name] = k
	}
	t.Accounts = accts

	// Users: by account rank (accounts not in the Tree last, by name),
	// user, partition.
	type key struct {
		rank, i int
		u       *User
	}
	keys := make([]key, len(t.Users))
	for i := range t.Users {
		r, ok := rank[t.Users[i].Account]
		if !ok {
			r = n
		}
		keys[i] = key{r, i, &t.Users[i]}
	}
	// Keys are unique in a valid Tree, so an unstable sort is
	// deterministic; the index breaks ties in an invalid one.
	slices.SortFunc(keys, func(kx, ky key) int {
		ux, uy := kx.u, ky.u
		if c := cmp.Compare(kx.rank, ky.rank); c != 0 {
			return c
		}
		if c := strings.Compare(ux.Account, uy.Account); c != 0 {
			return c
		}
		if c := strings.Compare(ux.Name, uy.Name); c != 0 {
			return c
		}
		if c := strings.Compare(ux.Partition, uy.Partition); c != 0 {
			return c
		}
		return cmp.Compare(kx.i, ky.i)
	})
	users := make([]User, len(t.Users))
	for i, k := range keys {
		users[i] = *k.u
	}
	t.Users = users
}

// FindAccount returns the account named name (lower-case) and whether it
// is in the Tree.
func (t *Tree) FindAccount(name string) (Account, bool) {
	for _, a := range t.Accounts {
		if a.Name == name {
			return a, true
		}
	}
	return Account{}, false
}

// Depths maps every account to its depth: 0 for the root, 1 for its
// children (the organisations of llmflow), and so on. Accounts whose
// ancestry does not reach a root (a Partial tree) are absent.
func (t *Tree) Depths() map[string]int {
	d := make(map[string]int, len(t.Accounts))
	parent := make(map[string]string, len(t.Accounts))
	for _, a := range t.Accounts {
		parent[a.Name] = a.Parent
	}
	var path []string
	for _, a := range t.Accounts {
		path = path[:0]
		name := a.Name
		base := -1
		for {
			if v, ok := d[name]; ok {
				base = v
				break
			}
			p, ok := parent[name]
			if !ok || len(path) > len(t.Accounts) {
				break // unknown account or a cycle
			}
			path = append(path, name)
			if p == "" {
				d[name] = 0
				base = 0
				path = path[:len(path)-1]
				break
			}
			name = p
		}
		if base < 0 {
			continue
		}
		for k := len(path) - 1; k >= 0; k-- {
			base++
			d[path[k]] = base
		}
	}
	return d
}

// Clone returns a deep copy of the Tree.
func (t *Tree) Clone() *Tree {
	if t == nil {
		return nil
	}
	c := &Tree{Cluster: t.Cluster, CoordsKnown: t.CoordsKnown, MinutesUnknown: t.MinutesUnknown, GPUsUnknown: t.GPUsUnknown}
	c.Accounts = append([]Account(nil), t.Accounts...)
	c.Users = append([]User(nil), t.Users...)
	c.Coords = append([]Coord(nil), t.Coords...)
	c.OtherLimits = append([]OtherLimit(nil), t.OtherLimits...)
	return c
}

// MergeDeleted combines a plain listing and a withdeleted listing of the
// same state (sacctmgr marks nothing as deleted): the result holds every
// association of withDeleted, with Deleted set on those absent from plain,
// and the associations found only in plain (a change between the two
// runs), in tree order. Fields come from withDeleted. Either may be nil.
func MergeDeleted(plain, withDeleted *Tree) *Tree {
	if withDeleted == nil {
		return plain.Clone()
	}
	out := withDeleted.Clone()
	if plain == nil {
		return out
	}
	if out.Cluster == "" {
		out.Cluster = plain.Cluster
	}
	live := make(map[string]bool, len(plain.Accounts))
	plainLimits := make(map[string]llmflow.GPULimits, len(plain.Accounts))
	for _, a := range plain.Accounts {
		live[a.Name] = true
		plainLimits[a.Name] = a.Limits
	}
	// A limit column only the plain listing has is taken from it (a
	// deleted account has no limit that matters).
	for i := range out.Accounts {
		a, l := &out.Accounts[i], plainLimits[out.Accounts[i].Name]
		if out.MinutesUnknown && !plain.MinutesUnknown {
			a.Limits.Minutes, a.Limits.HasMinutes = l.Minutes, l.HasMinutes
		}
		if out.GPUsUnknown && !plain.GPUsUnknown {
			a.Limits.GPUs, a.Limits.HasGPUs = l.GPUs, l.HasGPUs
		}
	}
	out.MinutesUnknown = out.MinutesUnknown && plain.MinutesUnknown
	out.GPUsUnknown = out.GPUsUnknown && plain.GPUsUnknown
	liveUsers := make(map[userKey]bool, len(plain.Users))
	for _, u := range plain.Users {
		liveUsers[userKey{u.Name, u.Account, u.Partition}] = true
	}
	have := make(map[string]bool, len(out.Accounts))
	for i := range out.Accounts {
		a := &out.Accounts[i]
		have[a.Name] = true
		if !live[a.Name] {
			a.Deleted = true
		}
	}
	haveUsers := make(map[userKey]bool, len(out.Users))
	for i := range out.Users {
		u := &out.Users[i]
		k := userKey{u.Name, u.Account, u.Partition}
		haveUsers[k] = true
		if !liveUsers[k] {
			u.Deleted = true
		}
	}
	for _, a := range plain.Accounts {
		if !have[a.Name] {
			out.Accounts = append(out.Accounts, a)
		}
	}
	for _, u := range plain.Users {
		if !haveUsers[userKey{u.Name, u.Account, u.Partition}] {
			out.Users = append(out.Users, u)
		}
	}
	out.Sort()
	return out
}

// Annotate completes a Tree parsed from an association listing with what
// other listings know: the Description and Organization of accounts (from
// ParseAccounts on "show account [withdeleted]", or the Accounts of any
// Tree) and the default associations of users (from the Users of a
// "show user withassoc" or "show assoc onlydefaults" parse, or of a dump).
// Only non-empty text and true defaults are copied, matching accounts by
// name and users by user, account and partition; nothing else changes.
func (t *Tree) Annotate(accounts []Account, users []User) {
	if len(accounts) > 0 {
		info := make(map[string]*Account, len(accounts))
		for i := range accounts {
			info[accounts[i].Name] = &accounts[i]
		}
		for i := range t.Accounts {
			a := &t.Accounts[i]
			if src, ok := info[a.Name]; ok {
				if src.Description != "" {
					a.Description = src.Description
				}
				if src.Organization != "" {
					a.Organization = src.Organization
				}
			}
		}
	}
	if len(users) > 0 {
		def := make(map[userKey]bool)
		for _, u := range users {
			if u.Default {
				def[userKey{u.Name, u.Account, u.Partition}] = true
			}
		}
		for i := range t.Users {
			u := &t.Users[i]
			if def[userKey{u.Name, u.Account, u.Partition}] {
				u.Default = true
			}
		}
	}
}

// String renders the Tree as an indented outline, one association a line,
// for logs and test failures.
func (t *Tree) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster %q\n", t.Cluster)
	depth := t.Depths()
	users := make(map[string][]User)
	for _, u := range t.Users {
		users[u.Account] = append(users[u.Account], u)
	}
	share := func(n uint32, p bool) string {
		if p {
			return "parent"
		}
		return fmt.Sprint(n)
	}
	del := func(d bool) string {
		if d {
			return " deleted"
		}
		return ""
	}
	for _, a := range t.Accounts {
		ind := strings.Repeat("  ", depth[a.Name])
		fmt.Fprintf(&b, "%s%s share=%s descr=%q org=%q%s\n", ind, a.Name, share(a.Shares, a.UseParent), a.Description, a.Organization, del(a.Deleted))
		for _, u := range users[a.Name] {
			def := ""
			if u.Default {
				def = " default"
			}
			part := ""
			if u.Partition != "" {
				part = " partition=" + u.Partition
			}
			fmt.Fprintf(&b, "%s  user %s%s share=%s%s%s\n", ind, u.Name, part, share(u.Shares, u.UseParent), def, del(u.Deleted))
		}
		delete(users, a.Name)
	}
	for _, u := range t.Users {
		if _, orphan := users[u.Account]; orphan {
			fmt.Fprintf(&b, "user %s account=%s partition=%s share=%s default=%v%s\n", u.Name, u.Account, u.Partition, share(u.Shares, u.UseParent), u.Default, del(u.Deleted))
		}
	}
	return b.String()
}
