package slurm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/redact"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// DefaultDialTimeout bounds a connection to the database when the DSN sets
// no timeout.
const DefaultDialTimeout = 10 * time.Second

// DB is slurmdbd's database. It is safe for concurrent use.
type DB struct {
	db     *sql.DB
	dsn    string // redacted from every error, with its password
	passwd string // as the driver parsed it
}

// Open returns a handle on slurmdbd's database named by dsn, a
// go-sql-driver/mysql DSN ("user:password@tcp(host:3306)/slurm_acct_db").
// A DSN without a timeout gets DefaultDialTimeout. Open checks the DSN but
// does not connect; the first query does. Its errors, and those of every
// method of DB, never contain the DSN or its password (known even when the
// DSN does not parse).
func Open(dsn string) (*DB, error) {
	dsn = strings.TrimSpace(dsn)
	d := &DB{dsn: dsn} // the password as the driver reads it is known even when the DSN does not parse
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("slurmdbd: invalid DSN (not shown): %s", d.Redact(err.Error()))
	}
	d.passwd = cfg.Passwd
	if cfg.DBName == "" {
		return nil, errors.New("slurmdbd: DSN names no database (want .../slurm_acct_db)")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultDialTimeout
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("slurmdbd: invalid DSN (not shown): %s", d.Redact(err.Error()))
	}
	d.db = sql.OpenDB(conn)
	d.db.SetMaxIdleConns(1)
	d.db.SetConnMaxIdleTime(time.Minute)
	return d, nil
}

// SQL returns the database handle, for statements of the caller's own
// (the write-back's usage rows). Pass the messages of its errors through
// Redact before showing them.
func (d *DB) SQL() *sql.DB { return d.db }

// Redact removes the DSN and its password from msg (redact.DSN: the
// password only where it stands as one).
func (d *DB) Redact(msg string) string { return redact.DSN(msg, d.dsn, d.passwd) }

// Close closes the database connections.
func (d *DB) Close() error { return d.db.Close() }

// Associations reads the association tree of cluster from acct_table (for
// descriptions and organisations) and <cluster>_assoc_table, in one
// read-only REPEATABLE READ transaction, so the two tables are read from
// one snapshot. It needs only SELECT on the database.
//
// In slurmdbd's tables an account row's parent is the account row
// whose acct is its parent_acct and a user row's parent is the account row
// of its acct; lft/rgt are not used. Deleted rows (deleted=1) are returned
// flagged Deleted; shares = 2147483647 is Fairshare=parent (UseParent);
// names are lower-cased (slurmdbd stores them so); is_def=1 is Default;
// accounts carry their GrpTRESMins and GrpTRES GPU limits (readLimits);
// the account coordinators come from acct_coord_table (readCoords).
// The rows come in the table's order: the caller normalises the tree.
func (d *DB) Associations(ctx context.Context, cluster string) (*sacctmgr.Tree, error) {
	cluster = strings.ToLower(strings.TrimSpace(cluster))
	if !llmflow.ValidClusterName(cluster) {
		return nil, fmt.Errorf("slurmdbd: invalid cluster name %q (want letters, digits, '_' or '-')", cluster)
	}
	t, err := d.associations(ctx, cluster)
	if err != nil {
		return nil, fmt.Errorf("slurmdbd: cluster %s: %s", cluster, d.Redact(err.Error()))
	}
	return t, nil
}

func (d *DB) associations(ctx context.Context, cluster string) (*sacctmgr.Tree, error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	// Only the accounts of this cluster's tree are needed, but acct_table is
	// small next to the association table: read it whole.
	type acct struct{ descr, org string }
	accts := map[string]acct{}
	rows, err := tx.QueryContext(ctx, "SELECT name, description, organization FROM acct_table")
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name, d, o sql.RawBytes
		if err := rows.Scan(&name, &d, &o); err != nil {
			rows.Close()
			return nil, err
		}
		accts[strings.ToLower(string(name))] = acct{string(d), string(o)}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// The cluster name is validated (llmflow.ValidClusterName): safe inside
	// backquotes.
	q := "SELECT `user`, acct, `partition`, parent_acct, shares, deleted, is_def FROM `" +
		cluster + "_assoc_table`"
	rows, err = tx.QueryContext(ctx, q)
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 { // ER_NO_SUCH_TABLE
			return nil, fmt.Errorf("no table %s_assoc_table: cluster %s unknown to slurmdbd", cluster, cluster)
		}
		return nil, err
	}
	defer rows.Close()
	t := &sacctmgr.Tree{Cluster: cluster}
	var (
		user, acctName, part, parent sql.RawBytes
		shares                       int64
		deleted, isDef               int64
	)
	for rows.Next() {
		if err := rows.Scan(&user, &acctName, &part, &parent, &shares, &deleted, &isDef); err != nil {
			return nil, err
		}
		useParent := shares == sacctmgr.ParentShares
		var sh uint32
		switch {
		case useParent:
			sh = sacctmgr.ParentShares
		case shares < 0:
			sh = 0
		case shares > 1<<32-1:
			sh = 1<<32 - 1
		default:
			sh = uint32(shares)
		}
		name := lower(acctName)
		if len(user) == 0 {
			a := accts[name]
			t.Accounts = append(t.Accounts, sacctmgr.Account{
				Name:         name,
				Parent:       lower(parent),
				Description:  a.descr,
				Organization: a.org,
				Shares:       sh,
				UseParent:    useParent,
				Deleted:      deleted != 0,
			})
			continue
		}
		t.Users = append(t.Users, sacctmgr.User{
			Name:      lower(user),
			Account:   name,
			Partition: string(part),
			Shares:    sh,
			UseParent: useParent,
			Default:   isDef != 0 && deleted == 0,
			Deleted:   deleted != 0,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := readLimits(ctx, tx, cluster, t); err != nil {
		return nil, err
	}
	if err := readCoords(ctx, tx, t); err != nil {
		return nil, err
	}
	return t, nil
}

// Retryable reports whether err is a transaction that lost a lock conflict
// (MySQL's ER_LOCK_DEADLOCK 1213 or ER_LOCK_WAIT_TIMEOUT 1205, as with
// slurmdbd's own rollup): running the transaction again may succeed.
func Retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// lower returns b as a lower-case string with one allocation.
func lower(b []byte) string {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' || c >= 0x80 {
			return strings.ToLower(string(b))
		}
	}
	return string(b)
}
