package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// The delegated-administration tables (users, admin tokens, roles, team
// model lists, admin accounts, audit) are small and read rarely. Every
// change of users, tokens, roles, team model lists or admin accounts bumps
// admin_state.generation in the same transaction.

// userExists fails with ENOTFOUND when there is no user name.
func userExists(ctx context.Context, q querier, name string) error {
	rows, err := q.query(ctx, `SELECT count(*) FROM admin_users WHERE name = ?`, name)
	if err != nil {
		return err
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n == 0 {
		return &llmflow.Error{Code: llmflow.ENOTFOUND, Message: fmt.Sprintf("no user %q", name), Err: llmflow.ErrNotFound}
	}
	return nil
}

func bump(ctx context.Context, q querier) error {
	_, err := q.exec(ctx, `UPDATE admin_state SET generation = generation + 1 WHERE id = 1`)
	return err
}

// AdminGeneration returns the counter every change of users, tokens,
// roles, team model lists or admin accounts increments: a cached principal
// (or tree, or model list) read at the same generation is still right.
func (a *sqlDB) AdminGeneration(ctx context.Context) (int64, error) {
	var g int64
	if err := a.one(ctx, "admin generation", `SELECT generation FROM admin_state WHERE id = 1`, nil, &g); err != nil {
		return 0, err
	}
	return g, nil
}

// CreateUser stores u; ECONFLICT when the name is taken (disabled or not).
func (a *sqlDB) CreateUser(ctx context.Context, u llmflow.User) error {
	return a.tx(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO admin_users (name, org, created_at, disabled_at) VALUES (?, ?, ?, ?)`,
			u.Name, u.Org, a.time(u.CreatedAt), a.nullTime(u.DisabledAt))
		if err != nil {
			if a.unique(err) {
				return &llmflow.Error{Code: llmflow.ECONFLICT, Message: fmt.Sprintf("user %q already exists", u.Name), Param: "name", Err: err}
			}
			return fmt.Errorf("create user: %w", err)
		}
		return bump(ctx, q)
	})
}

const userColumns = `name, org, created_at, disabled_at, source, disabled_by`

func scanUser(r interface{ Scan(...any) error }) (llmflow.User, error) {
	var u llmflow.User
	err := r.Scan(&u.Name, &u.Org, dbTime{&u.CreatedAt}, dbTime{&u.DisabledAt}, &u.Source, &u.DisabledBy)
	return u, err
}

// User returns the named user, or llmflow.ErrNotFound.
func (a *sqlDB) User(ctx context.Context, name string) (llmflow.User, error) {
	var u llmflow.User
	err := a.one(ctx, "user", `SELECT `+userColumns+` FROM admin_users WHERE name = ?`, []any{name},
		&u.Name, &u.Org, dbTime{&u.CreatedAt}, dbTime{&u.DisabledAt}, &u.Source, &u.DisabledBy)
	return u, err
}

// Users returns every user, by name.
func (a *sqlDB) Users(ctx context.Context) ([]llmflow.User, error) {
	rows, err := a.read.query(ctx, `SELECT `+userColumns+` FROM admin_users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.User, error) { return scanUser(rows) })
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	return out, nil
}

// DisableUser marks the user disabled and revokes their active tokens at
// the same time, in one transaction; disabling a disabled user keeps the
// first time. llmflow.ErrNotFound for an unknown user.
func (a *sqlDB) DisableUser(ctx context.Context, name string, at time.Time) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "disable time is required"}
	}
	return a.tx(ctx, func(q querier) error {
		// disabled by hand: the Slurm import leaves the user disabled
		n, err := q.exec(ctx, `UPDATE admin_users SET disabled_at = COALESCE(disabled_at, ?), disabled_by = '' WHERE name = ?`, a.time(at), name)
		if err != nil {
			return fmt.Errorf("disable user: %w", err)
		}
		if n == 0 {
			return llmflow.ErrNotFound
		}
		if _, err := q.exec(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE user_name = ? AND revoked_at IS NULL`, a.time(at), name); err != nil {
			return fmt.Errorf("disable user: revoke tokens: %w", err)
		}
		return bump(ctx, q)
	})
}

// CreateAdminToken stores t; ECONFLICT for a taken ID or hash, ENOTFOUND
// for an unknown user.
func (a *sqlDB) CreateAdminToken(ctx context.Context, t llmflow.AdminToken) error {
	if t.ID == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "token id is required", Param: "id"}
	}
	return a.tx(ctx, func(q querier) error {
		if err := userExists(ctx, q, t.User); err != nil {
			return fmt.Errorf("create admin token: %w", err)
		}
		_, err := q.exec(ctx, `INSERT INTO admin_tokens (id, user_name, hash, hint, name, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.User, t.Hash[:], t.Hint, t.Name, a.time(t.CreatedAt), a.nullTime(t.RevokedAt))
		if err != nil {
			if a.unique(err) {
				return &llmflow.Error{Code: llmflow.ECONFLICT, Message: "an admin token with the same id or secret exists", Err: err}
			}
			return fmt.Errorf("create admin token: %w", err)
		}
		return bump(ctx, q)
	})
}

