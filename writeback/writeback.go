package writeback

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/slurm"
)

// Config configures a Writer.
type Config struct {
	// Cluster is the Slurm cluster the usage is written to (default
	// llmflow.DefaultSlurmCluster, "llm"). It belongs to llmflow: no slurmctld may
	// register under this name (its rollups would then compute cluster
	// usage from events and overwrite the cluster rows).
	Cluster string
	// ServiceUser is the Slurm user of keys without an owner (default
	// llmflow.DefaultServiceUser, "llmflow"). See llmflow.Association.
	ServiceUser string
	// GPUs is the count of the cluster rows: the GPUs of the pool(s) whose
	// usage is written. Capacity = GPUs × 3600 GPU-seconds an hour; idle =
	// capacity − allocated.
	GPUs int
	// Location is slurmdbd's time zone (the TZ of the slurmdbd process),
	// which its day and month rows follow. Default UTC (as llmflow report
	// and the writeback block), never the process's local zone.
	Location *time.Location
	// Sacctmgr runs the association-tree commands (Modify); the zero
	// value runs "sacctmgr" from PATH. The user running it must be a Slurm
	// administrator.
	Sacctmgr slurm.Sacctmgr
	// Progress, when set, is called as rows are written (stage names the
	// table group; done of total rows). Nil: quiet.
	Progress func(stage string, done, total int)
	// Now is the clock (default time.Now): only hours that have ended are
	// written.
	Now func() time.Time
	// Since is the first hour the gateway served (its first accounting
	// record, the hour of its oldest rollup): the cluster rows (capacity) are
	// written for the hours from Since on only, the hours before it are
	// cleared. Zero: every hour written has its cluster row. `llmflow
	// report` counts the same hours, so both agree on Utilization.
	Since time.Time
}

// Writer writes llmflow's GPU-hours into slurmdbd's database.
type Writer struct {
	db     *sql.DB
	cfg    Config
	redact func(string) string // removes the DSN from error messages; nil: nothing to remove
}

