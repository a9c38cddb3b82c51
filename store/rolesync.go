package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// roleBatch bounds the rows of one multi-row INSERT of the role sync (6
// parameters a row: far below SQLite's and PostgreSQL's limits).
const roleBatch = 500

// applyRoleChanges applies the Slurm import's changes of users and roles
// (slurmsync.RoleDiff) inside the import's transaction, in the order the
// diff's changes depend on: users created, users re-enabled, roles
// granted, roles revoked, users disabled. Users are created and roles
// granted with multi-row INSERTs (a first import creates a user and a
// member grant for every Slurm user).
//
// Every statement re-checks what the diff assumed, so an admin acting
// between the import's read and this transaction wins: a grant never
// replaces a hand grant, a revocation removes only a grant with source
// 'slurm', a user is disabled only while it holds no role granted by hand,
// and only a user the import disabled is re-enabled. The admin generation
// is bumped when a row changed: gateways read their cached principals
// again at the next admin request, so a removed coordinator's token
// answers 403 at once.
func (a *sqlDB) applyRoleChanges(ctx context.Context, q querier, cs []llmflow.RoleChange, at time.Time) error {
	byOp := map[llmflow.RoleOp][]llmflow.RoleChange{}
	for _, c := range cs {
		if c.Op < llmflow.OpCreateUser || c.Op > llmflow.OpDisableUser {
			return fmt.Errorf("role sync: unknown change %d for %s", c.Op, c.User)
		}
		byOp[c.Op] = append(byOp[c.Op], c)
	}
	var changed int64
	// insert runs a multi-row INSERT of rows built by row, in batches.
	insert := func(what, head, tuple, tail string, cs []llmflow.RoleChange, row func(c llmflow.RoleChange) []any) error {
		for lo := 0; lo < len(cs); lo += roleBatch {
			hi := min(lo+roleBatch, len(cs))
			var sb strings.Builder
			sb.WriteString(head)
			args := make([]any, 0, (hi-lo)*6)
			for i, c := range cs[lo:hi] {
				if i > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(tuple)
				args = append(args, row(c)...)
			}
			sb.WriteString(tail)
			n, err := q.exec(ctx, sb.String(), args...)
			if err != nil {
				return fmt.Errorf("role sync: %s: %w", what, err)
			}
			changed += n
		}
		return nil
	}
	err := insert("create users", `INSERT INTO admin_users (name, org, created_at, source) VALUES `, `(?, '', ?, 'slurm')`,
		` ON CONFLICT (name) DO NOTHING`, byOp[llmflow.OpCreateUser],
		func(c llmflow.RoleChange) []any { return []any{c.User, a.time(at)} })
	if err != nil {
		return err
	}
	for _, c := range byOp[llmflow.OpEnableUser] {
		n, err := q.exec(ctx, `UPDATE admin_users SET disabled_at = NULL, disabled_by = '' WHERE name = ? AND disabled_by = 'slurm'`, c.User)
		if err != nil {
			return fmt.Errorf("role sync: enable %s: %w", c.User, err)
		}
		changed += n
	}
	// The users exist: created above or before, and users are never deleted.
	err = insert("grant roles", `INSERT INTO admin_roles (user_name, role, org, team, created_at, source) VALUES `, `(?, ?, ?, ?, ?, 'slurm')`,
		` ON CONFLICT (user_name, role, org, team) DO NOTHING`, byOp[llmflow.OpGrant],
		func(c llmflow.RoleChange) []any {
			return []any{c.User, c.Grant.Role, c.Grant.Org, c.Grant.Team, a.time(at)}
		})
	if err != nil {
		return err
	}
	for _, c := range byOp[llmflow.OpRevoke] {
		n, err := q.exec(ctx, `DELETE FROM admin_roles WHERE user_name = ? AND role = ? AND org = ? AND team = ? AND source = 'slurm'`,
			c.User, c.Grant.Role, c.Grant.Org, c.Grant.Team)
		if err != nil {
			return fmt.Errorf("role sync: revoke %s of %s: %w", c.Grant.Role, c.User, err)
		}
		changed += n
	}
	for _, c := range byOp[llmflow.OpDisableUser] {
		n, err := q.exec(ctx, `UPDATE admin_users SET disabled_at = ?, disabled_by = 'slurm'
WHERE name = ? AND disabled_at IS NULL AND NOT EXISTS (SELECT 1 FROM admin_roles WHERE user_name = ? AND source <> 'slurm')`,
			a.time(at), c.User, c.User)
		if err == nil && n > 0 {
			_, err = q.exec(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE user_name = ? AND revoked_at IS NULL`, a.time(at), c.User)
		}
		if err != nil {
			return fmt.Errorf("role sync: disable %s: %w", c.User, err)
		}
		changed += n
	}
	if changed == 0 {
		return nil
	}
	return bump(ctx, q)
}
