package slurmsync

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// Map turns Slurm's association tree into llmflow's organisation tree:
// accounts directly under root are organisations, their children teams,
// deeper accounts projects (keeping their nesting). Shares are Slurm's raw
// Fairshare values (siblings are normalised against each other);
// Fairshare=parent is UseParent. Deleted accounts are kept, disabled. Users
// with a live association in an account are its Members, and every live
// user association, with its shares, is one of its Users (the leaves of
// Fair Tree). root's own user associations (root/root with a share) count
// in Fair Tree as siblings of the organisations: when root has live ones,
// the tree starts with a KindRoot account "root" that carries them.
func Map(t *sacctmgr.Tree) (llmflow.Accounts, error) {
	depth := map[string]int{"root": 0}
	var out llmflow.Accounts
	index := map[string]int{}
	var rootUsers []llmflow.UserAssoc
	for _, u := range t.Users {
		if u.Account == "root" && !u.Deleted {
			rootUsers = append(rootUsers, userAssoc(u))
		}
	}
	if len(rootUsers) > 0 {
		out = append(out, llmflow.Account{Name: "root", Kind: llmflow.KindRoot, Users: rootUsers, Source: "slurm"})
	}
	for _, a := range t.Accounts {
		if a.Name == "root" {
			continue
		}
		pd, ok := depth[a.Parent]
		if !ok {
			return nil, fmt.Errorf("slurm tree: account %q: parent %q not found before it", a.Name, a.Parent)
		}
		d := pd + 1
		depth[a.Name] = d
		acct := llmflow.Account{
			Name:      a.Name,
			Kind:      kindAt(d),
			Shares:    float64(a.Shares),
			UseParent: a.UseParent,
			Disabled:  a.Deleted,
			Source:    "slurm",
			Limits:    a.Limits,
		}
		if d > 1 {
			acct.Parent = a.Parent
		}
		if a.UseParent {
			acct.Shares = 0
		}
		index[a.Name] = len(out)
		out = append(out, acct)
	}
	// a child of a deleted account is disabled too
	for i := range out {
		if p, ok := index[out[i].Parent]; ok && out[p].Disabled {
			out[i].Disabled = true
		}
	}
	limits := userLimits(t)
	for _, u := range t.Users {
		i, ok := index[u.Account]
		if !ok || u.Deleted {
			continue
		}
		if !slices.Contains(out[i].Members, u.Name) {
			out[i].Members = append(out[i].Members, u.Name)
		}
		ua := userAssoc(u)
		ua.Limits = limits[assocKey{u.Account, u.Name, u.Partition}]
		out[i].Users = append(out[i].Users, ua)
	}
	for i := range out {
		slices.Sort(out[i].Members)
	}
	return out, nil
}

// assocKey names a user association.
type assocKey struct{ account, user, partition string }

// userLimits are the user associations' GrpTRESMins and GrpTRES gres/gpu
// counts of t (its OtherLimits), by association.
func userLimits(t *sacctmgr.Tree) map[assocKey]llmflow.GPULimits {
	out := map[assocKey]llmflow.GPULimits{}
	for _, l := range t.OtherLimits {
		if l.User == "" {
			continue
		}
		k := assocKey{l.Account, l.User, l.Partition}
		lim := out[k]
		switch l.Limit {
		case "GrpTRESMins":
			lim.Minutes, lim.HasMinutes = l.GPUs, true
		case "GrpTRES":
			lim.GPUs, lim.HasGPUs = l.GPUs, true
		default:
			continue
		}
		out[k] = lim
	}
	return out
}

// userAssoc is u as a leaf of llmflow's tree.
func userAssoc(u sacctmgr.User) llmflow.UserAssoc {
	ua := llmflow.UserAssoc{User: u.Name, Partition: u.Partition, Shares: float64(u.Shares), UseParent: u.UseParent}
	if u.UseParent {
		ua.Shares = 0
	}
	return ua
}

func kindAt(depth int) llmflow.Kind {
	switch depth {
	case 1:
		return llmflow.KindOrg
	case 2:
		return llmflow.KindTeam
	default:
		return llmflow.KindProject
	}
}

// ChangeKind says what a sync does to one account.
type ChangeKind string

