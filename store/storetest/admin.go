package storetest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

// AdminStore is what RunAdmin tests: users, admin tokens, roles, team
// model lists, admin account changes and the audit trail of delegated
// administration.
type AdminStore interface {
	// AdminGeneration increases with every change of users, tokens,
	// roles, team model lists or admin accounts.
	AdminGeneration(ctx context.Context) (int64, error)
	// CreateUser stores a user; ECONFLICT when the name is taken.
	CreateUser(ctx context.Context, u llmflow.User) error
	// User returns a user or llmflow.ErrNotFound.
	User(ctx context.Context, name string) (llmflow.User, error)
	// Users returns every user by name.
	Users(ctx context.Context) ([]llmflow.User, error)
	// DisableUser disables a user and revokes their tokens, atomically;
	// the first time is kept; ErrNotFound for an unknown user.
	DisableUser(ctx context.Context, name string, at time.Time) error
	// CreateAdminToken stores a token; ECONFLICT for a taken ID or hash,
	// ENOTFOUND for an unknown user.
	CreateAdminToken(ctx context.Context, t llmflow.AdminToken) error
	// AdminTokenByHash returns a token, revoked or not, or ErrNotFound.
	AdminTokenByHash(ctx context.Context, hash [32]byte) (llmflow.AdminToken, error)
	// AdminTokens returns a user's tokens by creation time.
	AdminTokens(ctx context.Context, user string) ([]llmflow.AdminToken, error)
	// RevokeAdminToken revokes a user's token; ErrNotFound when the user
	// has no such token.
	RevokeAdminToken(ctx context.Context, user, id string, at time.Time) error
	// GrantRole stores a grant, idempotently; ENOTFOUND for an unknown user.
	GrantRole(ctx context.Context, g llmflow.RoleGrant) error
	// RevokeRole removes a grant; ErrNotFound when not held.
	RevokeRole(ctx context.Context, g llmflow.RoleGrant) error
	// Roles returns a user's grants ("" for everyone's).
	Roles(ctx context.Context, user string) ([]llmflow.RoleGrant, error)
	// SetTeamModels sets a team's model list; empty removes it.
	SetTeamModels(ctx context.Context, team string, models []string) error
	// TeamModels returns every team's list.
	TeamModels(ctx context.Context) (map[string][]string, error)
	// PutAdminAccount creates or replaces an account change.
	PutAdminAccount(ctx context.Context, a llmflow.AdminAccount) error
	// AdminAccounts returns the changes in creation order.
	AdminAccounts(ctx context.Context) ([]llmflow.AdminAccount, error)
	// AppendAudit stores an entry.
	AppendAudit(ctx context.Context, e llmflow.AuditEntry) error
	// Audit returns entries newest first.
	Audit(ctx context.Context, f llmflow.AuditFilter) ([]llmflow.AuditEntry, error)
}

// RunAdmin is the contract of AdminStore. open must return a new, empty
// store each time it is called.
func RunAdmin(t *testing.T, open func(t *testing.T) AdminStore) {
	t.Run("Users", func(t *testing.T) { testUsers(t, open(t)) })
	t.Run("Tokens", func(t *testing.T) { testAdminTokens(t, open(t)) })
	t.Run("DisableRevokesTokens", func(t *testing.T) { testDisableUser(t, open(t)) })
	t.Run("Roles", func(t *testing.T) { testRoles(t, open(t)) })
	t.Run("Generation", func(t *testing.T) { testGeneration(t, open(t)) })
	t.Run("TeamModels", func(t *testing.T) { testTeamModels(t, open(t)) })
	t.Run("AdminAccounts", func(t *testing.T) { testAdminAccounts(t, open(t)) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, open(t)) })
	t.Run("ConcurrentGrants", func(t *testing.T) { testConcurrentGrants(t, open(t)) })
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testUsers(t *testing.T, s AdminStore) {
	ctx := t.Context()
	if us, err := s.Users(ctx); err != nil || us != nil {
		t.Fatalf("empty: %v %v", us, err)
	}
	_, err := s.User(ctx, "alice")
	checkCode(t, err, llmflow.ENOTFOUND)
	alice := llmflow.User{Name: "alice", Org: "etabA", CreatedAt: base, Source: llmflow.SourceAdmin}
	bob := llmflow.User{Name: "bob", CreatedAt: base.Add(time.Second), Source: llmflow.SourceAdmin}
	mustNil(t, s.CreateUser(ctx, bob))
	mustNil(t, s.CreateUser(ctx, alice))
	checkCode(t, s.CreateUser(ctx, llmflow.User{Name: "alice", CreatedAt: base}), llmflow.ECONFLICT)
	got, err := s.User(ctx, "alice")
	mustNil(t, err)
	if diff := cmp.Diff(alice, got); diff != "" {
		t.Errorf("user (-want +got):\n%s", diff)
	}
	checkUTC(t, "created_at", got.CreatedAt)
	us, err := s.Users(ctx)
	mustNil(t, err)
	if diff := cmp.Diff([]llmflow.User{alice, bob}, us); diff != "" {
		t.Errorf("users by name (-want +got):\n%s", diff)
	}
	checkCode(t, s.DisableUser(ctx, "carol", base), llmflow.ENOTFOUND)
	checkCode(t, s.DisableUser(ctx, "alice", time.Time{}), llmflow.EINVALID)
}

