package slurm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// readLimits sets the Limits of t's accounts from <cluster>_assoc_table's
// grp_tres_mins and grp_tres, read in tx (the snapshot the tree was read
// from). slurmdbd stores TRES by id ("1001=16"): the id of gres/gpu comes
// from tres_table (type 'gres', name 'gpu'); a database without it (no
// slurmctld ever registered AccountingStorageTRES=gres/gpu) has no GPU
// limits, and so has one without tres_table. Like sacctmgr, only account rows are read, and a limit is the
// account's own (group limits are stored where they are set).
func readLimits(ctx context.Context, tx *sql.Tx, cluster string, t *sacctmgr.Tree) error {
	var id int64
	err := tx.QueryRowContext(ctx, "SELECT id FROM tres_table WHERE type = 'gres' AND name = 'gpu' AND deleted = 0").Scan(&id)
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case errors.As(err, &me) && me.Number == 1146: // ER_NO_SUCH_TABLE: not a whole slurmdbd schema, no TRES
		return nil
	case err != nil:
		return fmt.Errorf("tres_table: %w", err)
	}
	gpu := strconv.FormatInt(id, 10)
	// The cluster name is validated by the caller: safe inside backquotes.
	rows, err := tx.QueryContext(ctx, "SELECT acct, COALESCE(grp_tres_mins, ''), COALESCE(grp_tres, '') FROM `"+
		cluster+"_assoc_table` WHERE `user` = '' AND (grp_tres_mins <> '' OR grp_tres <> '')")
	if err != nil {
		return err
	}
	defer rows.Close()
	limits := map[string]llmflow.GPULimits{}
	for rows.Next() {
		var acct, mins, tres string
		if err := rows.Scan(&acct, &mins, &tres); err != nil {
			return err
		}
		l, err := sacctmgr.GPULimits(mins, tres, gpu)
		if err != nil {
			return fmt.Errorf("account %s: %w", lower([]byte(acct)), err)
		}
		limits[lower([]byte(acct))] = l
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range t.Accounts {
		t.Accounts[i].Limits = limits[t.Accounts[i].Name]
	}
	return readOtherLimits(ctx, tx, cluster, gpu, t)
}

// readOtherLimits sets t.OtherLimits from <cluster>_assoc_table: every
// association's max_tres, a user association's grp_tres_mins and grp_tres
// (their gres/gpu counts, gpu its id), in lft order as sacctmgr lists them.
func readOtherLimits(ctx context.Context, tx *sql.Tx, cluster, gpu string, t *sacctmgr.Tree) error {
	rows, err := tx.QueryContext(ctx, "SELECT acct, `user`, `partition`, COALESCE(grp_tres_mins, ''), COALESCE(grp_tres, ''), COALESCE(max_tres_pj, '') FROM `"+
		cluster+"_assoc_table` WHERE max_tres_pj <> '' OR (`user` <> '' AND (grp_tres_mins <> '' OR grp_tres <> '')) ORDER BY lft")
	if err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var acct, user, part, mins, grp, max []byte
		if err := rows.Scan(&acct, &user, &part, &mins, &grp, &max); err != nil {
			return err
		}
		for _, l := range []struct {
			name, tres string
			user       bool // a limit of user associations only
		}{{"GrpTRESMins", string(mins), true}, {"GrpTRES", string(grp), true}, {"MaxTRES", string(max), false}} {
			if l.user && len(user) == 0 {
				continue
			}
			n, ok, err := sacctmgr.GPUCount(l.tres, gpu)
			if err != nil {
				return fmt.Errorf("association %s/%s: %s: %w", lower(acct), lower(user), l.name, err)
			}
			if ok {
				t.OtherLimits = append(t.OtherLimits, sacctmgr.OtherLimit{Account: lower(acct), User: lower(user), Partition: string(part), Limit: l.name, GPUs: n})
			}
		}
	}
	return rows.Err()
}
