package slurmsync

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow/sacctmgr"
)

// SlurmDBD reads the association tree from slurmdbd's MySQL/MariaDB
// database (StorageLoc, usually slurm_acct_db): acct_table for
// descriptions and organisations, <cluster>_assoc_table for the tree. It
// needs only SELECT on that database.
//
// As slurm.md §2 explains, an account row's parent is the account row
// whose acct is its parent_acct and a user row's parent is the account row
// of its acct; lft/rgt are not used. Deleted rows (deleted=1) are returned
// flagged Deleted; shares = 2147483647 is Fairshare=parent (UseParent);
// names are lower-cased (slurmdbd stores them so); is_def=1 is Default.
//
// Errors never contain the DSN or its password.
type SlurmDBD struct {
	cluster string
	db      *sql.DB
	secrets []string // redacted from every error
}

var clusterRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidCluster reports whether name is a cluster name safe to use in
// slurmdbd's per-cluster table names (letters, digits, '_' and '-';
// Slurm lower-cases cluster names).
func ValidCluster(name string) bool { return clusterRE.MatchString(name) }

// NewSlurmDBD returns a source reading cluster's tree through dsn, a
// go-sql-driver/mysql DSN ("user:password@tcp(host:3306)/slurm_acct_db").
// It checks the arguments but does not connect; Tree does. Close releases
// the connections.
func NewSlurmDBD(dsn, cluster string) (*SlurmDBD, error) {
	cluster = strings.ToLower(strings.TrimSpace(cluster))
	if !ValidCluster(cluster) {
		return nil, fmt.Errorf("slurmdbd: invalid cluster name %q (want letters, digits, '_' or '-')", cluster)
	}
	dsn = strings.TrimSpace(dsn)
	secrets := []string{dsn}
	// The password as the driver would read it (user:password@...), known
	// even when the DSN does not parse.
	if at := strings.LastIndex(dsn, "@"); at > 0 {
		if _, pw, ok := strings.Cut(dsn[:at], ":"); ok && pw != "" {
			secrets = append(secrets, pw)
		}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("slurmdbd: invalid DSN (not shown): %s", redact(err.Error(), secrets))
	}
	if cfg.Passwd != "" {
		secrets = append(secrets, cfg.Passwd)
	}
	if cfg.DBName == "" {
		return nil, errors.New("slurmdbd: DSN names no database (want .../slurm_acct_db)")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("slurmdbd: invalid DSN (not shown): %s", redact(err.Error(), secrets))
	}
	db := sql.OpenDB(conn)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(time.Minute)
	return &SlurmDBD{cluster: cluster, db: db, secrets: secrets}, nil
}

// Close closes the database connections.
func (s *SlurmDBD) Close() error { return s.db.Close() }

// String describes the source for logs (without the DSN).
func (s *SlurmDBD) String() string { return "slurmdbd database, cluster " + s.cluster }

// Tree reads the tree in one read-only REPEATABLE READ transaction, so the
// two tables are read from one snapshot.
func (s *SlurmDBD) Tree(ctx context.Context) (*sacctmgr.Tree, error) {
	t, err := s.tree(ctx)
	if err != nil {
		return nil, fmt.Errorf("slurmdbd: cluster %s: %s", s.cluster, redact(err.Error(), s.secrets))
	}
	return t, nil
}

func (s *SlurmDBD) tree(ctx context.Context) (*sacctmgr.Tree, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
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

	// The cluster name is validated (ValidCluster): safe inside backquotes.
	q := "SELECT `user`, acct, `partition`, parent_acct, shares, deleted, is_def FROM `" +
		s.cluster + "_assoc_table`"
	rows, err = tx.QueryContext(ctx, q)
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 { // ER_NO_SUCH_TABLE
			return nil, fmt.Errorf("no table %s_assoc_table: cluster %s unknown to slurmdbd", s.cluster, s.cluster)
		}
		return nil, err
	}
	defer rows.Close()
	t := &sacctmgr.Tree{Cluster: s.cluster}
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
	if err := Normalize(t); err != nil {
		return nil, err
	}
	return t, nil
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

// redact replaces every secret in msg.
func redact(msg string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return msg
}
