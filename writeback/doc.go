// Package writeback writes llmflow's GPU-hours into Slurm's accounting
// database (slurmdbd's MySQL/MariaDB, Slurm 22.05 schema), as a Slurm
// cluster of their own, so that admins read them with sreport next to their
// batch clusters:
//
//	sreport -T gres/gpu cluster AccountUtilizationByUser cluster=llm start=2026-11-01 end=2026-12-01 -t hours
//
// Command: `llmflow sync --to-slurmdbd --from 2026-11-01T00:00:00Z --to
// 2026-12-01T00:00:00Z --gpus 64` (see `llmflow sync --help`).
//
// # Who a request belongs to
//
// sreport's rows are (account, user) associations. [llmflow.Association]
// maps a rollup to one: account = the key's project, else its team; user =
// the key's owner (a Slurm user imported by the sync), else one service
// user ([llmflow.DefaultServiceUser], "llmflow", configurable). `llmflow
// report` uses the same function, and [llmflow.AssocHours] for the numbers,
// so both always agree.
//
// slurmdbd's database and sacctmgr are reached through the adapter, package
// slurm: [Open] opens the database with slurm.Open, and the association
// tree is changed with [slurm.Sacctmgr.Modify].
//
// # What is written
//
// For the hours [from, to) (UTC hours; only ended hours), for the cluster
// ([llmflow.DefaultSlurmCluster], "llm", configurable):
//
//   - the cluster (sacctmgr add cluster) and its association tree: every
//     enabled account of llmflow's tree with its parent and fairshare,
//     every account and user association that has usage (the service user
//     included), every member's association. Through sacctmgr, not SQL:
//     <cluster>_assoc_table is a nested set (lft/rgt renumbered on every
//     insert), changes are logged in txn_table and slurmdbd caches the
//     associations (assoc_mgr); sacctmgr has slurmdbd do all of it in one
//     transaction. Nothing is ever removed (history stays reportable).
//     Only the cluster's own associations are added: no account or user
//     is created (but the service user, when missing), acct_table and
//     user_table rows that exist are never changed, nor any other
//     cluster. An account or user that slurmdbd does not have live
//     (deleted = 1: sacctmgr add would revive it on every cluster and
//     reset its description; or no row at all: a key owner who is no
//     Slurm user, an account only llmflow knows) is left out of the tree
//     (Result.Skipped), and its usage is written only to an association
//     the cluster already has (deleted or not, sreport counts it), else
//     reported as not written (Result.NotWritten).
//   - the gres/gpu TRES: read from tres_table; when no slurmctld ever
//     registered it (AccountingStorageTRES=gres/gpu), inserted the way
//     slurmctld would (id ≥ 1001). sacctmgr and sreport read tres_table
//     directly: no slurmdbd restart is needed (verified).
//   - <cluster>_assoc_usage_hour_table: one row per user association and
//     hour with usage, id_tres = gres/gpu, alloc_secs = round(GPU-hours ×
//     3600) ([llmflow.AssocHours]);
//   - <cluster>_assoc_usage_day_table / _month_table: recomputed for every
//     local day / month the period touches as the sums of their hour / day
//     rows, exactly as slurmdbd's as_mysql_nonhour_rollup does;
//   - <cluster>_usage_{hour,day,month}_table, the cluster totals sreport
//     needs (it skips a cluster without them): every hour of the period
//     gets count = the pools' GPUs, alloc_secs = Σ of the hour's
//     association rows, idle_secs = count × 3600 − alloc (0 when usage
//     exceeds the capacity: Result.OverCapacity), down/pdown/plan/over 0;
//     day and month rows MAX(count), SUM(*_secs) like slurmdbd;
//   - <cluster>_last_ran_table: hourly/daily/monthly_rollup raised to at
//     least `to` (a row inserted if the cluster has none), so slurmdbd's
//     periodic rollup starts after the written hours.
//   - every usage row above also as a cpu row (id_tres 1) with the same
//     seconds: sreport sorts its user lists (UserUtilizationByAccount,
//     TopUsage) by cpu seconds only, and without cpu rows its comparison is
//     inconsistent and the order arbitrary. So on this cluster "cpu" means
//     GPU; read it with -T gres/gpu.
//
// The usage rows are replaced in one transaction (DELETE of the period's
// gres/gpu and cpu rows, INSERT), serialised between concurrent write-backs by a
// MySQL named lock and retried on a deadlock with slurmdbd's own rollup:
// re-running a period replaces it, never doubles it.
//
// # slurmdbd's own rollup
//
// Verified on the real slurmdbd 22.05.8 (TestIntegrationSreport): for a
// cluster that has no jobs and no registration events, the hourly rollup
// computes no cluster usage (no event rows, so no cluster row is written)
// and no association usage (no jobs), so it writes no hour rows at all; the
// daily and monthly rollups recompute day and month rows as the sums of
// the hour and day rows (INSERT … SELECT SUM … ON DUPLICATE KEY UPDATE),
// which gives the same values the write-back wrote. Both the periodic
// rollup (`sacctmgr -i rollup`, the same code path as slurmdbd's hourly
// run, made to re-roll every written hour by backdating last_ran to
// 2026-10-01: last_ran then advanced to the current hour) and a forced
// re-roll of the written days (`sacctmgr -i rollup START END`) left every
// value of the six tables unchanged and sreport's output identical.
// Raising last_ran is belt and braces on top of that.
//
// The cluster must stay llmflow's: if a slurmctld ever registered with
// ClusterName=<cluster>, its events would make the hourly rollup write
// cluster rows (ON DUPLICATE KEY UPDATE) over the write-back's.
//
// # Time zone
//
// slurmdbd buckets hours, days and months in its own local time zone (the
// TZ of the slurmdbd process; localtime_r/mktime in as_mysql_rollup.c),
// and sreport takes start=/end= in the local zone of the host running it.
// Config.Location (`--writeback-tz`) must be slurmdbd's zone; llmflow's
// rollups are UTC hours, so zones whose offset is not a whole number of
// hours are refused. The lab (scripts/slurm/setup.sh) and CI run UTC.
//
// # Grants
//
// The write-back needs a MySQL user on slurmdbd's database with, after
// `sacctmgr add cluster llm` created the cluster's tables (or on the whole
// database, if the write-back may create the cluster itself):
//
//	GRANT SELECT ON slurm_acct_db.* TO 'llmflow_wb'@'gw-host';
//	GRANT INSERT ON slurm_acct_db.tres_table TO 'llmflow_wb'@'gw-host';  -- only if gres/gpu is not registered yet
//	GRANT INSERT, DELETE ON slurm_acct_db.llm_assoc_usage_hour_table  TO 'llmflow_wb'@'gw-host';
//	GRANT INSERT, DELETE ON slurm_acct_db.llm_assoc_usage_day_table   TO 'llmflow_wb'@'gw-host';
//	GRANT INSERT, DELETE ON slurm_acct_db.llm_assoc_usage_month_table TO 'llmflow_wb'@'gw-host';
//	GRANT INSERT, DELETE ON slurm_acct_db.llm_usage_hour_table  TO 'llmflow_wb'@'gw-host';
//	GRANT INSERT, DELETE ON slurm_acct_db.llm_usage_day_table   TO 'llmflow_wb'@'gw-host';
//	GRANT INSERT, DELETE ON slurm_acct_db.llm_usage_month_table TO 'llmflow_wb'@'gw-host';
//	GRANT INSERT, UPDATE ON slurm_acct_db.llm_last_ran_table TO 'llmflow_wb'@'gw-host';
//
// (SELECT … FOR UPDATE and GET_LOCK need nothing more.) Its DSN goes in a
// file (`--writeback-dsn-file`, or the slurm block's dsn_file — the
// import's read-only user is then not enough). sacctmgr runs as the user
// running llmflow, who must be a Slurm administrator (root, SlurmUser or
// AdminLevel=Operator) on a host with munge and a slurm.conf naming
// slurmdbd.
package writeback
