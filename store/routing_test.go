package store_test

import (
	"path/filepath"
	"testing"

	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/store/storetest"
)

var (
	_ storetest.RoutingStore = (*store.SQLite)(nil)
	_ storetest.RoutingStore = (*store.Postgres)(nil)
)

func TestSQLite_Routing(t *testing.T) {
	paths := map[storetest.RoutingStore]string{}
	storetest.RunRouting(t, func(t *testing.T) storetest.RoutingStore {
		p := filepath.Join(t.TempDir(), "llmflow.db")
		s := MustOpenSQLite(t, p)
		paths[s] = p
		return s
	}, func(t *testing.T, s storetest.RoutingStore) storetest.RoutingStore {
		if err := s.(*store.SQLite).Close(); err != nil {
			t.Fatal(err)
		}
		return MustOpenSQLite(t, paths[s])
	})
}

func TestPostgres_Routing(t *testing.T) {
	pgDSN(t)
	dsns := map[storetest.RoutingStore]string{}
	storetest.RunRouting(t, func(t *testing.T) storetest.RoutingStore {
		dsn := pgSchema(t)
		s := MustOpenPostgres(t, dsn)
		dsns[s] = dsn
		return s
	}, func(t *testing.T, s storetest.RoutingStore) storetest.RoutingStore {
		s.(*store.Postgres).Close()
		return MustOpenPostgres(t, dsns[s])
	})
}

func TestSQLite_Unwritten(t *testing.T) {
	storetest.RunUnwritten(t, func(t *testing.T) storetest.UnwrittenStore {
		return MustOpenSQLite(t, filepath.Join(t.TempDir(), "llmflow.db"))
	})
}

func TestPostgres_Unwritten(t *testing.T) {
	pgDSN(t)
	storetest.RunUnwritten(t, func(t *testing.T) storetest.UnwrittenStore {
		return MustOpenPostgres(t, pgSchema(t))
	})
}