// Open returns a Writer on slurmdbd's database named by dsn, a
// go-sql-driver/mysql DSN ("user:password@tcp(host:3306)/slurm_acct_db")
// whose user has the grants listed in the package documentation, opened by
// the adapter (slurm.Open). It does not connect; Write does. Errors never
// contain the DSN or its password.
func Open(dsn string, cfg Config) (*Writer, error) {
	db, err := slurm.Open(dsn)
	if err != nil {
		return nil, fmt.Errorf("write-back: %w", err)
	}
	w, err := New(db.SQL(), cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	w.redact = db.Redact
	return w, nil
}

// New returns a Writer on an open database handle of slurmdbd's database;
// Close closes it.
func New(db *sql.DB, cfg Config) (*Writer, error) {
	cfg.Cluster = strings.ToLower(strings.TrimSpace(cmp.Or(cfg.Cluster, llmflow.DefaultSlurmCluster)))
	if !llmflow.ValidClusterName(cfg.Cluster) {
		return nil, fmt.Errorf("write-back: invalid cluster name %q (want letters, digits, '_' or '-')", cfg.Cluster)
	}
	cfg.ServiceUser = strings.ToLower(strings.TrimSpace(cmp.Or(cfg.ServiceUser, llmflow.DefaultServiceUser)))
	if !ValidName(cfg.ServiceUser) {
		return nil, fmt.Errorf("write-back: invalid service user %q", cfg.ServiceUser)
	}
	if cfg.GPUs <= 0 {
		return nil, errors.New("write-back: the pool's GPU count (cluster capacity) must be > 0")
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Writer{db: db, cfg: cfg}, nil
}

// SetSince sets Config.Since for the next writes (the first hour served
// moves only when the store's oldest rollups are pruned). Not safe
// concurrently with Write.
func (w *Writer) SetSince(t time.Time) { w.cfg.Since = t }

// Close releases the database handle.
func (w *Writer) Close() error { return w.db.Close() }

// Cluster returns the cluster written to.
func (w *Writer) Cluster() string { return w.cfg.Cluster }

// Result says what a Write did (or, in a dry run, would do).
type Result struct {
	Cluster  string
	From, To time.Time // the hours written, [From, To), UTC
	DryRun   bool

	ClusterCreated bool         // sacctmgr add cluster ran
	TRESID         int64        // id of gres/gpu in tres_table (0 in a dry run that would create it)
	TRESCreated    bool         // gres/gpu was inserted into tres_table
	Tree           []TreeChange // sacctmgr commands run

	// Rows written per table (replacing the rows of the same periods).
	AssocHours, AssocDays, AssocMonths       int
	ClusterHours, ClusterDays, ClusterMonths int

	GPUSeconds   int64                // Σ alloc_secs of the hour rows written
	Unattributed llmflow.Unattributed // usage with no association, not written
	// NotWritten is usage of associations the write-back may not create:
	// their account or user is deleted in slurmdbd (acct_table /
	// user_table) or not there at all, and the cluster never had the
	// association. sacctmgr add would revive the account or user on every
	// cluster (and reset its description), or create a new one: the
	// write-back never creates or changes an account or user (the service
	// user excepted).
	NotWritten []NotWritten
	// Unwritten are the hour rows of NotWritten, for the store
	// (SaveUnwritten): llmflow report subtracts them, so that it equals
	// what slurmdbd holds, and says them apart.
	Unwritten []llmflow.Unwritten
	// AssocOrder is where slurmdbd placed the cluster's user associations
	// (lft, deleted ones included) after the write, for the store
	// (SaveAssocOrder): sreport lists in that order, llmflow report too.
	AssocOrder []llmflow.AssocLFT
	// Skipped are accounts and users of llmflow's tree left out of the
	// cluster's tree because they are deleted in slurmdbd (or under a
	// deleted account).
	Skipped          []string
	OverCapacity     int                 // hours whose allocation exceeds GPUs × 3600 (idle written as 0)
	LastRanHourly    time.Time           // <cluster>_last_ran_table.hourly_rollup after the write
	AssocHourRows    []llmflow.AssocHour // what was written, sorted by hour, account, user
	ExistingAssocIDs int                 // live user associations of the cluster
}

// NotWritten is the usage of one association that was not written.
type NotWritten struct {
	Account, User string
	GPUSeconds    int64
	Reason        string
}

// GPUHours returns the written usage in GPU-hours.
func (r Result) GPUHours() float64 { return float64(r.GPUSeconds) / 3600 }

func (w *Writer) table(kind string) string { return "`" + w.cfg.Cluster + "_" + kind + "_table`" }

// Write writes the GPU usage of rollups for the hours [from, to) (UTC
// hours; from is rounded down and to up to whole hours, and to is clamped
// to the start of the current hour: only ended hours are written) as
// cluster w.Cluster():
//
//  1. the cluster is created (sacctmgr add cluster) if missing, and its
//     association tree brought in line with tree plus every association
//     the usage needs (sacctmgr add account / add user / modify; nothing
//     is ever removed);
//  2. the gres/gpu TRES is read from tres_table, inserted if no slurmctld
//     ever registered it (as slurmctld would, id ≥ 1001);
//  3. in one transaction: the gres/gpu rows of <cluster>_assoc_usage_hour
//     and <cluster>_usage_hour for [from, to) are replaced by llmflow.AssocHours(rollups)
//     and the cluster totals (count = GPUs, alloc, idle = count×3600 −
//     alloc); the day rows of every local day touched are recomputed as
//     the sums of their hour rows, the month rows as the sums of their day
//     rows (MAX(count) for the cluster), as slurmdbd's own rollup does;
//     <cluster>_last_ran_table is moved past to so that slurmdbd's hourly
//     rollup never revisits these hours.
//
// Re-running a period replaces it: nothing is ever counted twice. With
// dryRun nothing is changed; the Result says what would be.
func (w *Writer) Write(ctx context.Context, from, to time.Time, tree llmflow.Accounts, rollups []llmflow.Rollup, dryRun bool) (Result, error) {
	res, err := w.write(ctx, from, to, tree, rollups, dryRun)
	if err != nil && w.redact != nil {
		err = errors.New(w.redact(err.Error()))
	}
	return res, err
}

// Hours returns the hours Write writes for [from, to) at time now: from
// rounded down and to rounded up to whole UTC hours, to clamped to the
// start of now's hour (only ended hours are written). Read the rollups of
// this range.
func Hours(from, to, now time.Time) (time.Time, time.Time) {
	from = from.UTC().Truncate(time.Hour)
	if t := to.UTC().Truncate(time.Hour); t.Before(to) {
		to = t.Add(time.Hour)
	} else {
		to = t
	}
	if now := now.UTC().Truncate(time.Hour); to.After(now) {
		to = now
	}
	return from, to
}

func (w *Writer) write(ctx context.Context, from, to time.Time, tree llmflow.Accounts, rollups []llmflow.Rollup, dryRun bool) (Result, error) {
	loc := w.cfg.Location
	from, to = Hours(from, to, w.cfg.Now())
	res := Result{Cluster: w.cfg.Cluster, From: from, To: to, DryRun: dryRun}
	if !from.Before(to) {
		return res, fmt.Errorf("write-back: no ended hour in [%s, %s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if err := checkZone(from, to, loc); err != nil {
		return res, err
	}

	// Usage of the period and the associations it needs.
	var in []llmflow.Rollup
	var chains [][]string
	seenChain := map[string]bool{}
	for _, r := range rollups {
		if r.Hour.Before(from) || !r.Hour.Before(to) {
			continue
		}
		in = append(in, r)
		if a, _ := llmflow.Association(r, w.cfg.ServiceUser); a != "" && r.GPUHours != 0 {
			var ch []string
			for _, n := range []string{r.Org, r.Team, r.Project} {
				if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
					ch = append(ch, n)
				}
			}
			if k := strings.Join(ch, "\x00"); !seenChain[k] {
				seenChain[k] = true
				chains = append(chains, ch)
			}
		}
	}
	usage, un := llmflow.AssocHours(in, w.cfg.ServiceUser)
	res.Unattributed = un
	res.AssocHourRows = usage
	var used [][2]string
	usedSeen := map[[2]string]bool{}
	for _, u := range usage {
		k := [2]string{u.Account, u.User}
		if !usedSeen[k] {
			usedSeen[k] = true
			used = append(used, k)
		}
		res.GPUSeconds += u.AllocSecs
	}
	// 1. cluster and association tree (sacctmgr).
	var exists bool
	err := w.db.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM cluster_table WHERE name = ? AND deleted = 0", w.cfg.Cluster).Scan(&exists)
	if err != nil {
		return res, fmt.Errorf("write-back: reading cluster_table: %w", err)
	}
	var have, ever []haveAssoc
	if exists {
		if have, err = w.liveAssocs(ctx); err != nil {
			return res, err
		}
		if ever, err = w.userAssocs(ctx); err != nil {
			return res, err
		}
	}
	gone, err := w.slurmNames(ctx)
	if err != nil {
		return res, err
	}
	wantAccts, wantUsers, err := desiredTree(tree, chains, used)
	if err != nil {
		return res, fmt.Errorf("write-back: %w", err)
	}
	res.Skipped = gone.prune(wantAccts, wantUsers)
	usage, res.NotWritten, res.Unwritten = gone.unwritable(usage, wantUsers, ever)
	res.AssocHourRows = usage
	res.GPUSeconds = 0
	for _, u := range usage {
		res.GPUSeconds += u.AllocSecs
	}
	if !exists {
		if !dryRun {
			if err := w.cfg.Sacctmgr.Modify(ctx, "add", "cluster", w.cfg.Cluster); err != nil {
				return res, fmt.Errorf("write-back: %w", err)
			}
		}
		res.ClusterCreated = true
	}
	// res.Tree lists the commands run (a dry run: that would run), so that
	// after a failure it says what was changed, and nothing more.
	plan := planTree(w.cfg.Cluster, wantAccts, wantUsers, have)
	if dryRun {
		res.Tree = plan
	} else {
		for _, c := range plan {
			if err := w.cfg.Sacctmgr.Modify(ctx, c.Args...); err != nil {
				return res, fmt.Errorf("write-back: association tree: %w", err)
			}
			res.Tree = append(res.Tree, c)
		}
	}

	// 2. gres/gpu TRES.
	if res.TRESID, res.TRESCreated, err = w.gpuTRES(ctx, dryRun); err != nil {
		return res, err
	}

	if dryRun {
		res.AssocHours = len(usage)
		res.ClusterHours = int(to.Sub(from) / time.Hour)
		return res, nil
	}

	// 3. usage rows, one transaction (retried on a deadlock with slurmdbd's
	// own rollup).
	for attempt := 0; ; attempt++ {
		err = w.writeUsage(ctx, &res, usage)
		if err != nil && slurm.Retryable(err) && attempt < 3 {
			continue
		}
		break
	}
	if err != nil {
		return res, err
	}
	res.AssocOrder, err = w.assocOrder(ctx)
	return res, err
}

// assocOrder reads the lft of the cluster's user associations (partition
// "", deleted ones included: sreport reports them too), by lft.
func (w *Writer) assocOrder(ctx context.Context) ([]llmflow.AssocLFT, error) {
	rows, err := w.db.QueryContext(ctx, "SELECT acct, user, lft FROM "+w.table("assoc")+" WHERE `partition` = '' AND user <> '' ORDER BY lft")
	if err != nil {
		return nil, fmt.Errorf("write-back: reading the association order of cluster %s: %w", w.cfg.Cluster, err)
	}
	defer rows.Close()
	var out []llmflow.AssocLFT
	for rows.Next() {
		var o llmflow.AssocLFT
		if err := rows.Scan(&o.Account, &o.User, &o.LFT); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// userAssocs returns the user associations (partition ”) the cluster
// ever had, deleted ones included.
func (w *Writer) userAssocs(ctx context.Context) ([]haveAssoc, error) {
	rows, err := w.db.QueryContext(ctx, "SELECT acct, user FROM "+w.table("assoc")+" WHERE `partition` = '' AND user <> ''")
	if err != nil {
		return nil, fmt.Errorf("write-back: reading the associations of cluster %s: %w", w.cfg.Cluster, err)
	}
	defer rows.Close()
	var out []haveAssoc
	for rows.Next() {
		var h haveAssoc
		if err := rows.Scan(&h.acct, &h.user); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// slurmNames reads the accounts and users slurmdbd has (rows of
// acct_table / user_table), deleted (deleted = 1: sacctmgr add would
// revive them, on every cluster) and live.
func (w *Writer) slurmNames(ctx context.Context) (deletedSet, error) {
	d := deletedSet{accts: map[string]bool{}, users: map[string]bool{},
		liveAccts: map[string]bool{}, liveUsers: map[string]bool{}, service: w.cfg.ServiceUser}
	for _, q := range []struct {
		table         string
		deleted, live map[string]bool
	}{{"acct_table", d.accts, d.liveAccts}, {"user_table", d.users, d.liveUsers}} {
		rows, err := w.db.QueryContext(ctx, "SELECT name, deleted <> 0 FROM "+q.table)
		if err != nil {
			return d, fmt.Errorf("write-back: reading %s: %w", q.table, err)
		}
		for rows.Next() {
			var n string
			var deleted bool
			if err := rows.Scan(&n, &deleted); err != nil {
				rows.Close()
				return d, err
			}
			if deleted {
				q.deleted[n] = true
			} else {
				q.live[n] = true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return d, err
		}
	}
	return d, nil
}

func (w *Writer) liveAssocs(ctx context.Context) ([]haveAssoc, error) {
	rows, err := w.db.QueryContext(ctx, "SELECT acct, user, parent_acct, shares FROM "+w.table("assoc")+
		" WHERE deleted = 0 AND `partition` = ''")
	if err != nil {
		return nil, fmt.Errorf("write-back: reading the associations of cluster %s: %w", w.cfg.Cluster, err)
	}
	defer rows.Close()
	var out []haveAssoc
	for rows.Next() {
		var h haveAssoc
		if err := rows.Scan(&h.acct, &h.user, &h.parent, &h.shares); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// gpuTRES returns the id of gres/gpu, inserting it as slurmctld would when
// no slurmctld ever registered it (AccountingStorageTRES=gres/gpu).
// slurmdbd and sreport read tres_table directly: sreport -T gres/gpu sees
// the new row without a slurmdbd restart (verified on 22.05).
func (w *Writer) gpuTRES(ctx context.Context, dryRun bool) (id int64, created bool, err error) {
	var deleted int
	q := "SELECT id, deleted FROM tres_table WHERE type = 'gres' AND name = 'gpu'"
	err = w.db.QueryRowContext(ctx, q).Scan(&id, &deleted)
	switch {
	case err == nil && deleted != 0:
		return 0, false, fmt.Errorf("write-back: the gres/gpu TRES (id %d) is deleted in tres_table", id)
	case err == nil:
		return id, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, false, fmt.Errorf("write-back: reading tres_table: %w", err)
	case dryRun:
		return 0, true, nil
	}
	_, err = w.db.ExecContext(ctx, "INSERT INTO tres_table (creation_time, deleted, type, name) "+
		"SELECT UNIX_TIMESTAMP(), 0, 'gres', 'gpu' FROM DUAL "+
		"WHERE NOT EXISTS (SELECT 1 FROM tres_table WHERE type = 'gres' AND name = 'gpu')")
	if err != nil {
		return 0, false, fmt.Errorf("write-back: registering gres/gpu in tres_table: %w", err)
	}
	if err := w.db.QueryRowContext(ctx, q).Scan(&id, &deleted); err != nil {
		return 0, false, fmt.Errorf("write-back: reading tres_table: %w", err)
	}
	return id, true, nil
}

// writeUsage replaces the usage rows of [res.From, res.To) in one
// transaction, serialised with other write-backs of the cluster by a named
// lock.
func (w *Writer) writeUsage(ctx context.Context, res *Result, usage []llmflow.AssocHour) (err error) {
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("write-back: connecting: %w", err)
	}
	defer conn.Close()
	lock := "llmflow-writeback-" + w.cfg.Cluster
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 600)", lock).Scan(&got); err != nil {
		return fmt.Errorf("write-back: lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("write-back: another write-back of cluster %s holds the lock", w.cfg.Cluster)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", lock)

	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write-back: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	*res = resetCounts(*res)
	to := res.To

	// association ids: the live association, else (its account or user
	// deleted in slurmdbd) the last deleted one, whose usage sreport
	// still counts
	ids := map[[2]string]int64{}
	live := map[[2]string]bool{}
	rows, err := tx.QueryContext(ctx, "SELECT id_assoc, acct, user, deleted FROM "+w.table("assoc")+
		" WHERE `partition` = '' AND user <> '' ORDER BY deleted DESC, id_assoc")
	if err != nil {
		return fmt.Errorf("write-back: reading associations: %w", err)
	}
	for rows.Next() {
		var id int64
		var a, u string
		var deleted bool
		if err := rows.Scan(&id, &a, &u, &deleted); err != nil {
			rows.Close()
			return err
		}
		ids[[2]string{a, u}] = id
		if !deleted {
			live[[2]string{a, u}] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	res.ExistingAssocIDs = len(live)

	// The gres/gpu rows, then the same seconds as cpu rows: sreport sorts
	// user lists (UserUtilizationByAccount, TopUsage) by cpu seconds only,
	// and without cpu rows its comparison is inconsistent and the order
	// arbitrary. With them, every report lists users by GPU usage; the cpu
	// TRES of this cluster means "GPU", which the package doc says.
	for pass, tres := range []int64{res.TRESID, cpuTRES} {
		if err := w.writeTRES(ctx, tx, res, usage, ids, tres, pass == 0); err != nil {
			return err
		}
	}

	// last_ran: slurmdbd's hourly rollup starts from hourly_rollup; keep it
	// at or past the hours written.
	var h, d, m int64
	err = tx.QueryRowContext(ctx, "SELECT hourly_rollup, daily_rollup, monthly_rollup FROM "+w.table("last_ran")+" LIMIT 1 FOR UPDATE").Scan(&h, &d, &m)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		h = to.Unix()
		_, err = tx.ExecContext(ctx, "INSERT INTO "+w.table("last_ran")+" (hourly_rollup, daily_rollup, monthly_rollup) VALUES (?, ?, ?)", h, h, h)
	case err == nil && h < to.Unix():
		h = to.Unix()
		_, err = tx.ExecContext(ctx, "UPDATE "+w.table("last_ran")+" SET hourly_rollup = GREATEST(hourly_rollup, ?), "+
			"daily_rollup = GREATEST(daily_rollup, ?), monthly_rollup = GREATEST(monthly_rollup, ?)", h, h, h)
	}
	if err != nil {
		return fmt.Errorf("write-back: last_ran_table: %w", err)
	}
	res.LastRanHourly = time.Unix(h, 0).UTC()
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write-back: commit: %w", err)
	}
	return nil
}

func resetCounts(r Result) Result {
	r.AssocHours, r.AssocDays, r.AssocMonths = 0, 0, 0
	r.ClusterHours, r.ClusterDays, r.ClusterMonths = 0, 0, 0
	r.OverCapacity = 0
	return r
}

// resumAssoc recomputes the rows of table dst in [lo, hi) as the sums of
// the rows of src in that range, bucketed by bucket (local day or month):
// what as_mysql_nonhour_rollup does (SUM(alloc_secs) GROUP BY id, id_tres).
func (w *Writer) resumAssoc(ctx context.Context, tx *sql.Tx, stage, src, dst string, tres, now int64, lo, hi time.Time, bucket func(time.Time) time.Time) (int, error) {
	rows, err := tx.QueryContext(ctx, "SELECT id, time_start, alloc_secs, deleted FROM "+w.table(src)+
		" WHERE id_tres = ? AND time_start >= ? AND time_start < ?", tres, lo.Unix(), hi.Unix())
	if err != nil {
		return 0, fmt.Errorf("write-back: reading %s: %w", src, err)
	}
	type key struct{ id, start int64 }
	type sum struct{ alloc, deleted int64 }
	sums := map[key]*sum{}
	for rows.Next() {
		var id, ts, a, del int64
		if err := rows.Scan(&id, &ts, &a, &del); err != nil {
			rows.Close()
			return 0, err
		}
		k := key{id, bucket(time.Unix(ts, 0)).Unix()}
		s := sums[k]
		if s == nil {
			s = &sum{}
			sums[k] = s
		}
		s.alloc += a
		s.deleted = max(s.deleted, del)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+w.table(dst)+" WHERE id_tres = ? AND time_start >= ? AND time_start < ?",
		tres, lo.Unix(), hi.Unix()); err != nil {
		return 0, fmt.Errorf("write-back: clearing %s: %w", dst, err)
	}
	keys := slices.Collect(maps.Keys(sums))
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.id, b.id)) })
	vals := make([][]any, 0, len(keys))
	for _, k := range keys {
		s := sums[k]
		vals = append(vals, []any{now, now, s.deleted, k.id, tres, k.start, s.alloc})
	}
	return len(vals), w.insert(ctx, tx, stage, w.table(dst), "(creation_time, mod_time, deleted, id, id_tres, time_start, alloc_secs)", vals)
}

// resumCluster is resumAssoc for the cluster tables: MAX(count),
// SUM(every *_secs).
func (w *Writer) resumCluster(ctx context.Context, tx *sql.Tx, stage, src, dst string, tres, now int64, lo, hi time.Time, bucket func(time.Time) time.Time) (int, error) {
	rows, err := tx.QueryContext(ctx, "SELECT time_start, count, alloc_secs, down_secs, pdown_secs, idle_secs, plan_secs, over_secs FROM "+
		w.table(src)+" WHERE id_tres = ? AND time_start >= ? AND time_start < ?", tres, lo.Unix(), hi.Unix())
	if err != nil {
		return 0, fmt.Errorf("write-back: reading %s: %w", src, err)
	}
	sums := map[int64]*[7]int64{} // count, alloc, down, pdown, idle, plan, over
	for rows.Next() {
		var ts int64
		var v [7]int64
		if err := rows.Scan(&ts, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]); err != nil {
			rows.Close()
			return 0, err
		}
		k := bucket(time.Unix(ts, 0)).Unix()
		s := sums[k]
		if s == nil {
			s = &[7]int64{}
			sums[k] = s
		}
		s[0] = max(s[0], v[0])
		for i := 1; i < 7; i++ {
			s[i] += v[i]
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+w.table(dst)+" WHERE id_tres = ? AND time_start >= ? AND time_start < ?",
		tres, lo.Unix(), hi.Unix()); err != nil {
		return 0, fmt.Errorf("write-back: clearing %s: %w", dst, err)
	}
	keys := slices.Sorted(maps.Keys(sums))
	vals := make([][]any, 0, len(keys))
	for _, k := range keys {
		s := sums[k]
		vals = append(vals, []any{now, now, 0, tres, k, s[0], s[1], s[2], s[3], s[4], s[5], s[6]})
	}
	return len(vals), w.insert(ctx, tx, stage, w.table(dst),
		"(creation_time, mod_time, deleted, id_tres, time_start, count, alloc_secs, down_secs, pdown_secs, idle_secs, plan_secs, over_secs)", vals)
}

// insert writes rows with multi-row INSERTs, reporting progress.
func (w *Writer) insert(ctx context.Context, tx *sql.Tx, stage, table, cols string, rows [][]any) error {
	const batch = 500
	for i := 0; i < len(rows); i += batch {
		chunk := rows[i:min(i+batch, len(rows))]
		ph := "(" + strings.TrimSuffix(strings.Repeat("?,", len(chunk[0])), ",") + ")"
		var b strings.Builder
		b.WriteString("INSERT INTO " + table + " " + cols + " VALUES ")
		args := make([]any, 0, len(chunk)*len(chunk[0]))
		for j, r := range chunk {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(ph)
			args = append(args, r...)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("write-back: writing %s: %w", stage, err)
		}
		if w.cfg.Progress != nil {
			w.cfg.Progress(stage, i+len(chunk), len(rows))
		}
	}
	return nil
}

// cpuTRES is slurmdbd's id of the cpu TRES.
const cpuTRES = 1

// writeTRES replaces the period's hour, day and month rows of one TRES,
// for the associations and the cluster; record says whether res counts
// them.
func (w *Writer) writeTRES(ctx context.Context, tx *sql.Tx, res *Result, usage []llmflow.AssocHour, ids map[[2]string]int64, tres int64, record bool) (err error) {
	now := w.cfg.Now().Unix()
	loc := w.cfg.Location
	from, to := res.From, res.To
	counts := *res
	// hour rows
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+w.table("assoc_usage_hour")+
		" WHERE id_tres = ? AND time_start >= ? AND time_start < ?", tres, from.Unix(), to.Unix()); err != nil {
		return fmt.Errorf("write-back: clearing hour rows: %w", err)
	}
	alloc := map[int64]int64{} // cluster allocation per hour
	var vals [][]any
	for _, u := range usage {
		id, ok := ids[[2]string{u.Account, u.User}]
		if !ok {
			return fmt.Errorf("write-back: association (%s, %s) missing from cluster %s after sacctmgr", u.Account, u.User, w.cfg.Cluster)
		}
		vals = append(vals, []any{now, now, 0, id, tres, u.Hour.Unix(), u.AllocSecs})
		alloc[u.Hour.Unix()] += u.AllocSecs
	}
	assocCols := "(creation_time, mod_time, deleted, id, id_tres, time_start, alloc_secs)"
	if err := w.insert(ctx, tx, "association hours", w.table("assoc_usage_hour"), assocCols, vals); err != nil {
		return err
	}
	counts.AssocHours = len(vals)

	// day and month rows of the associations: sums of the hour / day rows
	d0, d1 := dayStart(from, loc), nextDay(dayStart(to.Add(-time.Second), loc))
	m0, m1 := monthStart(from, loc), nextMonth(monthStart(to.Add(-time.Second), loc))
	if counts.AssocDays, err = w.resumAssoc(ctx, tx, "association days", "assoc_usage_hour", "assoc_usage_day", tres, now, d0, d1,
		func(t time.Time) time.Time { return dayStart(t, loc) }); err != nil {
		return err
	}
	if counts.AssocMonths, err = w.resumAssoc(ctx, tx, "association months", "assoc_usage_day", "assoc_usage_month", tres, now, m0, m1,
		func(t time.Time) time.Time { return monthStart(t, loc) }); err != nil {
		return err
	}

	// cluster hour rows: every hour of the period
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+w.table("usage_hour")+
		" WHERE id_tres = ? AND time_start >= ? AND time_start < ?", tres, from.Unix(), to.Unix()); err != nil {
		return fmt.Errorf("write-back: clearing cluster hour rows: %w", err)
	}
	capacity := int64(w.cfg.GPUs) * 3600
	vals = vals[:0]
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		if h.Before(w.cfg.Since.Truncate(time.Hour)) {
			continue // the gateway did not serve yet: no capacity
		}
		a := alloc[h.Unix()]
		idle := capacity - a
		if idle < 0 {
			idle = 0
			counts.OverCapacity++
		}
		vals = append(vals, []any{now, now, 0, tres, h.Unix(), w.cfg.GPUs, a, 0, 0, idle, 0, 0})
	}
	clusterCols := "(creation_time, mod_time, deleted, id_tres, time_start, count, alloc_secs, down_secs, pdown_secs, idle_secs, plan_secs, over_secs)"
	if err := w.insert(ctx, tx, "cluster hours", w.table("usage_hour"), clusterCols, vals); err != nil {
		return err
	}
	counts.ClusterHours = len(vals)
	if counts.ClusterDays, err = w.resumCluster(ctx, tx, "cluster days", "usage_hour", "usage_day", tres, now, d0, d1,
		func(t time.Time) time.Time { return dayStart(t, loc) }); err != nil {
		return err
	}
	if counts.ClusterMonths, err = w.resumCluster(ctx, tx, "cluster months", "usage_day", "usage_month", tres, now, m0, m1,
		func(t time.Time) time.Time { return monthStart(t, loc) }); err != nil {
		return err
	}

	if record {
		*res = counts
	}
	return nil
}
