package slurmsync

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// Slurm is the source of who administers (issue 11):
//
//   - a coordinator of an organisation account (`sacctmgr add coordinator
//     account=A names=U`, A directly under root) is org_admin of A;
//   - a coordinator of a team account is team_admin of the team;
//   - a coordinator of a project account (deeper) gets no admin role:
//     llmflow's smallest admin scope is the team (package authz has no
//     project scope), and team_admin of the project's team would let them
//     manage the sibling projects' keys, which Slurm does not let them.
//     The sync says so (RoleNote); a proxy or org admin can grant
//     team_admin by hand when that is wanted;
//   - a coordinator of root, or of a disabled account, gets nothing;
//   - a user with a live association in a team account or in one of its
//     projects is member of the team (creates and manages their own keys
//     there); associations in an organisation account or in root give no
//     role (member is held on a team).
//
// The grants carry llmflow.SourceSlurm; the sync removes them when Slurm no
// longer implies them, and never touches a grant made by hand.

// ReduceCoords returns t's coordinators reduced to what they mean in the
// tree: for each user, the live accounts of the tree they coordinate that
// have no coordinated ancestor (a coordinator of an account coordinates
// its sub-accounts too). slurmdbd stores the accounts named in `sacctmgr
// add coordinator`, sacctmgr lists those and their sub-accounts: both
// reduce to the same set. Sorted by user, then account.
func ReduceCoords(t *sacctmgr.Tree) []sacctmgr.Coord {
	if len(t.Coords) == 0 {
		return nil
	}
	parent := make(map[string]string, len(t.Accounts))
	live := make(map[string]bool, len(t.Accounts))
	for _, a := range t.Accounts {
		parent[a.Name] = a.Parent
		live[a.Name] = !a.Deleted
	}
	set := map[sacctmgr.Coord]bool{}
	for _, c := range t.Coords {
		if live[c.Account] {
			set[c] = true
		}
	}
	var out []sacctmgr.Coord
	for c := range set {
		covered := false
		for p, n := parent[c.Account], 0; p != "" && n <= len(parent); p, n = parent[p], n+1 {
			if set[sacctmgr.Coord{User: c.User, Account: p}] {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, c)
		}
	}
	return sacctmgr.SortCoords(out)
}

// RoleWant is a role Slurm implies, with the reason.
type RoleWant struct {
	Grant llmflow.RoleGrant // Source llmflow.SourceSlurm; Org for org_admin, Team for team roles
	Why   string
}

// Roles returns the roles t implies on the mapped tree accts (Map's
// result), sorted by user, role, organisation and team, and notes on the
// coordinators and users that get none although one could expect it.
func Roles(t *sacctmgr.Tree, accts llmflow.Accounts) (want []RoleWant, notes []string) {
	byName := make(map[string]llmflow.Account, len(accts))
	for _, a := range accts {
		byName[a.Name] = a
	}
	// teamOf is the team an account is or lies under, "" for none.
	teamOf := func(name string) string {
		for n := 0; n <= len(accts); n++ {
			a, ok := byName[name]
			if !ok {
				return ""
			}
			switch a.Kind {
			case llmflow.KindTeam:
				return a.Name
			case llmflow.KindProject:
				name = a.Parent
				continue
			}
			return ""
		}
		return ""
	}
	seen := map[llmflow.RoleGrant]int{}
	add := func(g llmflow.RoleGrant, why string) {
		g.Source = llmflow.SourceSlurm
		if i, ok := seen[g]; ok {
			if !strings.Contains(want[i].Why, why) {
				want[i].Why += "; " + why
			}
			return
		}
		seen[g] = len(want)
		want = append(want, RoleWant{Grant: g, Why: why})
	}
	badUser := map[string]bool{}
	validUser := func(u string) bool {
		if llmflow.ValidUserName(u) {
			return true
		}
		if !badUser[u] {
			badUser[u] = true
			notes = append(notes, fmt.Sprintf("Slurm user %q: not a valid llmflow user name, no role", u))
		}
		return false
	}
	for _, c := range t.Coords {
		a, ok := byName[c.Account]
		switch {
		case c.Account == "root":
			notes = append(notes, fmt.Sprintf("coordinator %s of root: no role (grant proxy_admin by hand if meant)", c.User))
			continue
		case !ok || a.Disabled:
			continue
		case a.Kind == llmflow.KindProject:
			notes = append(notes, fmt.Sprintf("coordinator %s of project %s: no role (llmflow has no project admin role; "+
				"team_admin of %s would reach its other projects: grant it by hand if meant)", c.User, c.Account, teamOf(c.Account)))
			continue
		}
		if !validUser(c.User) {
			continue
		}
		switch a.Kind {
		case llmflow.KindOrg:
			add(llmflow.RoleGrant{User: c.User, Role: string(authz.OrgAdmin), Org: a.Name}, "coordinator of "+a.Name)
		case llmflow.KindTeam:
			add(llmflow.RoleGrant{User: c.User, Role: string(authz.TeamAdmin), Team: a.Name}, "coordinator of "+a.Name)
		}
	}
	for _, u := range t.Users {
		if u.Deleted {
			continue
		}
		team := teamOf(u.Account)
		if team == "" || byName[team].Disabled || byName[u.Account].Disabled {
			continue
		}
		if !validUser(u.Name) {
			continue
		}
		add(llmflow.RoleGrant{User: u.Name, Role: string(authz.Member), Team: team}, "association in "+u.Account)
	}
	slices.SortFunc(want, func(a, b RoleWant) int { return compareGrants(a.Grant, b.Grant) })
	return want, notes
}