const tokenColumns = `id, user_name, hash, hint, name, created_at, revoked_at`

func scanToken(r interface{ Scan(...any) error }) (llmflow.AdminToken, error) {
	var t llmflow.AdminToken
	var hash []byte
	if err := r.Scan(&t.ID, &t.User, &hash, &t.Hint, &t.Name, dbTime{&t.CreatedAt}, dbTime{&t.RevokedAt}); err != nil {
		return t, err
	}
	if len(hash) != len(t.Hash) {
		return t, fmt.Errorf("admin token %s: hash has %d bytes", t.ID, len(hash))
	}
	copy(t.Hash[:], hash)
	return t, nil
}

// AdminTokenByHash returns the token whose secret hashes to hash, revoked
// or not, or llmflow.ErrNotFound.
func (a *sqlDB) AdminTokenByHash(ctx context.Context, hash [32]byte) (llmflow.AdminToken, error) {
	ts, err := a.tokens(ctx, `WHERE hash = ?`, hash[:])
	if err != nil {
		return llmflow.AdminToken{}, err
	}
	if len(ts) == 0 {
		return llmflow.AdminToken{}, llmflow.ErrNotFound
	}
	return ts[0], nil
}

// AdminTokens returns the user's tokens, revoked ones included, by
// creation time.
func (a *sqlDB) AdminTokens(ctx context.Context, user string) ([]llmflow.AdminToken, error) {
	return a.tokens(ctx, `WHERE user_name = ?`, user)
}

func (a *sqlDB) tokens(ctx context.Context, where string, arg any) ([]llmflow.AdminToken, error) {
	rows, err := a.read.query(ctx, `SELECT `+tokenColumns+` FROM admin_tokens `+where+` ORDER BY created_at, id`, arg)
	if err != nil {
		return nil, fmt.Errorf("admin tokens: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.AdminToken, error) { return scanToken(rows) })
	if err != nil {
		return nil, fmt.Errorf("admin tokens: %w", err)
	}
	return out, nil
}

// RevokeAdminToken revokes the user's token id (keeping the first time
// when it is revoked already); llmflow.ErrNotFound when the user has no
// such token.
func (a *sqlDB) RevokeAdminToken(ctx context.Context, user, id string, at time.Time) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "revocation time is required"}
	}
	return a.tx(ctx, func(q querier) error {
		n, err := q.exec(ctx, `UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND user_name = ?`, a.time(at), id, user)
		if err != nil {
			return fmt.Errorf("revoke admin token: %w", err)
		}
		if n == 0 {
			return llmflow.ErrNotFound
		}
		return bump(ctx, q)
	})
}

// GrantRole stores g, granted by hand (idempotent: a role held already is
// kept with its first time; a role the Slurm import granted becomes a
// hand grant, which the import never removes); ENOTFOUND for an unknown
// user.
func (a *sqlDB) GrantRole(ctx context.Context, g llmflow.RoleGrant) error {
	return a.tx(ctx, func(q querier) error {
		if err := userExists(ctx, q, g.User); err != nil {
			return fmt.Errorf("grant role: %w", err)
		}
		_, err := q.exec(ctx, `INSERT INTO admin_roles (user_name, role, org, team, created_at, source) VALUES (?, ?, ?, ?, ?, 'admin')
ON CONFLICT (user_name, role, org, team) DO UPDATE SET source = 'admin'`, g.User, g.Role, g.Org, g.Team, a.time(g.CreatedAt))
		if err != nil {
			return fmt.Errorf("grant role: %w", err)
		}
		return bump(ctx, q)
	})
}

// RevokeRole removes the grant (CreatedAt ignored); llmflow.ErrNotFound
// when the user does not hold it.
func (a *sqlDB) RevokeRole(ctx context.Context, g llmflow.RoleGrant) error {
	return a.tx(ctx, func(q querier) error {
		n, err := q.exec(ctx, `DELETE FROM admin_roles WHERE user_name = ? AND role = ? AND org = ? AND team = ?`, g.User, g.Role, g.Org, g.Team)
		if err != nil {
			return fmt.Errorf("revoke role: %w", err)
		}
		if n == 0 {
			return llmflow.ErrNotFound
		}
		return bump(ctx, q)
	})
}