const (
	Created       ChangeKind = "created"
	SharesChanged ChangeKind = "shares"
	Reparented    ChangeKind = "reparented"
	Disabled      ChangeKind = "disabled"
	Reenabled     ChangeKind = "re-enabled"
	Members       ChangeKind = "members"
	// LimitsChanged: the account's GPU limits (GrpTRESMins, GrpTRES) were
	// set, changed or removed in Slurm.
	LimitsChanged ChangeKind = "limits"
	// UserShares: the shares (or partitions) of the account's user
	// associations changed, its members did not; for Slurm's root, any
	// change of root's own user associations.
	UserShares ChangeKind = "user-shares"
)

// Change is one difference between llmflow's tree and Slurm's.
type Change struct {
	Kind    ChangeKind
	Account llmflow.Account  // as it will be
	Old     *llmflow.Account // as it was; nil when created
}

func (c Change) String() string {
	a := c.Account
	switch c.Kind {
	case Created:
		line := fmt.Sprintf("created     %-8s %s (parent %q, shares %s)", a.Kind, a.Name, a.Parent, shares(a))
		if len(a.Members) > 0 {
			line += ", members " + strings.Join(a.Members, ",")
		}
		if !a.Limits.IsZero() {
			line += ", limits " + limitsText(a.Limits)
		}
		return line
	case SharesChanged:
		return fmt.Sprintf("shares      %-8s %s: %s → %s", a.Kind, a.Name, shares(*c.Old), shares(a))
	case Reparented:
		return fmt.Sprintf("reparented  %-8s %s: parent %q → %q", a.Kind, a.Name, c.Old.Parent, a.Parent)
	case Disabled:
		return fmt.Sprintf("disabled    %-8s %s", a.Kind, a.Name)
	case Reenabled:
		return fmt.Sprintf("re-enabled  %-8s %s", a.Kind, a.Name)
	case LimitsChanged:
		return fmt.Sprintf("limits      %-8s %s: %s → %s", a.Kind, a.Name, limitsText(c.Old.Limits), limitsText(a.Limits))
	case Members:
		added, removed := memberDiff(c.Old.Members, a.Members)
		return fmt.Sprintf("members     %-8s %s: added %s, removed %s", a.Kind, a.Name, listOrNone(added), listOrNone(removed))
	case UserShares:
		var old []llmflow.UserAssoc
		if c.Old != nil {
			old = c.Old.Users
		}
		return fmt.Sprintf("user-shares %-8s %s: %s → %s", a.Kind, a.Name, userList(old), userList(a.Users))
	}
	return string(c.Kind) + " " + a.Name
}

// memberDiff returns the members of cur not in old, and of old not in cur,
// each in its list's order.
func memberDiff(old, cur []string) (added, removed []string) {
	for _, m := range cur {
		if !slices.Contains(old, m) {
			added = append(added, m)
		}
	}
	for _, m := range old {
		if !slices.Contains(cur, m) {
			removed = append(removed, m)
		}
	}
	return added, removed
}