func compareGrants(a, b llmflow.RoleGrant) int {
	return cmp.Or(strings.Compare(a.User, b.User), strings.Compare(a.Role, b.Role),
		strings.Compare(a.Org, b.Org), strings.Compare(a.Team, b.Team))
}

// sameGrant reports whether a and b are the same role on the same scope
// for the same user (whatever their source and time).
func sameGrant(a, b llmflow.RoleGrant) bool {
	return a.User == b.User && a.Role == b.Role && a.Org == b.Org && a.Team == b.Team
}

// RoleDiff compares the roles Slurm implies (want) with the stored roles
// (have, every user's, with their sources) and users, and returns the
// changes that bring the Slurm-sourced grants in line, by user:
//
//   - a wanted role not held is granted (the user created first when
//     missing, re-enabled when the import had disabled it); a role held
//     already, by hand or from Slurm, is left as it is;
//   - a Slurm grant no longer wanted is revoked; grants made by hand are
//     never touched;
//   - a user whose Slurm grants all go and who holds no hand-granted role
//     is disabled (which revokes their admin tokens): a user removed from
//     Slurm stops administering at once;
//   - a user an admin disabled gets no Slurm role (a note says so) and is
//     not re-enabled.
func RoleDiff(want []RoleWant, have []llmflow.RoleGrant, users []llmflow.User) (changes []llmflow.RoleChange, notes []string) {
	byUser := map[string]llmflow.User{}
	for _, u := range users {
		byUser[u.Name] = u
	}
	type state struct {
		want          []RoleWant
		slurm, manual []llmflow.RoleGrant
	}
	st := map[string]*state{}
	get := func(u string) *state {
		s := st[u]
		if s == nil {
			s = &state{}
			st[u] = s
		}
		return s
	}
	for _, w := range want {
		get(w.Grant.User).want = append(get(w.Grant.User).want, w)
	}
	for _, g := range have {
		s := get(g.User)
		if g.Source == llmflow.SourceSlurm {
			s.slurm = append(s.slurm, g)
		} else {
			s.manual = append(s.manual, g)
		}
	}
	names := make([]string, 0, len(st))
	for u := range st {
		names = append(names, u)
	}
	slices.Sort(names)
	for _, name := range names {
		s := st[name]
		u, exists := byUser[name]
		held := func(g llmflow.RoleGrant) bool {
			return slices.ContainsFunc(s.slurm, func(h llmflow.RoleGrant) bool { return sameGrant(g, h) }) ||
				slices.ContainsFunc(s.manual, func(h llmflow.RoleGrant) bool { return sameGrant(g, h) })
		}
		var grants []llmflow.RoleChange
		for _, w := range s.want {
			if !held(w.Grant) {
				grants = append(grants, llmflow.RoleChange{Op: llmflow.OpGrant, User: name, Grant: w.Grant, Why: w.Why})
			}
		}
		handDisabled := exists && !u.Active() && u.DisabledBy != llmflow.SourceSlurm
		switch {
		case handDisabled:
			if len(grants) > 0 {
				notes = append(notes, fmt.Sprintf("user %s is disabled by an admin: Slurm roles not granted", name))
				grants = nil
			}
		case len(grants) > 0 && !exists:
			changes = append(changes, llmflow.RoleChange{Op: llmflow.OpCreateUser, User: name, Why: "Slurm user gaining a role"})
		case len(s.want) > 0 && exists && !u.Active():
			changes = append(changes, llmflow.RoleChange{Op: llmflow.OpEnableUser, User: name, Why: "back in Slurm"})
		}
		changes = append(changes, grants...)
		for _, g := range s.slurm {
			if !slices.ContainsFunc(s.want, func(w RoleWant) bool { return sameGrant(w.Grant, g) }) {
				changes = append(changes, llmflow.RoleChange{Op: llmflow.OpRevoke, User: name, Grant: g, Why: "no longer in Slurm"})
			}
		}
		if len(s.slurm) > 0 && len(s.want) == 0 && len(s.manual) == 0 && exists && u.Active() {
			changes = append(changes, llmflow.RoleChange{Op: llmflow.OpDisableUser, User: name, Why: "removed from Slurm, no role left"})
		}
	}
	return changes, notes
}

// RoleChangeString shows a role change as sync prints it, in the columns
// of the account changes.
func RoleChangeString(c llmflow.RoleChange) string {
	switch c.Op {
	case llmflow.OpCreateUser:
		return fmt.Sprintf("user+       %-8s %s (%s)", "user", c.User, c.Why)
	case llmflow.OpEnableUser:
		return fmt.Sprintf("re-enabled  %-8s %s (%s; its old admin tokens stay revoked)", "user", c.User, c.Why)
	case llmflow.OpDisableUser:
		return fmt.Sprintf("disabled    %-8s %s (%s; admin tokens revoked)", "user", c.User, c.Why)
	case llmflow.OpGrant:
		return fmt.Sprintf("role+       %-8s %s: %s (%s)", "role", c.User, grantText(c.Grant), c.Why)
	case llmflow.OpRevoke:
		return fmt.Sprintf("role-       %-8s %s: %s (%s)", "role", c.User, grantText(c.Grant), c.Why)
	}
	return c.Op.String() + " " + c.User
}

func grantText(g llmflow.RoleGrant) string {
	return authz.Grant{Role: authz.Role(g.Role), Org: g.Org, Team: g.Team}.String()
}
