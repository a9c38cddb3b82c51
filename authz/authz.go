// Package authz decides who may do what in the admin API: the six roles
// of delegated administration, the scopes they hold them on (nesting like
// the account tree: a role on an organisation covers its teams, a role on
// a team covers its projects and keys), the actions each role allows, and
// the no-escalation rule for granting roles.
//
// It is pure: no I/O, no store, no HTTP. The caller resolves where a
// resource sits in the tree served now (a team's organisation) and asks
// Principal.May or Principal.MayGrant. Every decision is a lookup in the
// tables below, so the whole policy is read in one place and tested
// exhaustively (authz_test.go).
package authz

import (
	"fmt"
	"slices"
)

// Role is an administrative role.
type Role string

// The roles of the admin API (README.md, "Delegated administration").
const (
	ProxyAdmin  Role = "proxy_admin"  // everything, everywhere (what the master key may)
	ProxyViewer Role = "proxy_viewer" // read everything
	OrgAdmin    Role = "org_admin"    // one organisation: its teams, projects, keys, users
	TeamAdmin   Role = "team_admin"   // one team: its projects and keys
	Member      Role = "member"       // one team: their own keys
	Viewer      Role = "viewer"       // one organisation or team: read
)

// Roles lists every role, from the widest to the narrowest.
func Roles() []Role {
	return []Role{ProxyAdmin, ProxyViewer, OrgAdmin, TeamAdmin, Member, Viewer}
}

// Level is the kind of scope a role is held on.
type Level uint8

const (
	LevelProxy Level = iota + 1 // everything
	LevelOrg                    // one organisation and everything under it
	LevelTeam                   // one team and everything under it
)

// Scope says where a resource sits: Org and Team empty for a proxy-wide
// resource (the list of organisations, a tag budget), Org alone for an
// organisation, Org and Team for a team and what is under it (projects,
// keys, budgets). Team names are global, so a team grant covers the team
// wherever the tree puts it; Org is the team's organisation in the tree
// served now.
type Scope struct {
	Org  string
	Team string
}

// Proxy is the scope of proxy-wide resources.
var Proxy = Scope{}

// OrgScope is the scope of an organisation.
func OrgScope(org string) Scope { return Scope{Org: org} }

// TeamScope is the scope of a team of org (and its projects and keys).
func TeamScope(org, team string) Scope { return Scope{Org: org, Team: team} }

// Grant is a role held on a scope: Org and Team empty for the proxy roles,
// Org alone for an organisation role, Team (and its organisation, Org,
// when known) for a team role.
type Grant struct {
	Role Role
	Org  string
	Team string
}

func (g Grant) String() string {
	switch {
	case g.Team != "":
		return fmt.Sprintf("%s on team %s", g.Role, g.Team)
	case g.Org != "":
		return fmt.Sprintf("%s on organisation %s", g.Role, g.Org)
	}
	return string(g.Role)
}

// Level is the level of the scope g is held on (0 for a malformed grant).
func (g Grant) Level() Level {
	switch {
	case g.Org == "" && g.Team == "":
		return LevelProxy
	case g.Team == "":
		return LevelOrg
	}
	return LevelTeam
}

// levels are the scope levels each role may be held on.
var levels = map[Role][]Level{
	ProxyAdmin:  {LevelProxy},
	ProxyViewer: {LevelProxy},
	OrgAdmin:    {LevelOrg},
	TeamAdmin:   {LevelTeam},
	Member:      {LevelTeam},
	Viewer:      {LevelOrg, LevelTeam},
}

// Validate reports whether g is a role on a scope the role can be held on:
// a proxy role without organisation or team, org_admin on an organisation,
// team_admin and member on a team, viewer on either.
func (g Grant) Validate() error {
	ls, ok := levels[g.Role]
	if !ok {
		return fmt.Errorf("unknown role %q (known: proxy_admin, proxy_viewer, org_admin, team_admin, member, viewer)", g.Role)
	}
	if !slices.Contains(ls, g.Level()) {
		if g.Role == Viewer {
			return fmt.Errorf("viewer is held on an organisation or a team: give org or team")
		}
		switch ls[0] {
		case LevelProxy:
			return fmt.Errorf("%s is held on everything: give neither org nor team", g.Role)
		case LevelOrg:
			return fmt.Errorf("%s is held on an organisation: give org, not team", g.Role)
		}
		return fmt.Errorf("%s is held on a team: give team", g.Role)
	}
	return nil
}

// covers reports whether a grant's scope includes s.
func (g Grant) covers(s Scope) bool {
	switch g.Level() {
	case LevelProxy:
		return true
	case LevelOrg:
		return s.Org == g.Org
	}
	return s.Team == g.Team
}

// Action is something done through the admin API.
type Action uint8

