package authz

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The tree of these tests: organisation A with teams a1 and a2,
// organisation B with team b1.
var (
	scopes = map[string]Scope{
		"proxy": Proxy,
		"A":     OrgScope("A"), "B": OrgScope("B"),
		"a1": TeamScope("A", "a1"), "a2": TeamScope("A", "a2"), "b1": TeamScope("B", "b1"),
	}
	// every grant that can exist on the tree
	allGrants = func() []Grant {
		var out []Grant
		for _, r := range Roles() {
			for _, s := range []Grant{{}, {Org: "A"}, {Org: "B"}, {Org: "A", Team: "a1"}, {Org: "A", Team: "a2"}, {Org: "B", Team: "b1"}} {
				g := Grant{Role: r, Org: s.Org, Team: s.Team}
				if g.Validate() == nil {
					out = append(out, g)
				}
			}
		}
		return out
	}()
)

// TestMay spells the roles table out: for a role held on one scope, which
// actions it allows on which scopes of the tree. Every (grant, action,
// scope) triple is checked.
func TestMay(t *testing.T) {
	// role → the actions it allows, written independently of the policy
	// table, as the README's delegated administration says them
	spec := map[Role]string{
		ProxyAdmin:  "read own_keys manage_keys manage_projects set_models manage_teams create_users manage_orgs disable_users manage_tokens budget_org budget_team budget_project budget_key budget_tag manage_routing",
		ProxyViewer: "read",
		OrgAdmin:    "read manage_keys manage_projects set_models manage_teams create_users budget_team budget_project budget_key",
		TeamAdmin:   "read manage_keys manage_projects set_models budget_project budget_key",
		Member:      "own_keys",
		Viewer:      "read",
	}
	// grant scope → the scopes it covers
	covered := map[string]string{
		"proxy": "proxy A B a1 a2 b1",
		"A":     "A a1 a2",
		"a1":    "a1",
	}
	cases := []struct {
		g     Grant
		scope string
	}{
		{Grant{Role: ProxyAdmin}, "proxy"}, {Grant{Role: ProxyViewer}, "proxy"},
		{Grant{Role: OrgAdmin, Org: "A"}, "A"}, {Grant{Role: Viewer, Org: "A"}, "A"},
		{Grant{Role: TeamAdmin, Org: "A", Team: "a1"}, "a1"}, {Grant{Role: Member, Org: "A", Team: "a1"}, "a1"},
		{Grant{Role: Viewer, Org: "A", Team: "a1"}, "a1"},
		// a team grant whose organisation is not known: covers the team wherever it is
		{Grant{Role: TeamAdmin, Team: "a1"}, "a1"},
	}
	n := 0
	for _, c := range cases {
		p := Principal{Name: "u", Grants: []Grant{c.g}}
		for name, s := range scopes {
			for _, a := range Actions() {
				want := slices.Contains(strings.Fields(spec[c.g.Role]), a.String()) &&
					slices.Contains(strings.Fields(covered[c.scope]), name)
				if got := p.May(a, s); got != want {
					t.Errorf("%s: May(%s, %s) = %v, want %v", c.g, a, name, got, want)
				}
				n++
			}
		}
	}
	if n != len(cases)*len(scopes)*int(numActions-1) {
		t.Fatalf("checked %d triples", n)
	}
	// every action has a name and is in proxy_admin's row
	for _, a := range Actions() {
		if strings.HasPrefix(a.String(), "Action(") || !strings.Contains(spec[ProxyAdmin], a.String()) {
			t.Errorf("action %d: %s", a, a)
		}
	}
}

func TestNoGrantsNoRights(t *testing.T) {
	var p Principal
	for name, s := range scopes {
		for _, a := range Actions() {
			if p.May(a, s) || p.MayAnywhere(a) {
				t.Errorf("a principal without grants may %s on %s", a, name)
			}
		}
	}
	for _, g := range allGrants {
		if p.MayGrant(g) {
			t.Errorf("a principal without grants may grant %s", g)
		}
	}
}