func adminToken(user, id string, created time.Time) llmflow.AdminToken {
	secret := "llma-" + id
	return llmflow.AdminToken{ID: id, User: user, Hash: sha256.Sum256([]byte(secret)), Hint: "llma-" + id[:2] + "…", Name: "laptop " + id, CreatedAt: created}
}

func testAdminTokens(t *testing.T, s AdminStore) {
	ctx := t.Context()
	mustNil(t, s.CreateUser(ctx, llmflow.User{Name: "alice", CreatedAt: base}))
	checkCode(t, s.CreateAdminToken(ctx, adminToken("nobody", "tok_1", base)), llmflow.ENOTFOUND)
	t1, t2 := adminToken("alice", "tok_1", base), adminToken("alice", "tok_2", base.Add(time.Minute))
	mustNil(t, s.CreateAdminToken(ctx, t2))
	mustNil(t, s.CreateAdminToken(ctx, t1))
	checkCode(t, s.CreateAdminToken(ctx, t1), llmflow.ECONFLICT)
	same := adminToken("alice", "tok_3", base)
	same.Hash = t1.Hash
	checkCode(t, s.CreateAdminToken(ctx, same), llmflow.ECONFLICT)
	checkCode(t, s.CreateAdminToken(ctx, llmflow.AdminToken{User: "alice"}), llmflow.EINVALID)

	got, err := s.AdminTokenByHash(ctx, t1.Hash)
	mustNil(t, err)
	if diff := cmp.Diff(t1, got); diff != "" {
		t.Errorf("by hash (-want +got):\n%s", diff)
	}
	_, err = s.AdminTokenByHash(ctx, sha256.Sum256([]byte("llma-other")))
	checkCode(t, err, llmflow.ENOTFOUND)
	ts, err := s.AdminTokens(ctx, "alice")
	mustNil(t, err)
	if diff := cmp.Diff([]llmflow.AdminToken{t1, t2}, ts); diff != "" {
		t.Errorf("by creation (-want +got):\n%s", diff)
	}

	// revoke: only the user's own token id; the first time stays
	checkCode(t, s.RevokeAdminToken(ctx, "bob", "tok_1", base), llmflow.ENOTFOUND)
	checkCode(t, s.RevokeAdminToken(ctx, "alice", "tok_9", base), llmflow.ENOTFOUND)
	checkCode(t, s.RevokeAdminToken(ctx, "alice", "tok_1", time.Time{}), llmflow.EINVALID)
	at := base.Add(time.Hour)
	mustNil(t, s.RevokeAdminToken(ctx, "alice", "tok_1", at))
	mustNil(t, s.RevokeAdminToken(ctx, "alice", "tok_1", at.Add(time.Hour)))
	got, err = s.AdminTokenByHash(ctx, t1.Hash)
	mustNil(t, err)
	if !got.RevokedAt.Equal(at) || got.Active() {
		t.Errorf("revoked at %v, want %v", got.RevokedAt, at)
	}
	checkUTC(t, "revoked_at", got.RevokedAt)
}

func testDisableUser(t *testing.T, s AdminStore) {
	ctx := t.Context()
	mustNil(t, s.CreateUser(ctx, llmflow.User{Name: "alice", CreatedAt: base}))
	mustNil(t, s.CreateUser(ctx, llmflow.User{Name: "bob", CreatedAt: base}))
	early := base.Add(time.Minute)
	t1, t2, tb := adminToken("alice", "tok_1", base), adminToken("alice", "tok_2", base), adminToken("bob", "tok_b", base)
	t1.RevokedAt = early
	for _, tk := range []llmflow.AdminToken{t1, t2, tb} {
		mustNil(t, s.CreateAdminToken(ctx, tk))
	}
	at := base.Add(time.Hour)
	mustNil(t, s.DisableUser(ctx, "alice", at))
	mustNil(t, s.DisableUser(ctx, "alice", at.Add(time.Hour)))
	u, err := s.User(ctx, "alice")
	mustNil(t, err)
	if !u.DisabledAt.Equal(at) || u.Active() {
		t.Errorf("disabled at %v, want %v", u.DisabledAt, at)
	}
	ts, err := s.AdminTokens(ctx, "alice")
	mustNil(t, err)
	if len(ts) != 2 || !ts[0].RevokedAt.Equal(early) || !ts[1].RevokedAt.Equal(at) {
		t.Errorf("tokens after disable: %+v", ts)
	}
	b, err := s.AdminTokenByHash(ctx, tb.Hash)
	if err != nil || !b.Active() {
		t.Errorf("another user's token: %+v %v", b, err)
	}
}