// Roles returns the roles of user ("" for every user's), by user, role,
// organisation and team.
func (a *sqlDB) Roles(ctx context.Context, user string) ([]llmflow.RoleGrant, error) {
	q, args := `SELECT user_name, role, org, team, created_at, source FROM admin_roles`, []any(nil)
	if user != "" {
		q, args = q+` WHERE user_name = ?`, []any{user}
	}
	rows, err := a.read.query(ctx, q+` ORDER BY user_name, role, org, team`, args...)
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.RoleGrant, error) {
		var g llmflow.RoleGrant
		err := rows.Scan(&g.User, &g.Role, &g.Org, &g.Team, dbTime{&g.CreatedAt}, &g.Source)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	return out, nil
}

// SetTeamModels sets the model list of a team; an empty list removes it
// (the team may use every model).
func (a *sqlDB) SetTeamModels(ctx context.Context, team string, models []string) error {
	return a.tx(ctx, func(q querier) error {
		if len(models) == 0 {
			if _, err := q.exec(ctx, `DELETE FROM team_models WHERE team = ?`, team); err != nil {
				return fmt.Errorf("set team models: %w", err)
			}
			return bump(ctx, q)
		}
		b, _ := json.Marshal(models)
		_, err := q.exec(ctx, `INSERT INTO team_models (team, models) VALUES (?, ?)
ON CONFLICT (team) DO UPDATE SET models = excluded.models`, team, string(b))
		if err != nil {
			return fmt.Errorf("set team models: %w", err)
		}
		return bump(ctx, q)
	})
}

// TeamModels returns every team's model list.
func (a *sqlDB) TeamModels(ctx context.Context) (map[string][]string, error) {
	rows, err := a.read.query(ctx, `SELECT team, models FROM team_models ORDER BY team`)
	if err != nil {
		return nil, fmt.Errorf("team models: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var team, models string
		if err := rows.Scan(&team, &models); err != nil {
			return nil, fmt.Errorf("team models: %w", err)
		}
		var ms []string
		if err := json.Unmarshal([]byte(models), &ms); err != nil {
			return nil, fmt.Errorf("team models of %s: %w", team, err)
		}
		out[team] = ms
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("team models: %w", err)
	}
	return out, nil
}

// PutAdminAccount creates or replaces the admin change of an account
// (keeping its place in creation order).
func (a *sqlDB) PutAdminAccount(ctx context.Context, acc llmflow.AdminAccount) error {
	return a.tx(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO admin_accounts (name, kind, parent, created, disabled, shares, at) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, parent = excluded.parent, created = excluded.created,
disabled = excluded.disabled, shares = excluded.shares, at = excluded.at`,
			acc.Name, int(acc.Kind), acc.Parent, acc.Created, acc.Disabled, acc.Shares, a.time(acc.At))
		if err != nil {
			return fmt.Errorf("put admin account: %w", err)
		}
		return bump(ctx, q)
	})
}

// AdminAccounts returns the admin account changes in creation order.
func (a *sqlDB) AdminAccounts(ctx context.Context) ([]llmflow.AdminAccount, error) {
	rows, err := a.read.query(ctx, `SELECT name, kind, parent, created, disabled, shares, at FROM admin_accounts ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("admin accounts: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.AdminAccount, error) {
		var acc llmflow.AdminAccount
		var kind int
		err := rows.Scan(&acc.Name, &kind, &acc.Parent, &acc.Created, &acc.Disabled, &acc.Shares, dbTime{&acc.At})
		acc.Kind = llmflow.Kind(kind)
		return acc, err
	})
	if err != nil {
		return nil, fmt.Errorf("admin accounts: %w", err)
	}
	return out, nil
}

// AppendAudit stores an audit entry (its ID is assigned).
func (a *sqlDB) AppendAudit(ctx context.Context, e llmflow.AuditEntry) error {
	return a.tx(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO audit (time, actor, action, target, org, team, before, after, remote) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.time(e.Time), e.Actor, e.Action, e.Target, e.Org, e.Team, e.Before, e.After, e.Remote)
		if err != nil {
			return fmt.Errorf("append audit: %w", err)
		}
		return nil
	})
}

// Audit returns the entries f selects, newest first.
func (a *sqlDB) Audit(ctx context.Context, f llmflow.AuditFilter) ([]llmflow.AuditEntry, error) {
	var where []string
	var args []any
	if !f.From.IsZero() {
		where, args = append(where, "time >= ?"), append(args, a.time(f.From))
	}
	if !f.To.IsZero() {
		where, args = append(where, "time < ?"), append(args, a.time(f.To))
	}
	if f.Actor != "" {
		where, args = append(where, "actor = ?"), append(args, f.Actor)
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q := `SELECT id, time, actor, action, target, org, team, before, after, remote FROM audit`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	rows, err := a.read.query(ctx, q+` ORDER BY id DESC LIMIT `+strconv.Itoa(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.AuditEntry, error) {
		var e llmflow.AuditEntry
		err := rows.Scan(&e.ID, dbTime{&e.Time}, &e.Actor, &e.Action, &e.Target, &e.Org, &e.Team, &e.Before, &e.After, &e.Remote)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}
