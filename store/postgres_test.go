package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/store/storetest"
)

var _ storetest.Store = (*store.Postgres)(nil)

// pgDSN returns the DSN of the test database, LLMFLOW_TEST_PG_DSN. Without
// it the test fails, unless LLMFLOW_SKIP_PG=1 says to skip on purpose.
func pgDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv("LLMFLOW_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("LLMFLOW_SKIP_PG") == "1" {
			tb.Skip("LLMFLOW_SKIP_PG=1: PostgreSQL tests skipped")
		}
		tb.Fatal("LLMFLOW_TEST_PG_DSN is not set: set it to a PostgreSQL database where the tests may create schemas, " +
			"e.g. LLMFLOW_TEST_PG_DSN=postgres://postgres@127.0.0.1:5432/test?sslmode=disable (scripts/test.sh sets it), " +
			"or set LLMFLOW_SKIP_PG=1 to skip the PostgreSQL tests")
	}
	return dsn
}

// withParam returns dsn (URL or key=value form) with a run-time parameter.
func withParam(tb testing.TB, dsn, key, value string) string {
	tb.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatalf("LLMFLOW_TEST_PG_DSN is not a valid URL")
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + key + "=" + value
}

// pgSchema creates an empty schema of its own for the test, dropped at the
// end, and returns a DSN whose search_path is that schema. The session
// time zone is set to one whose hours are not UTC hours, so that an hour
// computed in the session's zone would show.
func pgSchema(tb testing.TB) string {
	tb.Helper()
	dsn := pgDSN(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect to LLMFLOW_TEST_PG_DSN: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	name := "llmflow_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return withParam(tb, withParam(tb, dsn, "search_path", name), "timezone", "Asia/Kolkata")
}

// MustOpenPostgres opens a store on dsn and closes it when the test ends.
func MustOpenPostgres(tb testing.TB, dsn string) *store.Postgres {
	tb.Helper()
	s, err := store.OpenPostgres(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestPostgres(t *testing.T) {
	pgDSN(t)
	storetest.Run(t, func(t *testing.T) storetest.Store {
		return MustOpenPostgres(t, pgSchema(t))
	})
}

func TestOpenPostgres_ErrDSNNotEchoed(t *testing.T) {
	const secret = "hunter2-Secret"
	for _, dsn := range []string{
		"postgres://llmflow:" + secret + "@127.0.0.1:notaport/db",
		"postgres://llmflow:" + secret + "@[::1/db",
		"postgresql://llmflow:" + secret + "@db.example.org/x?sslmode=bogus",
		"host=127.0.0.1 password=" + secret + " port=xyz",
		"host=127.0.0.1 password='" + secret,
		"user=llmflow password=" + secret + " pool_max_conns=many",
		"://" + secret,
		"%zz" + secret,
	} {
		t.Run("", func(t *testing.T) {
			s, err := store.OpenPostgres(t.Context(), dsn)
			if err == nil {
				s.Close()
				t.Fatalf("OpenPostgres accepted a malformed DSN")
			}
			msg := err.Error()
			t.Log(msg)
			if strings.Contains(msg, secret) || strings.Contains(msg, dsn) || strings.Contains(msg, "llmflow:") {
				t.Errorf("error echoes the DSN: %q", msg)
			}
			if !strings.HasPrefix(msg, "open postgres store: ") {
				t.Errorf("error %q, want prefix %q", msg, "open postgres store: ")
			}
		})
	}
	s, err := store.OpenPostgres(t.Context(), " ")
	if err == nil || !strings.Contains(err.Error(), "empty DSN") {
		t.Errorf("empty DSN: %v, %v", s, err)
	}
}

// TestOpenPostgres_ErrConnectNotEchoed checks the errors of well-formed
// DSNs that cannot work: nothing listening, a database that does not exist.
func TestOpenPostgres_ErrConnectNotEchoed(t *testing.T) {
	const secret = "hunter2-Secret"
	refused := "postgres://llmflow:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=5"
	nodb := withParam(t, pgDSN(t), "dbname", "llmflow_no_such_database")
	u, err := url.Parse(nodb)
	if err == nil && u.Scheme != "" {
		u.User = url.UserPassword(u.User.Username(), secret)
		nodb = u.String()
	} else {
		nodb += " password=" + secret
	}
	for name, dsn := range map[string]string{"Refused": refused, "NoDatabase": nodb} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			s, err := store.OpenPostgres(ctx, dsn)
			if err == nil {
				s.Close()
				t.Fatal("OpenPostgres succeeded")
			}
			msg := err.Error()
			t.Log(msg)
			if strings.Contains(msg, secret) || strings.Contains(msg, dsn) {
				t.Errorf("error echoes the DSN: %q", msg)
			}
		})
	}
}