func testRoles(t *testing.T, s AdminStore) {
	ctx := t.Context()
	mustNil(t, s.CreateUser(ctx, llmflow.User{Name: "alice", CreatedAt: base}))
	mustNil(t, s.CreateUser(ctx, llmflow.User{Name: "bob", CreatedAt: base}))
	checkCode(t, s.GrantRole(ctx, llmflow.RoleGrant{User: "carol", Role: "viewer", Org: "etabA", CreatedAt: base}), llmflow.ENOTFOUND)
	gs := []llmflow.RoleGrant{
		{User: "alice", Role: "org_admin", Org: "etabA", CreatedAt: base, Source: llmflow.SourceAdmin},
		{User: "alice", Role: "viewer", Team: "lab-chem", CreatedAt: base, Source: llmflow.SourceAdmin},
		{User: "bob", Role: "proxy_viewer", CreatedAt: base, Source: llmflow.SourceAdmin},
	}
	for _, g := range gs {
		mustNil(t, s.GrantRole(ctx, g))
	}
	// granting again keeps the first grant time
	again := gs[0]
	again.CreatedAt = base.Add(time.Hour)
	mustNil(t, s.GrantRole(ctx, again))
	got, err := s.Roles(ctx, "alice")
	mustNil(t, err)
	if diff := cmp.Diff(gs[:2], got); diff != "" {
		t.Errorf("alice's roles (-want +got):\n%s", diff)
	}
	all, err := s.Roles(ctx, "")
	mustNil(t, err)
	if diff := cmp.Diff(gs, all); diff != "" {
		t.Errorf("every role (-want +got):\n%s", diff)
	}
	checkCode(t, s.RevokeRole(ctx, llmflow.RoleGrant{User: "alice", Role: "org_admin", Org: "etabB"}), llmflow.ENOTFOUND)
	mustNil(t, s.RevokeRole(ctx, llmflow.RoleGrant{User: "alice", Role: "org_admin", Org: "etabA"}))
	got, err = s.Roles(ctx, "alice")
	mustNil(t, err)
	if diff := cmp.Diff(gs[1:2], got); diff != "" {
		t.Errorf("after revoke (-want +got):\n%s", diff)
	}
	none, err := s.Roles(ctx, "carol")
	if err != nil || none != nil {
		t.Errorf("roles of an unknown user: %v %v", none, err)
	}
}

func testGeneration(t *testing.T, s AdminStore) {
	ctx := t.Context()
	last, err := s.AdminGeneration(ctx)
	mustNil(t, err)
	step := func(what string, err error) {
		t.Helper()
		mustNil(t, err)
		g, err := s.AdminGeneration(ctx)
		mustNil(t, err)
		if g <= last {
			t.Errorf("%s: generation %d, was %d", what, g, last)
		}
		last = g
	}
	step("create user", s.CreateUser(ctx, llmflow.User{Name: "alice", CreatedAt: base}))
	step("create token", s.CreateAdminToken(ctx, adminToken("alice", "tok_1", base)))
	step("grant", s.GrantRole(ctx, llmflow.RoleGrant{User: "alice", Role: "proxy_viewer", CreatedAt: base}))
	step("revoke role", s.RevokeRole(ctx, llmflow.RoleGrant{User: "alice", Role: "proxy_viewer"}))
	step("revoke token", s.RevokeAdminToken(ctx, "alice", "tok_1", base))
	step("disable", s.DisableUser(ctx, "alice", base))
	step("team models", s.SetTeamModels(ctx, "lab-nlp", []string{"m"}))
	step("team models cleared", s.SetTeamModels(ctx, "lab-nlp", nil))
	step("admin account", s.PutAdminAccount(ctx, llmflow.AdminAccount{Name: "etabC", Kind: llmflow.KindOrg, Created: true, At: base}))
	// a failed change does not bump it
	checkCode(t, s.RevokeRole(ctx, llmflow.RoleGrant{User: "alice", Role: "proxy_viewer"}), llmflow.ENOTFOUND)
	if g, _ := s.AdminGeneration(ctx); g != last {
		t.Errorf("failed change moved the generation %d → %d", last, g)
	}
}

