package slurmsync

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/go-llmflow/llmflow/slurm"
)

// SlurmDBD reads the association tree from slurmdbd's MySQL/MariaDB
// database through the adapter ([slurm.DB.Associations]: acct_table and
// <cluster>_assoc_table, SELECT only) and normalises it.
//
// Errors never contain the DSN or its password.
type SlurmDBD struct {
	cluster string
	db      *slurm.DB
}

// NewSlurmDBD returns a source reading cluster's tree through dsn, a
// go-sql-driver/mysql DSN ("user:password@tcp(host:3306)/slurm_acct_db").
// It checks the arguments but does not connect; Tree does. Close releases
// the connections.
func NewSlurmDBD(dsn, cluster string) (*SlurmDBD, error) {
	cluster = strings.ToLower(strings.TrimSpace(cluster))
	if !llmflow.ValidClusterName(cluster) {
		return nil, fmt.Errorf("slurmdbd: invalid cluster name %q (want letters, digits, '_' or '-')", cluster)
	}
	db, err := slurm.Open(dsn)
	if err != nil {
		return nil, err
	}
	return &SlurmDBD{cluster: cluster, db: db}, nil
}

// Close closes the database connections.
func (s *SlurmDBD) Close() error { return s.db.Close() }

// String describes the source for logs (without the DSN).
func (s *SlurmDBD) String() string { return "slurmdbd database, cluster " + s.cluster }

// Tree reads the tree (in one snapshot of the database) and normalises it.
func (s *SlurmDBD) Tree(ctx context.Context) (*sacctmgr.Tree, error) {
	t, err := s.db.Associations(ctx, s.cluster)
	if err != nil {
		return nil, err
	}
	if err := Normalize(t); err != nil {
		return nil, fmt.Errorf("slurmdbd: cluster %s: %s", s.cluster, s.db.Redact(err.Error()))
	}
	return t, nil
}