// userList shows user associations as user[@partition]=shares.
func userList(us []llmflow.UserAssoc) string {
	if len(us) == 0 {
		return "none"
	}
	parts := make([]string, len(us))
	for i, u := range us {
		s := fmt.Sprint(u.Shares)
		if u.UseParent {
			s = "parent"
		}
		name := u.User
		if u.Partition != "" {
			name += "@" + u.Partition
		}
		parts[i] = name + "=" + s
		if !u.Limits.IsZero() {
			parts[i] += "(" + limitsText(u.Limits) + ")"
		}
	}
	return strings.Join(parts, ",")
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

func shares(a llmflow.Account) string {
	if a.UseParent {
		return "parent"
	}
	return fmt.Sprint(a.Shares)
}

// Diff compares the Slurm accounts of llmflow's tree (old) with a fresh
// import (cur) and returns the changes and the tree to store: every
// account of cur that is live or that llmflow knew; accounts of old that
// Slurm no longer has, disabled (never deleted: their records and reports
// stay). An account deleted in Slurm that llmflow never knew is left out:
// it is never announced as created. Accounts of other sources are left as
// they are. An account can change in several ways at once; each is one
// Change. Slurm's root (KindRoot) only ever changes its users (UserShares).
func Diff(old, cur llmflow.Accounts) (changes []Change, next llmflow.Accounts) {
	before := map[string]*llmflow.Account{}
	for i := range old {
		before[old[i].Name] = &old[i]
	}
	seen := map[string]bool{}
	for _, a := range cur {
		o, ok := before[a.Name]
		if !ok && a.Disabled {
			continue // deleted in Slurm before llmflow ever saw it
		}
		seen[a.Name] = true
		next = append(next, a)
		if a.Kind == llmflow.KindRoot {
			if !ok || !slices.Equal(o.Users, a.Users) {
				changes = append(changes, Change{Kind: UserShares, Account: a, Old: o})
			}
			continue
		}
		if !ok {
			changes = append(changes, Change{Kind: Created, Account: a})
			continue
		}
		if o.Parent != a.Parent || o.Kind != a.Kind {
			changes = append(changes, Change{Kind: Reparented, Account: a, Old: o})
		}
		if o.Shares != a.Shares || o.UseParent != a.UseParent {
			changes = append(changes, Change{Kind: SharesChanged, Account: a, Old: o})
		}
		switch {
		case o.Disabled && !a.Disabled:
			changes = append(changes, Change{Kind: Reenabled, Account: a, Old: o})
		case !o.Disabled && a.Disabled:
			changes = append(changes, Change{Kind: Disabled, Account: a, Old: o})
		}
		if !slices.Equal(o.Members, a.Members) {
			changes = append(changes, Change{Kind: Members, Account: a, Old: o})
		} else if !slices.Equal(o.Users, a.Users) {
			changes = append(changes, Change{Kind: UserShares, Account: a, Old: o})
		}
		if o.Limits != a.Limits {
			changes = append(changes, Change{Kind: LimitsChanged, Account: a, Old: o})
		}
	}
	for i := range old {
		o := old[i]
		if seen[o.Name] {
			continue
		}
		if o.Kind == llmflow.KindRoot {
			gone := llmflow.Account{Name: o.Name, Kind: o.Kind, Source: o.Source}
			changes = append(changes, Change{Kind: UserShares, Account: gone, Old: &old[i]})
			continue // root without users of its own is not kept
		}
		if o.Source == "slurm" && !o.Disabled {
			gone := o
			gone.Disabled = true
			changes = append(changes, Change{Kind: Disabled, Account: gone, Old: &old[i]})
			o = gone
		}
		next = append(next, o)
	}
	return changes, order(next)
}

// order sorts a tree parents before children, siblings by name.
func order(accts llmflow.Accounts) llmflow.Accounts {
	children := map[string][]llmflow.Account{}
	names := map[string]bool{}
	for _, a := range accts {
		names[a.Name] = true
	}
	for _, a := range accts {
		p := a.Parent
		if !names[p] {
			p = ""
		}
		children[p] = append(children[p], a)
	}
	out := make(llmflow.Accounts, 0, len(accts))
	var walk func(string)
	walk = func(p string) {
		kids := children[p]
		slices.SortFunc(kids, func(a, b llmflow.Account) int { return strings.Compare(a.Name, b.Name) })
		for _, k := range kids {
			out = append(out, k)
			walk(k.Name)
		}
	}
	walk("")
	// Slurm's root, when present, comes first (its Parent "" made it an
	// organisation for the walk).
	for i, a := range out {
		if a.Kind == llmflow.KindRoot && i > 0 {
			copy(out[1:i+1], out[:i])
			out[0] = a
			break
		}
	}
	return out
}

// Count tallies changes into a run's counters.
func Count(run *llmflow.SyncRun, changes []Change, total int) {
	touched := map[string]bool{}
	for _, c := range changes {
		touched[c.Account.Name] = true
		switch c.Kind {
		case Created:
			run.Created++
		case SharesChanged:
			run.SharesChanged++
		case Reparented:
			run.Reparented++
		case Disabled:
			run.Disabled++
		case Reenabled:
			run.Reenabled++
		case Members:
			run.Members++
		case LimitsChanged:
			run.LimitsChanged++
		case UserShares:
			run.SharesChanged++
		}
	}
	run.Unchanged = total - len(touched)
}

// limitsText shows an account's GPU limits as sacctmgr sets them, with the
// budget GrpTRESMins gives in GPU-hours.
func limitsText(l llmflow.GPULimits) string {
	if h, ok := l.BudgetGPUHours(); ok {
		return fmt.Sprintf("%s (%g GPU-hours)", l, h)
	}
	return l.String()
}