const (
	// Read lists and reads a scope: its teams, projects, keys (never
	// secrets), budgets, model lists, spend, users and audit.
	Read Action = iota + 1
	// OwnKeys creates keys owned by the caller in a team, lists and
	// revokes them.
	OwnKeys
	// ManageKeys creates, lists and revokes any key of a team.
	ManageKeys
	// ManageProjects creates and disables a team's projects.
	ManageProjects
	// SetModels sets a team's model list.
	SetModels
	// ManageTeams creates and disables an organisation's teams.
	ManageTeams
	// CreateUsers creates users (under an organisation for org admins).
	CreateUsers
	// ManageOrgs creates and disables organisations.
	ManageOrgs
	// DisableUsers disables users and revokes their tokens.
	DisableUsers
	// ManageTokens lists, creates and revokes another user's admin tokens.
	ManageTokens
	// BudgetOrg, BudgetTeam, BudgetProject, BudgetKey and BudgetTag set,
	// raise and remove budgets of that kind (who may: allows).
	BudgetOrg
	BudgetTeam
	BudgetProject
	BudgetKey
	BudgetTag
	// ManageRouting registers, replaces and removes runtime upstreams
	// and model aliases: proxy-wide resources (engine URLs, the model
	// names every organisation sees), so proxy admins only.
	ManageRouting

	numActions
)

var actionNames = [...]string{
	Read: "read", OwnKeys: "own_keys", ManageKeys: "manage_keys", ManageProjects: "manage_projects",
	SetModels: "set_models", ManageTeams: "manage_teams", CreateUsers: "create_users", ManageOrgs: "manage_orgs",
	DisableUsers: "disable_users", ManageTokens: "manage_tokens",
	BudgetOrg: "budget_org", BudgetTeam: "budget_team", BudgetProject: "budget_project", BudgetKey: "budget_key", BudgetTag: "budget_tag",
	ManageRouting: "manage_routing",
}

func (a Action) String() string {
	if a > 0 && a < numActions {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Actions lists every action.
func Actions() []Action {
	out := make([]Action, 0, numActions-1)
	for a := Read; a < numActions; a++ {
		out = append(out, a)
	}
	return out
}

// BudgetAction is the action of setting a budget of kind (org, team,
// project, key, tag), and false for an unknown kind.
func BudgetAction(kind string) (Action, bool) {
	switch kind {
	case "org":
		return BudgetOrg, true
	case "team":
		return BudgetTeam, true
	case "project":
		return BudgetProject, true
	case "key":
		return BudgetKey, true
	case "tag":
		return BudgetTag, true
	}
	return 0, false
}

// allows is the policy: what each role may do on the scopes it covers,
// one row per role.
var allows = map[Role][]Action{
	ProxyAdmin:  Actions(),
	ProxyViewer: {Read},
	OrgAdmin: {Read, ManageTeams, ManageProjects, ManageKeys, SetModels, CreateUsers,
		BudgetTeam, BudgetProject, BudgetKey},
	TeamAdmin: {Read, ManageProjects, ManageKeys, SetModels, BudgetProject, BudgetKey},
	Member:    {OwnKeys},
	Viewer:    {Read},
}

// Allows reports whether role r allows action a on the scopes it covers.
func Allows(r Role, a Action) bool { return slices.Contains(allows[r], a) }

// Principal is who calls the admin API: a user (or the master key) and the
// roles they hold.
type Principal struct {
	Name   string
	Grants []Grant
}

// May reports whether p may do a on a resource in scope s: one of p's
// grants covers s and its role allows a.
func (p Principal) May(a Action, s Scope) bool {
	for _, g := range p.Grants {
		if g.covers(s) && Allows(g.Role, a) {
			return true
		}
	}
	return false
}

// MayAnywhere reports whether p may do a on some scope: whether the
// action's routes are worth answering with a filtered result rather than
// 403.
func (p Principal) MayAnywhere(a Action) bool {
	for _, g := range p.Grants {
		if Allows(g.Role, a) {
			return true
		}
	}
	return false
}

// Everywhere reports whether p may do a on every scope (a proxy role
// allowing a): listings need no filtering.
func (p Principal) Everywhere(a Action) bool { return p.May(a, Proxy) }

// MayGrant reports whether p may grant (or remove) g: nobody grants above
// their own scope. A proxy admin grants anything; an org admin grants
// org_admin and viewer on their organisation and team_admin, member and
// viewer on its teams; a team admin grants member and viewer on their
// team; nobody else grants anything. For a team grant, g.Org must be the
// team's organisation in the tree served now. g must be valid.
func (p Principal) MayGrant(g Grant) bool {
	if g.Validate() != nil {
		return false
	}
	if p.Everywhere(ManageOrgs) { // a proxy admin
		return true
	}
	for _, h := range p.Grants {
		switch {
		case h.Role == OrgAdmin && g.Level() == LevelOrg:
			if h.Org == g.Org && (g.Role == OrgAdmin || g.Role == Viewer) {
				return true
			}
		case h.Role == OrgAdmin && g.Level() == LevelTeam:
			if g.Org != "" && h.Org == g.Org {
				return true // team_admin, member, viewer of one of its teams
			}
		case h.Role == TeamAdmin && g.Level() == LevelTeam:
			if h.Team == g.Team && (g.Role == Member || g.Role == Viewer) {
				return true
			}
		}
	}
	return false
}

// Orgs returns the organisations p's grants name, for filtering.
func (p Principal) Orgs() []string {
	var out []string
	for _, g := range p.Grants {
		if g.Level() == LevelOrg && !slices.Contains(out, g.Org) {
			out = append(out, g.Org)
		}
	}
	return out
}
