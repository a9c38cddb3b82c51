package slurm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

// readCoords reads the account coordinators (`sacctmgr add coordinator`)
// from acct_coord_table into t.Coords, in the tree's snapshot. slurmdbd
// keeps one row per account a user was made coordinator of (the
// sub-accounts are implied) for every cluster at once, and deletes the
// row when the coordinator is removed; rows flagged deleted are skipped
// all the same. Names are lower-cased like the tree's. A database user
// without SELECT on the table leaves the coordinators unknown
// (t.CoordsKnown false), not the import failed.
func readCoords(ctx context.Context, tx *sql.Tx, t *sacctmgr.Tree) error {
	rows, err := tx.QueryContext(ctx, "SELECT `user`, acct FROM acct_coord_table WHERE deleted = 0")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1142 { // ER_TABLEACCESS_DENIED_ERROR
		// A database user granted SELECT table by table, before
		// coordinators were read: the tree is still right, the
		// coordinators unknown (t.CoordsKnown false: no role changes).
		return nil
	}
	if err != nil {
		return fmt.Errorf("acct_coord_table: %w", err)
	}
	defer rows.Close()
	var user, acct sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&user, &acct); err != nil {
			return fmt.Errorf("acct_coord_table: %w", err)
		}
		t.Coords = append(t.Coords, sacctmgr.Coord{User: lower(user), Account: lower(acct)})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("acct_coord_table: %w", err)
	}
	t.Coords, t.CoordsKnown = sacctmgr.SortCoords(t.Coords), true
	return nil
}
