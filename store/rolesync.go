package store

import (
	"context"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
)

// applyRoleChanges applies the Slurm import's changes of users and roles
// (slurmsync.RoleDiff) inside the import's transaction. Every statement
// re-checks what the diff assumed, so an admin acting between the import's
// read and this transaction wins: a grant never replaces a hand grant, a
// revocation removes only a grant with source 'slurm', a user is disabled
// only while it holds no role granted by hand, and only a user the import
// disabled is re-enabled. The admin generation is bumped when a row
// changed: gateways read their cached principals again at the next admin
// request, so a removed coordinator's token answers 403 at once.
func (a *adminDB) applyRoleChanges(ctx context.Context, q adminQuerier, cs []llmflow.RoleChange, at time.Time) error {
	changed := int64(0)
	for _, c := range cs {
		var n int64
		var err error
		switch c.Op {
		case llmflow.OpCreateUser:
			n, err = q.exec(ctx, `INSERT INTO admin_users (name, org, created_at, source) VALUES (?, '', ?, 'slurm')
ON CONFLICT (name) DO NOTHING`, c.User, a.time(at))
		case llmflow.OpEnableUser:
			n, err = q.exec(ctx, `UPDATE admin_users SET disabled_at = NULL, disabled_by = '' WHERE name = ? AND disabled_by = 'slurm'`, c.User)
		case llmflow.OpGrant:
			// the user exists: created by an earlier change, and users are
			// never deleted
			n, err = q.exec(ctx, `INSERT INTO admin_roles (user_name, role, org, team, created_at, source) VALUES (?, ?, ?, ?, ?, 'slurm')
ON CONFLICT (user_name, role, org, team) DO NOTHING`, c.User, c.Grant.Role, c.Grant.Org, c.Grant.Team, a.time(at))
		case llmflow.OpRevoke:
			n, err = q.exec(ctx, `DELETE FROM admin_roles WHERE user_name = ? AND role = ? AND org = ? AND team = ? AND source = 'slurm'`,
				c.User, c.Grant.Role, c.Grant.Org, c.Grant.Team)
		case llmflow.OpDisableUser:
			n, err = q.exec(ctx, `UPDATE admin_users SET disabled_at = ?, disabled_by = 'slurm'
WHERE name = ? AND disabled_at IS NULL AND NOT EXISTS (SELECT 1 FROM admin_roles WHERE user_name = ? AND source <> 'slurm')`,
				a.time(at), c.User, c.User)
			if err == nil && n > 0 {
				_, err = q.exec(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE user_name = ? AND revoked_at IS NULL`, a.time(at), c.User)
			}
		default:
			err = fmt.Errorf("unknown change %d", c.Op)
		}
		if err != nil {
			return fmt.Errorf("role sync: %s %s: %w", c.Op, c.User, err)
		}
		changed += n
	}
	if changed == 0 {
		return nil
	}
	return bump(ctx, q)
}
