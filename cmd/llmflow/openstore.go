package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/store"
)

// appStore is what the commands need of a store, whatever its kind.
type appStore interface {
	gateway.KeyStore
	gateway.RecordWriter
	gateway.Pinger
	gateway.ClampCounter
	gateway.ShareUsageStore
	gateway.SpendReader
	gateway.AdminStore
	gateway.KeyAdminStore
	accountStore
	Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	RollupsByTag(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	PurgeRecords(ctx context.Context, before time.Time) (int64, error)
	Close() error
}

// Interface guards: both stores are app stores.
var (
	_ appStore = (*store.SQLite)(nil)
	_ appStore = (*store.Postgres)(nil)
)

// openStore opens the store the configuration names: the SQLite file at
// cfg.Store.Path, or the PostgreSQL database whose DSN is in
// cfg.Store.DSNFile. Its errors name the DSN file, never the DSN.
func openStore(ctx context.Context, cfg *config.Config) (appStore, error) {
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