// TestPostgres_TwoStoresOneDatabase stands for two gateways sharing a
// database: both write at once, some records through both; every record
// is stored and rolled up exactly once.
func TestPostgres_TwoStoresOneDatabase(t *testing.T) {
	dsn := pgSchema(t)
	stores := []*store.Postgres{MustOpenPostgres(t, dsn), MustOpenPostgres(t, dsn)}
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	const goroutines, batches, size = 8, 10, 100
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		s := stores[g%2]
		wg.Go(func() {
			for b := range batches {
				rs := make([]llmflow.Record, size)
				for i := range rs {
					// Goroutines g and g^1 (one per store) write the same
					// records: each pair shares its IDs.
					rs[i] = llmflow.Record{RequestID: fmt.Sprintf("g%d-b%d-%d", g/2, b, i), Time: base.Add(time.Duration(i) * time.Minute),
						Org: "o", PromptTokens: 1, GPUHours: 0.5, Tags: []string{"t"}}
				}
				if err := s.WriteRecords(t.Context(), rs); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	const want = goroutines / 2 * batches * size
	got, err := stores[1].Records(t.Context(), base, base.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != want {
		t.Errorf("Records: %d, want %d", len(got), want)
	}
	for i, s := range stores {
		for _, byTag := range []bool{false, true} {
			read := s.Rollups
			if byTag {
				read = s.RollupsByTag
			}
			ru, err := read(t.Context(), base, base.Add(24*time.Hour), llmflow.RollupFilter{Total: true, GroupBy: []string{"org"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(ru) != 1 || ru[0].Requests != want || ru[0].PromptTokens != want || ru[0].GPUHours != want*0.5 {
				t.Errorf("store %d byTag %v: rollups %+v, want %d requests", i, byTag, ru, want)
			}
		}
	}
}

type pgMigrationRow struct {
	Version   int
	AppliedAt time.Time
}

func pgMigrationRows(t *testing.T, dsn string) []pgMigrationRow {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), `SELECT version, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pgMigrationRow])
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestOpenPostgres_ConcurrentMigrations starts several gateways at once on
// a fresh schema: every one opens, and every migration is applied once.
func TestOpenPostgres_ConcurrentMigrations(t *testing.T) {
	dsn := pgSchema(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, err := store.OpenPostgres(t.Context(), dsn)
			if err == nil {
				err = s.WriteRecords(t.Context(), []llmflow.Record{{RequestID: fmt.Sprint(i), Time: time.Now()}})
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ms := pgMigrationRows(t, dsn)
	if len(ms) < 2 {
		t.Fatalf("schema_migrations: %+v", ms)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Errorf("schema_migrations: %+v, want versions 1..n once each", ms)
		}
	}
	// Re-opening applies nothing.
	MustOpenPostgres(t, dsn).Close()
	again := pgMigrationRows(t, dsn)
	if len(again) != len(ms) || !again[len(again)-1].AppliedAt.Equal(ms[len(ms)-1].AppliedAt) {
		t.Errorf("schema_migrations changed by re-opening: %+v, then %+v", ms, again)
	}
}

func TestOpenPostgres_ErrSchemaTooNew(t *testing.T) {
	dsn := pgSchema(t)
	MustOpenPostgres(t, dsn).Close()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES (9999, now())`); err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenPostgres(t.Context(), dsn)
	if err == nil {
		s.Close()
		t.Fatal("OpenPostgres on a newer schema: nil error")
	}
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("error %q does not wrap ErrSchemaTooNew", err)
	}
	for _, want := range []string{"open postgres store", "9999"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestPostgres_Reopen checks that keys, records, tags and rollups persist.
func TestPostgres_Reopen(t *testing.T) {
	dsn := pgSchema(t)
	created := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	k := storetest.NewKey("persist", created)
	k.Owner = "alice"
	rs := []llmflow.Record{
		{RequestID: "r1", Time: created, KeyID: k.ID, PromptTokens: 10, GPUHours: 0.5, Outcome: llmflow.OutcomeOK, Tags: []string{"x"}},
		{RequestID: "r2", Time: created.Add(time.Second), KeyID: k.ID, Stream: true},
	}
	s := MustOpenPostgres(t, dsn)
	if err := s.CreateKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRecords(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = MustOpenPostgres(t, dsn)
	got, err := s.Records(t.Context(), created, created.Add(time.Hour))
	if err != nil || len(got) != 2 || got[0].Tags[0] != "x" {
		t.Fatalf("records after reopen: %+v, %v", got, err)
	}
	ru, err := s.Rollups(t.Context(), created.Truncate(time.Hour), created.Add(time.Hour), llmflow.RollupFilter{})
	if err != nil || len(ru) != 1 || ru[0].Owner != "alice" || ru[0].Requests != 2 || !ru[0].Hour.Equal(created.Truncate(time.Hour)) {
		t.Fatalf("rollups after reopen: %+v, %v", ru, err)
	}
}

func TestPostgres_Accounts(t *testing.T) {
	pgDSN(t)
	storetest.RunAccounts(t, func(t *testing.T) storetest.AccountStore {
		return MustOpenPostgres(t, pgSchema(t))
	})
}

var _ storetest.OutboxStore = (*store.Postgres)(nil)

func TestPostgres_Outbox(t *testing.T) {
	pgDSN(t)
	storetest.RunOutbox(t, func(t *testing.T) func() storetest.OutboxStore {
		dsn := pgSchema(t)
		return func() storetest.OutboxStore { return MustOpenPostgres(t, dsn) }
	})
}

func TestPostgres_AccountLimits(t *testing.T) {
	pgDSN(t)
	storetest.RunAccountLimits(t, func(t *testing.T) storetest.AccountStore {
		return MustOpenPostgres(t, pgSchema(t))
	})
}

func TestPostgres_Admin(t *testing.T) {
	pgDSN(t)
	storetest.RunAdmin(t, func(t *testing.T) storetest.AdminStore {
		return MustOpenPostgres(t, pgSchema(t))
	})
}

func TestPostgres_RoleSync(t *testing.T) {
	pgDSN(t)
	storetest.RunRoleSync(t, func(t *testing.T) storetest.RoleSyncStore {
		return MustOpenPostgres(t, pgSchema(t))
	})
}

func TestPostgres_Replicas(t *testing.T) {
	pgDSN(t)
	storetest.RunReplicas(t, func(t *testing.T) storetest.ReplicaStore {
		return MustOpenPostgres(t, pgSchema(t))
	})
}