func testTeamModels(t *testing.T, s AdminStore) {
	ctx := t.Context()
	m, err := s.TeamModels(ctx)
	if err != nil || len(m) != 0 {
		t.Fatalf("empty: %v %v", m, err)
	}
	mustNil(t, s.SetTeamModels(ctx, "lab-nlp", []string{"m", "llama/3.3"}))
	mustNil(t, s.SetTeamModels(ctx, "lab-chem", []string{"x"}))
	mustNil(t, s.SetTeamModels(ctx, "lab-chem", []string{"y", "z"}))
	mustNil(t, s.SetTeamModels(ctx, "lab-old", []string{"y"}))
	mustNil(t, s.SetTeamModels(ctx, "lab-old", nil))
	m, err = s.TeamModels(ctx)
	mustNil(t, err)
	want := map[string][]string{"lab-nlp": {"m", "llama/3.3"}, "lab-chem": {"y", "z"}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("team models (-want +got):\n%s", diff)
	}
}

func testAdminAccounts(t *testing.T, s AdminStore) {
	ctx := t.Context()
	as, err := s.AdminAccounts(ctx)
	if err != nil || as != nil {
		t.Fatalf("empty: %v %v", as, err)
	}
	want := []llmflow.AdminAccount{
		{Name: "etabC", Kind: llmflow.KindOrg, Created: true, At: base},
		{Name: "lab-c", Kind: llmflow.KindTeam, Parent: "etabC", Created: true, Shares: 2.5, At: base},
		{Name: "lab-nlp", Kind: llmflow.KindTeam, Parent: "etabA", Disabled: true, At: base},
	}
	for _, a := range want {
		mustNil(t, s.PutAdminAccount(ctx, a))
	}
	// replacing keeps the creation order, and replaces the share
	want[0].Disabled, want[0].Shares, want[0].At = true, 3, base.Add(time.Hour)
	mustNil(t, s.PutAdminAccount(ctx, want[0]))
	as, err = s.AdminAccounts(ctx)
	mustNil(t, err)
	if diff := cmp.Diff(want, as); diff != "" {
		t.Errorf("admin accounts (-want +got):\n%s", diff)
	}
}

func testAudit(t *testing.T, s AdminStore) {
	ctx := t.Context()
	es, err := s.Audit(ctx, llmflow.AuditFilter{})
	if err != nil || es != nil {
		t.Fatalf("empty: %v %v", es, err)
	}
	var want []llmflow.AuditEntry
	for i := range 5 {
		e := llmflow.AuditEntry{Time: base.Add(time.Duration(i) * time.Minute), Actor: []string{"master", "alice"}[i%2],
			Action: "key.create", Target: fmt.Sprintf("key key_%d", i), Org: "etabA", Team: "lab-nlp",
			After: fmt.Sprintf(`{"id":"key_%d"}`, i), Remote: "192.0.2.1/32"}
		mustNil(t, s.AppendAudit(ctx, e))
		want = append(want, e)
	}
	es, err = s.Audit(ctx, llmflow.AuditFilter{})
	mustNil(t, err)
	if len(es) != 5 {
		t.Fatalf("%d entries", len(es))
	}
	for i, e := range es {
		w := want[4-i] // newest first
		w.ID = e.ID
		if diff := cmp.Diff(w, e); diff != "" {
			t.Errorf("entry %d (-want +got):\n%s", i, diff)
		}
		if i > 0 && e.ID >= es[i-1].ID {
			t.Errorf("not newest first: %d after %d", e.ID, es[i-1].ID)
		}
	}
	es, err = s.Audit(ctx, llmflow.AuditFilter{From: base.Add(time.Minute), To: base.Add(3 * time.Minute)})
	mustNil(t, err)
	if len(es) != 2 || es[0].Target != "key key_2" || es[1].Target != "key key_1" {
		t.Errorf("range: %+v", es)
	}
	es, err = s.Audit(ctx, llmflow.AuditFilter{Actor: "alice", Limit: 1})
	mustNil(t, err)
	if len(es) != 1 || es[0].Target != "key key_3" {
		t.Errorf("actor and limit: %+v", es)
	}
	es, err = s.Audit(ctx, llmflow.AuditFilter{Actor: "alice", BeforeID: es[0].ID})
	mustNil(t, err)
	if len(es) != 1 || es[0].Target != "key key_1" {
		t.Errorf("next page: %+v", es)
	}
}

// testConcurrentGrants grants from several goroutines at once: every
// grant lands, none fails on a lock.
func testConcurrentGrants(t *testing.T, s AdminStore) {
	ctx := t.Context()
	mustNil(t, s.CreateUser(ctx, llmflow.User{Name: "alice", CreatedAt: base}))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.GrantRole(ctx, llmflow.RoleGrant{User: "alice", Role: "viewer", Team: fmt.Sprintf("team-%02d", i), CreatedAt: base})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		mustNil(t, err)
	}
	gs, err := s.Roles(ctx, "alice")
	if err != nil || len(gs) != 20 {
		t.Fatalf("%d grants, %v", len(gs), err)
	}
}
