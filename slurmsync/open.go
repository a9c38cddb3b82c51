package slurmsync

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// Listings are sacctmgr listings read from files instead of running
// sacctmgr (llmflow sync --file).
type Listings struct {
	Files   map[Listing]string
	Columns []string // the columns of listings printed with -n
	Names   []string // the files as given, for the source's name
}

// Open builds the import source a slurm block names (slurmdbd's MySQL
// database or sacctmgr, or sacctmgr listings in files when ls is not
// nil), each import bounded by s.Timeout; close releases it. Its errors
// name the DSN file, never the DSN.
func Open(s config.Slurm, ls *Listings) (src Source, name string, close func() error, err error) {
	if s.Cluster == "" {
		return nil, "", nil, fmt.Errorf("no Slurm cluster: pass --cluster or set slurm { cluster } in the configuration")
	}
	noop := func() error { return nil }
	switch s.Source {
	case "slurmdbd":
		if s.DSNFile == "" {
			return nil, "", nil, fmt.Errorf("slurmdbd needs the MySQL DSN of its database in a file: --dsn-file or slurm { dsn_file }")
		}
		dsn, err := config.ReadSecret(s.DSNFile)
		if err != nil {
			return nil, "", nil, fmt.Errorf("slurmdbd DSN: %w", err)
		}
		db, err := NewSlurmDBD(dsn, s.Cluster)
		if err != nil {
			return nil, "", nil, err
		}
		return timeoutSource{db, s.Timeout}, "slurmdbd:" + s.Cluster, db.Close, nil
	case "sacctmgr":
		sm := &Sacctmgr{Cluster: s.Cluster, Path: s.SacctmgrPath, Timeout: s.Timeout}
		name := "sacctmgr:" + s.Cluster
		if ls != nil {
			sm.Files, sm.Columns = ls.Files, ls.Columns
			name = "file:" + strings.Join(ls.Names, ",")
		}
		return sm, name, noop, nil
	default:
		return nil, "", nil, fmt.Errorf("no Slurm source: pass --from-slurmdbd or --from-sacctmgr, or set slurm { source } in the configuration")
	}
}

// timeoutSource bounds one import.
type timeoutSource struct {
	Source
	timeout time.Duration
}

func (t timeoutSource) Tree(ctx context.Context) (*sacctmgr.Tree, error) {
	if t.timeout <= 0 {
		return t.Source.Tree(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.Source.Tree(ctx)
}