// TestMayGrant checks the no-escalation rule on every pair (grant held,
// grant asked for) of the tree.
func TestMayGrant(t *testing.T) {
	key := func(g Grant) string { return fmt.Sprintf("%s@%s/%s", g.Role, g.Org, g.Team) }
	teams := map[string][]string{"A": {"a1", "a2"}, "B": {"b1"}}
	may := map[string][]string{}
	for org, ts := range teams {
		// an org admin: org_admin and viewer on the organisation,
		// team_admin, member and viewer on each of its teams
		k := key(Grant{Role: OrgAdmin, Org: org})
		may[k] = []string{"org_admin@" + org + "/", "viewer@" + org + "/"}
		for _, tm := range ts {
			may[k] = append(may[k], "team_admin@"+org+"/"+tm, "member@"+org+"/"+tm, "viewer@"+org+"/"+tm)
			// a team admin: member and viewer on the team
			may[key(Grant{Role: TeamAdmin, Org: org, Team: tm})] = []string{"member@" + org + "/" + tm, "viewer@" + org + "/" + tm}
		}
	}
	for _, held := range allGrants {
		p := Principal{Grants: []Grant{held}}
		for _, asked := range allGrants {
			want := held.Role == ProxyAdmin || slices.Contains(may[key(held)], key(asked))
			if got := p.MayGrant(asked); got != want {
				t.Errorf("%s granting %s: %v, want %v", held, asked, got, want)
			}
		}
	}
	// a team grant whose organisation the caller did not resolve is not
	// grantable by an org admin (it could be any organisation's team)
	p := Principal{Grants: []Grant{{Role: OrgAdmin, Org: "A"}}}
	if p.MayGrant(Grant{Role: Member, Team: "a1"}) {
		t.Error("org admin granted a team role without the team's organisation")
	}
	// invalid grants are never grantable, even by a proxy admin
	p = Principal{Grants: []Grant{{Role: ProxyAdmin}}}
	for _, g := range []Grant{{Role: "root"}, {Role: ProxyAdmin, Org: "A"}, {Role: OrgAdmin}, {Role: Member, Org: "A"}, {Role: Viewer}} {
		if p.MayGrant(g) {
			t.Errorf("proxy admin granted invalid %+v", g)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		g    Grant
		want string // "" valid, else a part of the error
	}{
		{Grant{Role: ProxyAdmin}, ""},
		{Grant{Role: ProxyViewer, Org: "A"}, "neither org nor team"},
		{Grant{Role: OrgAdmin, Org: "A"}, ""},
		{Grant{Role: OrgAdmin, Org: "A", Team: "a1"}, "give org, not team"},
		{Grant{Role: OrgAdmin}, "give org, not team"},
		{Grant{Role: TeamAdmin, Team: "a1"}, ""},
		{Grant{Role: TeamAdmin, Org: "A"}, "give team"},
		{Grant{Role: Member, Org: "A", Team: "a1"}, ""},
		{Grant{Role: Viewer, Org: "A"}, ""},
		{Grant{Role: Viewer, Team: "a1"}, ""},
		{Grant{Role: Viewer}, "organisation or a team"},
		{Grant{Role: "admin"}, "unknown role"},
		{Grant{}, "unknown role"},
	} {
		err := tc.g.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.g, err, tc.want)
		}
	}
}

func TestBudgetAction(t *testing.T) {
	for kind, want := range map[string]Action{"org": BudgetOrg, "team": BudgetTeam, "project": BudgetProject, "key": BudgetKey, "tag": BudgetTag} {
		if a, ok := BudgetAction(kind); !ok || a != want {
			t.Errorf("%s: %v %v", kind, a, ok)
		}
	}
	if _, ok := BudgetAction("user"); ok {
		t.Error("unknown kind accepted")
	}
}

func TestEverywhereAndOrgs(t *testing.T) {
	p := Principal{Grants: []Grant{{Role: Viewer, Org: "A"}, {Role: OrgAdmin, Org: "B"}, {Role: Viewer, Org: "A"}, {Role: Member, Team: "a1"}}}
	if p.Everywhere(Read) || !p.MayAnywhere(Read) || !p.MayAnywhere(OwnKeys) || p.MayAnywhere(ManageOrgs) {
		t.Error("scoped principal seen as proxy-wide")
	}
	if got := p.Orgs(); !slices.Equal(got, []string{"A", "B"}) {
		t.Errorf("Orgs() = %v", got)
	}
	if !(Principal{Grants: []Grant{{Role: ProxyViewer}}}).Everywhere(Read) {
		t.Error("proxy viewer does not read everywhere")
	}
}
