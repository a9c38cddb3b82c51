package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/alerts"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/slurmsync"
	"github.com/go-llmflow/llmflow/store"
)

// Store is what the process host and the commands need of a store,
// whatever its kind: both SQLite and PostgreSQL have all of it.
type Store interface {
	gateway.KeyLookup
	admin.KeyStore
	gateway.RecordWriter
	gateway.Pinger
	gateway.ClampCounter
	gateway.ShareUsageStore
	admin.SpendReader
	admin.AdminStore
	admin.KeyLimitStore
	admin.KeyRotateStore
	admin.RoutingStore
	admin.BudgetWriter
	gateway.BudgetStore
	gateway.ReplicaStore
	Leave(ctx context.Context, replica string) error
	AccountStore
	alerts.Store
	Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	RollupsByTag(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	PurgeRecords(ctx context.Context, before time.Time) (int64, error)
	// SaveUnwritten and Unwritten keep what the write-back could not
	// write into slurmdbd, for llmflow report.
	SaveUnwritten(ctx context.Context, cluster string, from, to time.Time, rows []llmflow.Unwritten) error
	Unwritten(ctx context.Context, cluster string, from, to time.Time) ([]llmflow.Unwritten, error)
	// SaveAssocOrder and AssocOrder keep where slurmdbd placed the
	// write-back cluster's associations, the order sreport lists them in.
	SaveAssocOrder(ctx context.Context, cluster string, order []llmflow.AssocLFT) error
	AssocOrder(ctx context.Context, cluster string) ([]llmflow.AssocLFT, error)
	Close() error
}

// AccountStore is what the Slurm import needs of a store.
type AccountStore interface {
	slurmsync.Sink
	admin.SyncHistory
	slurmsync.RoleSink // who administers, from Slurm
}

// Interface guards: both stores are app stores.
var (
	_ Store = (*store.SQLite)(nil)
	_ Store = (*store.Postgres)(nil)
)

// OpenStore opens the store the configuration names: the SQLite file at
// cfg.Store.Path, or the PostgreSQL database whose DSN is in
// cfg.Store.DSNFile. Its errors name the DSN file, never the DSN.
func OpenStore(ctx context.Context, cfg *config.Config) (Store, error) {
	switch cfg.Store.Kind {
	case "", "sqlite":
		s, err := store.OpenSQLite(ctx, cfg.Store.Path)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	case "postgres":
		if cfg.Store.DSNFile == "" {
			return nil, fmt.Errorf("store kind %q needs dsn_file", cfg.Store.Kind)
		}
		dsn, err := config.ReadSecret(cfg.Store.DSNFile)
		if err != nil {
			return nil, fmt.Errorf("store dsn_file: %w", err)
		}
		s, err := store.OpenPostgres(ctx, dsn) // its errors never hold the DSN
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		return nil, fmt.Errorf("unknown store kind %q", cfg.Store.Kind)
	}
}

// startPurge deletes raw records older than the retention every day at
// 03:17 (rollups stay, so reports are unaffected).
func startPurge(ctx context.Context, db Store, retention time.Duration, log *slog.Logger) *cron.Cron {
	c := cron.New()
	c.AddFunc("17 3 * * *", func() {
		before := time.Now().Add(-retention)
		n, err := db.PurgeRecords(ctx, before)
		if err != nil {
			log.Error("purge of old accounting records failed", "before", before, "err", err)
			return
		}
		log.Info("old accounting records purged (rollups kept)", "before", before.Format(time.RFC3339), "records", n)
	})
	c.Start()
	return c
}
