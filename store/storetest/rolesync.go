package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

// RoleSyncStore is what RunRoleSync tests: the Slurm import's changes of
// users and roles, applied with the tree in one transaction.
type RoleSyncStore interface {
	AdminStore
	Accounts(ctx context.Context) (llmflow.Accounts, error)
	SyncRuns(ctx context.Context, limit int) ([]llmflow.SyncRun, error)
	// SaveSyncRoles is SaveSync applying role changes in the same
	// transaction; a row changed bumps the admin generation.
	SaveSyncRoles(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, changes []llmflow.RoleChange) (int64, error)
}

// RunRoleSync is the contract of the role sync: Slurm grants are recorded
// as such, hand grants are never removed or replaced, a user removed from
// Slurm is disabled (tokens revoked) unless a hand grant keeps them, only
// a user the import disabled is re-enabled, and every change that moves a
// row bumps the admin generation (cached principals are read again).
func RunRoleSync(t *testing.T, open func(t *testing.T) RoleSyncStore) {
	s := open(t)
	ctx := t.Context()
	at := base.Add(time.Hour)
	run := llmflow.SyncRun{Started: at, Finished: at, Source: "test", Outcome: "applied"}
	gen := func() int64 {
		t.Helper()
		g, err := s.AdminGeneration(ctx)
		mustNil(t, err)
		return g
	}
	apply := func(what string, next llmflow.Accounts, bumps bool, cs ...llmflow.RoleChange) {
		t.Helper()
		before := gen()
		if _, err := s.SaveSyncRoles(ctx, next, run, cs); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if moved := gen() != before; moved != bumps {
			t.Errorf("%s: generation moved %v, want %v", what, moved, bumps)
		}
	}
	grant := func(user, role, org, team string) llmflow.RoleChange {
		return llmflow.RoleChange{Op: llmflow.OpGrant, User: user, Grant: llmflow.RoleGrant{User: user, Role: role, Org: org, Team: team}}
	}
	revoke := func(c llmflow.RoleChange) llmflow.RoleChange { c.Op = llmflow.OpRevoke; return c }
	op := func(o llmflow.RoleOp, user string) llmflow.RoleChange { return llmflow.RoleChange{Op: o, User: user} }
	roles := func(user string) []llmflow.RoleGrant {
		t.Helper()
		rs, err := s.Roles(ctx, user)
		mustNil(t, err)
		for i := range rs {
			rs[i].CreatedAt = time.Time{}
		}
		return rs
	}
	user := func(name string) llmflow.User {
		t.Helper()
		u, err := s.User(ctx, name)
		mustNil(t, err)
		return u
	}

	// A hand-made user with a hand grant that Slurm also implies.
	mustNil(t, s.CreateUser(ctx, llmflow.User{Name: "hand", CreatedAt: base}))
	mustNil(t, s.GrantRole(ctx, llmflow.RoleGrant{User: "hand", Role: "team_admin", Team: "lab-a", CreatedAt: base}))

	tree := llmflow.Accounts{{Name: "org1", Kind: llmflow.KindOrg, Source: "slurm"}, {Name: "lab-a", Kind: llmflow.KindTeam, Parent: "org1", Source: "slurm"}}
	apply("first import", tree, true,
		op(llmflow.OpCreateUser, "coord"), grant("coord", "org_admin", "org1", ""), grant("coord", "member", "", "lab-a"),
		grant("hand", "team_admin", "", "lab-a"), grant("hand", "member", "", "lab-a"))
	if accts, err := s.Accounts(ctx); err != nil || len(accts) != 2 {
		t.Fatalf("tree saved with the roles: %v %v", accts, err)
	}
	if u := user("coord"); u.Source != llmflow.SourceSlurm || !u.Active() || !u.CreatedAt.Equal(at) {
		t.Errorf("created user %+v", u)
	}
	want := []llmflow.RoleGrant{
		{User: "coord", Role: "member", Team: "lab-a", Source: llmflow.SourceSlurm},
		{User: "coord", Role: "org_admin", Org: "org1", Source: llmflow.SourceSlurm},
	}
	if d := cmp.Diff(want, roles("coord")); d != "" {
		t.Errorf("coord's roles (-want +got):\n%s", d)
	}
	want = []llmflow.RoleGrant{
		{User: "hand", Role: "member", Team: "lab-a", Source: llmflow.SourceSlurm},
		{User: "hand", Role: "team_admin", Team: "lab-a", Source: llmflow.SourceAdmin}, // kept as granted by hand
	}
	if d := cmp.Diff(want, roles("hand")); d != "" {
		t.Errorf("hand's roles (-want +got):\n%s", d)
	}

	// The same changes again change nothing: no bump.
	apply("again", nil, false, op(llmflow.OpCreateUser, "coord"), grant("coord", "org_admin", "org1", ""))

	// A revocation never removes a hand grant; a user holding one is not
	// disabled.
	apply("revoke hand grant", nil, true, revoke(grant("hand", "team_admin", "", "lab-a")), revoke(grant("hand", "member", "", "lab-a")),
		op(llmflow.OpDisableUser, "hand"))
	if d := cmp.Diff(want[1:], roles("hand")); d != "" {
		t.Errorf("hand's roles after Slurm dropped them (-want +got):\n%s", d)
	}
	if !user("hand").Active() {
		t.Error("a user with a hand grant was disabled")
	}

	// Removed from Slurm: roles go, the user is disabled, tokens revoked.
	mustNil(t, s.CreateAdminToken(ctx, adminToken("coord", "tok_c", base)))
	apply("coordinator removed", nil, true, revoke(grant("coord", "org_admin", "org1", "")), revoke(grant("coord", "member", "", "lab-a")),
		op(llmflow.OpDisableUser, "coord"))
	if rs := roles("coord"); len(rs) != 0 {
		t.Errorf("roles left: %v", rs)
	}
	if u := user("coord"); u.Active() || u.DisabledBy != llmflow.SourceSlurm || !u.DisabledAt.Equal(at) {
		t.Errorf("disabled user %+v", u)
	}
	toks, err := s.AdminTokens(ctx, "coord")
	mustNil(t, err)
	if len(toks) != 1 || toks[0].Active() {
		t.Errorf("tokens %+v", toks)
	}

	// Back in Slurm: re-enabled, the old token stays revoked.
	apply("back", nil, true, op(llmflow.OpEnableUser, "coord"), grant("coord", "member", "", "lab-a"))
	if u := user("coord"); !u.Active() || u.DisabledBy != "" {
		t.Errorf("re-enabled user %+v", u)
	}
	if toks, _ := s.AdminTokens(ctx, "coord"); toks[0].Active() {
		t.Error("re-enabling restored a revoked token")
	}

	// A hand grant of a role Slurm granted makes it a hand grant: the
	// import no longer removes it.
	mustNil(t, s.GrantRole(ctx, llmflow.RoleGrant{User: "coord", Role: "member", Team: "lab-a", CreatedAt: base}))
	apply("revoke after hand grant", nil, false, revoke(grant("coord", "member", "", "lab-a")))
	if rs := roles("coord"); len(rs) != 1 || rs[0].Source != llmflow.SourceAdmin {
		t.Errorf("roles %+v", rs)
	}

	// A user an admin disabled is not re-enabled by the import.
	mustNil(t, s.DisableUser(ctx, "coord", base))
	apply("enable a hand-disabled user", nil, false, op(llmflow.OpEnableUser, "coord"))
	if u := user("coord"); u.Active() || u.DisabledBy != "" {
		t.Errorf("hand-disabled user %+v", u)
	}

	runs, err := s.SyncRuns(ctx, 100)
	mustNil(t, err)
	if len(runs) != 7 {
		t.Errorf("%d runs recorded, want one per apply (7)", len(runs))
	}
}
