// Package slurm is llmflow's adapter to Slurm's accounting, one type per
// dependency:
//
//   - [DB] is slurmdbd's MySQL/MariaDB database (StorageLoc, usually
//     slurm_acct_db), opened from a go-sql-driver/mysql DSN with [Open]. It
//     reads the association tree ([DB.Associations]) and hands its
//     *sql.DB to the write-back (package writeback), which writes usage
//     rows. Its errors never contain the DSN or its password.
//   - [Sacctmgr] runs the sacctmgr command: [Sacctmgr.Output] for listings,
//     [Sacctmgr.Modify] for changes (with -i, "Nothing new added" is not an
//     error).
//
// The orchestration lives elsewhere: package slurmsync imports the tree
// into llmflow, package writeback writes GPU-hours back into slurmdbd. The
// cluster-name rule is [llmflow.ValidClusterName], which the pure
// configuration package uses too.
package slurm
