package slurmsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/google/go-cmp/cmp"
)

// roleTree: org1 > lab-a > proj-x > proj-y, org1 > lab-b, org2 (deleted
// team lab-old under it).
func roleTree() *sacctmgr.Tree {
	return &sacctmgr.Tree{
		Cluster: "c",
		Accounts: []sacctmgr.Account{
			{Name: "root", Shares: 1},
			{Name: "org1", Parent: "root", Shares: 1},
			{Name: "lab-a", Parent: "org1", Shares: 1},
			{Name: "proj-x", Parent: "lab-a", Shares: 1},
			{Name: "proj-y", Parent: "proj-x", Shares: 1},
			{Name: "lab-b", Parent: "org1", Shares: 1},
			{Name: "org2", Parent: "root", Shares: 1},
			{Name: "lab-old", Parent: "org2", Shares: 1, Deleted: true},
		},
		Users: []sacctmgr.User{
			{Name: "root", Account: "root", Shares: 1},
			{Name: "ann", Account: "lab-a", Shares: 1},
			{Name: "ann", Account: "proj-y", Shares: 1}, // same team: one member grant
			{Name: "bob", Account: "proj-x", Shares: 1, Partition: "gpu"},
			{Name: "cy", Account: "org1", Shares: 1},                    // an organisation: no member role
			{Name: "dee", Account: "lab-b", Shares: 1, Deleted: true},   // deleted association
			{Name: "eve", Account: "lab-old", Shares: 1, Deleted: true}, // deleted team
			{Name: "master", Account: "lab-b", Shares: 1},               // not a valid llmflow user name
		},
		CoordsKnown: true,
	}
}

func grants(ws []RoleWant) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Grant.User+" "+grantText(w.Grant)+" ("+w.Why+")")
	}
	return out
}

func TestRoles(t *testing.T) {
	tr := roleTree()
	tr.Coords = []sacctmgr.Coord{
		{User: "oli", Account: "org1"},
		{User: "oli", Account: "lab-a"}, // under its organisation: reduced away
		{User: "tim", Account: "lab-b"},
		{User: "pat", Account: "proj-x"}, // a project: no role, noted
		{User: "pat", Account: "proj-y"}, // under proj-x: reduced away
		{User: "rob", Account: "root"},
		{User: "vic", Account: "lab-old"}, // deleted: dropped by the reduction
		{User: "wes", Account: "elsewhere"},
	}
	if err := Normalize(tr); err != nil {
		t.Fatal(err)
	}
	want := []sacctmgr.Coord{{User: "oli", Account: "org1"}, {User: "pat", Account: "proj-x"}, {User: "rob", Account: "root"}, {User: "tim", Account: "lab-b"}}
	if d := cmp.Diff(want, tr.Coords); d != "" {
		t.Errorf("reduced coordinators (-want +got):\n%s", d)
	}
	accts, err := Map(tr)
	if err != nil {
		t.Fatal(err)
	}
	ws, notes := Roles(tr, accts)
	wantGrants := []string{
		"ann member on team lab-a (association in lab-a; association in proj-y)",
		"bob member on team lab-a (association in proj-x)",
		"oli org_admin on organisation org1 (coordinator of org1)",
		"tim team_admin on team lab-b (coordinator of lab-b)",
	}
	if d := cmp.Diff(wantGrants, grants(ws)); d != "" {
		t.Errorf("roles (-want +got):\n%s", d)
	}
	for _, w := range ws {
		if w.Grant.Source != llmflow.SourceSlurm {
			t.Errorf("%+v: source %q", w.Grant, w.Grant.Source)
		}
	}
	allNotes := strings.Join(notes, "\n")
	for _, s := range []string{"coordinator pat of project proj-x: no role", "team_admin of lab-a", "coordinator rob of root", `Slurm user "master"`} {
		if !strings.Contains(allNotes, s) {
			t.Errorf("notes lack %q:\n%s", s, allNotes)
		}
	}
}

