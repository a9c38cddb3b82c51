package doctor

import (
	"context"
	"fmt"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/store"
)

// checkStore probes the store read-only: reachable, and its schema at a
// version this binary can serve (older: migrated at serve's start; newer:
// refused).
func (r *run) checkStore(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	st := r.cfg.Store
	var (
		sc    store.Schema
		err   error
		where string
	)
	switch st.Kind {
	case "postgres":
		where = "PostgreSQL (" + st.DSNFile + ")"
		var dsn string
		if dsn, err = config.ReadSecret(st.DSNFile); err == nil {
			sc, err = store.ProbePostgres(ctx, dsn)
		}
		if err == nil {
			r.clock(clockRef{source: "PostgreSQL", theirs: sc.Now, at: r.o.Now()})
		}
	default:
		where = "SQLite " + st.Path
		sc, err = store.ProbeSQLite(ctx, st.Path)
	}
	switch {
	case err != nil:
		fix := "start the database, check the DSN file's host, port, user and database, and that this host may connect (pg_hba.conf)"
		if st.Kind != "postgres" {
			fix = "create the store's directory, writable by the service user (the unit's StateDirectory does), or fix store { path }"
		}
		r.add(Finding{Check: "store", Status: Fail, Message: fmt.Sprintf("%s: %v", where, err), Fix: fix})
	case sc.TooNew():
		r.add(Finding{Check: "store", Status: Fail,
			Message: fmt.Sprintf("%s: schema version %d, this llmflow knows up to %d: serve refuses it", where, sc.Version, sc.Latest),
			Fix:     "run the llmflow release that migrated it, or a newer one"})
	case sc.Missing:
		r.add(Finding{Check: "store", Status: OK, Message: where + ": no file yet; serve creates it (mode 0600) and its schema"})
	case sc.Pending() > 0:
		r.add(Finding{Check: "store", Status: OK, Message: fmt.Sprintf("%s: reachable, schema version %d; serve applies %d migrations at its start", where, sc.Version, sc.Pending())})
	default:
		r.add(Finding{Check: "store", Status: OK, Message: fmt.Sprintf("%s: reachable, schema version %d (current)", where, sc.Version)})
	}
}