func TestRoleDiff(t *testing.T) {
	slurm := func(user, role, org, team string) llmflow.RoleGrant {
		return llmflow.RoleGrant{User: user, Role: role, Org: org, Team: team, Source: llmflow.SourceSlurm}
	}
	hand := func(user, role, org, team string) llmflow.RoleGrant {
		g := slurm(user, role, org, team)
		g.Source = llmflow.SourceAdmin
		return g
	}
	want := func(gs ...llmflow.RoleGrant) []RoleWant {
		var out []RoleWant
		for _, g := range gs {
			out = append(out, RoleWant{Grant: g, Why: "w"})
		}
		return out
	}
	active := func(n string) llmflow.User { return llmflow.User{Name: n} }
	disabled := func(n, by string) llmflow.User {
		return llmflow.User{Name: n, DisabledAt: time.Unix(1, 0), DisabledBy: by}
	}
	for _, tc := range []struct {
		name  string
		want  []RoleWant
		have  []llmflow.RoleGrant
		users []llmflow.User
		out   []string
		note  string
	}{
		{name: "new user", want: want(slurm("a", "team_admin", "", "t")),
			out: []string{"create-user a", "grant a team_admin on team t"}},
		{name: "held already", want: want(slurm("a", "team_admin", "", "t")), have: []llmflow.RoleGrant{slurm("a", "team_admin", "", "t")},
			users: []llmflow.User{active("a")}},
		{name: "held by hand", want: want(slurm("a", "team_admin", "", "t")), have: []llmflow.RoleGrant{hand("a", "team_admin", "", "t")},
			users: []llmflow.User{active("a")}},
		{name: "existing user", want: want(slurm("a", "org_admin", "o", "")), users: []llmflow.User{active("a")},
			out: []string{"grant a org_admin on organisation o"}},
		{name: "coordinator removed, still a member", want: want(slurm("a", "member", "", "t")),
			have:  []llmflow.RoleGrant{slurm("a", "member", "", "t"), slurm("a", "team_admin", "", "t")},
			users: []llmflow.User{active("a")}, out: []string{"revoke a team_admin on team t"}},
		{name: "removed from Slurm", have: []llmflow.RoleGrant{slurm("a", "member", "", "t"), slurm("a", "team_admin", "", "t")},
			users: []llmflow.User{active("a")},
			out:   []string{"revoke a member on team t", "revoke a team_admin on team t", "disable-user a"}},
		{name: "removed, hand grant keeps them", have: []llmflow.RoleGrant{slurm("a", "member", "", "t"), hand("a", "viewer", "o", "")},
			users: []llmflow.User{active("a")}, out: []string{"revoke a member on team t"}},
		{name: "hand grants untouched", have: []llmflow.RoleGrant{hand("a", "proxy_admin", "", "")}, users: []llmflow.User{active("a")}},
		{name: "back after the import disabled them", want: want(slurm("a", "member", "", "t")), users: []llmflow.User{disabled("a", "slurm")},
			out: []string{"enable-user a", "grant a member on team t"}},
		{name: "disabled by an admin", want: want(slurm("a", "member", "", "t")), users: []llmflow.User{disabled("a", "")},
			note: "user a is disabled by an admin"},
		{name: "already disabled and gone", have: []llmflow.RoleGrant{slurm("a", "member", "", "t")}, users: []llmflow.User{disabled("a", "slurm")},
			out: []string{"revoke a member on team t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, notes := RoleDiff(tc.want, tc.have, tc.users)
			var got []string
			for _, c := range cs {
				s := c.Op.String() + " " + c.User
				if c.Op == llmflow.OpGrant || c.Op == llmflow.OpRevoke {
					s = c.Op.String() + " " + c.User + " " + grantText(c.Grant)
				}
				got = append(got, s)
			}
			if d := cmp.Diff(tc.out, got); d != "" {
				t.Errorf("changes (-want +got):\n%s", d)
			}
			if tc.note != "" && !strings.Contains(strings.Join(notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", notes, tc.note)
			}
		})
	}
}

// A source that did not read coordinators never takes roles away.
func TestSyncerRolesNeedCoordinators(t *testing.T) {
	tr := roleTree()
	tr.CoordsKnown = false
	rs := &fakeRoles{users: []llmflow.User{{Name: "oli"}}, have: []llmflow.RoleGrant{{User: "oli", Role: "org_admin", Org: "org1", Source: llmflow.SourceSlurm}}}
	rs.sink = &memSink{}
	s := &Syncer{Source: &fakeSource{tree: tr}, Name: "file:x", Sink: rs.sink, Roles: rs}
	res, err := s.Run(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.RoleChanges) != 0 || rs.saved != nil || len(res.RoleNotes) != 1 || !strings.Contains(res.RoleNotes[0], "roles not synced") {
		t.Errorf("changes %v, saved %v, notes %q", res.RoleChanges, rs.saved, res.RoleNotes)
	}
	// With coordinators known, the same run revokes oli's role and grants
	// the members, in the tree's transaction.
	tr.CoordsKnown = true
	res, err = s.Run(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range res.RoleChanges {
		lines = append(lines, RoleChangeString(c))
	}
	got := strings.Join(lines, "\n")
	for _, w := range []string{"user+       user     ann (Slurm user gaining a role)", "role+       role     ann: member on team lab-a",
		"role-       role     oli: org_admin on organisation org1 (no longer in Slurm)", "disabled    user     oli"} {
		if !strings.Contains(got, w) {
			t.Errorf("changes lack %q:\n%s", w, got)
		}
	}
	if len(rs.saved) != len(res.RoleChanges) || res.Run.Outcome != "applied" {
		t.Errorf("saved %d of %d changes, outcome %s", len(rs.saved), len(res.RoleChanges), res.Run.Outcome)
	}
}

type fakeRoles struct {
	users []llmflow.User
	have  []llmflow.RoleGrant
	saved []llmflow.RoleChange
	sink  *memSink
}

func (f *fakeRoles) Users(context.Context) ([]llmflow.User, error) { return f.users, nil }
func (f *fakeRoles) Roles(_ context.Context, user string) ([]llmflow.RoleGrant, error) {
	return f.have, nil
}
func (f *fakeRoles) SaveSyncRoles(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, cs []llmflow.RoleChange) (int64, error) {
	f.saved = cs
	return f.sink.SaveSync(ctx, next, run)
}

// BenchmarkRolesScale: the roles of the scale tree (10,000 accounts,
// 100,000 user associations, ~400 coordinators) and their diff against a
// store holding them already (a sync that changes nothing).
func BenchmarkRolesScale(b *testing.B) {
	tr := genTree()
	accts, err := Map(tr)
	if err != nil {
		b.Fatal(err)
	}
	want, _ := Roles(tr, accts)
	have := make([]llmflow.RoleGrant, len(want))
	users := map[string]bool{}
	var us []llmflow.User
	for i, w := range want {
		have[i] = w.Grant
		if !users[w.Grant.User] {
			users[w.Grant.User] = true
			us = append(us, llmflow.User{Name: w.Grant.User})
		}
	}
	b.Logf("%d grants, %d users", len(want), len(us))
	for b.Loop() {
		w, _ := Roles(tr, accts)
		if cs, _ := RoleDiff(w, have, us); len(cs) != 0 {
			b.Fatalf("%d changes", len(cs))
		}
	}
}
