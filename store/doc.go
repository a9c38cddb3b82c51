// Package store is llmflow's storage: API keys, accounting records and
// their hourly rollups, the account tree and its Slurm import runs,
// budgets, saved fair-share usage, the delegated-administration tables
// (users, admin tokens, roles, audit), runtime routing rows and the alert
// outbox.
//
// SQLite (modernc.org/sqlite, pure Go) is the embedded default; PostgreSQL
// (pgx/v5, pure Go) is for production and for several gateways sharing one
// database. Both have the same methods and pass the contract tests in
// store/storetest (the PostgreSQL run needs LLMFLOW_TEST_PG_DSN).
//
// Conventions shared by every implementation:
//
//   - Times are stored with microsecond precision (SQLite: INTEGER unix
//     microseconds UTC; PostgreSQL: timestamptz; sub-microsecond digits are
//     truncated) and are returned in UTC. Durations (Record.Latency, Record.TTFB) are stored
//     as whole microseconds.
//   - Key.RevokedAt's zero value is stored as NULL and means active.
//   - Key.Tags are stored as a list in the given order (SQLite: a JSON
//     array of strings; PostgreSQL: text[]).
//     A key with no tags, whether Tags was nil or empty, reads back with
//     Tags == nil.
//   - Lookups that find nothing return llmflow.ErrNotFound (code
//     ENOTFOUND); duplicates return an *llmflow.Error with code ECONFLICT.
//     Other errors are internal and may name files or SQL, never secrets.
//   - Records are idempotent per RequestID: the first write wins and later
//     writes of the same RequestID are ignored. Record.Tags follow the
//     convention of Key.Tags.
//   - Hourly rollups (llmflow.Rollup) are maintained by WriteRecords in the
//     same transaction as the records, from the records actually inserted,
//     so a record written twice is counted once. Hours are UTC hours. The
//     rollup's Owner is the key's owner when the record was written. A
//     second table keeps them per tag: a request counts once under each
//     distinct tag, an untagged request under "". Reports read rollups
//     (Rollups, RollupsByTag), never raw records, which PurgeRecords may
//     delete after the configured retention while the rollups stay.
//   - Text sorts by bytes (PostgreSQL columns are COLLATE "C"), whatever
//     the locale.
//
// Schemas are versioned by numbered files under migrations/<backend>/
// (sqlite, postgres), embedded in the binary and applied in order at open,
// each in its own transaction, and tracked in
// schema_migrations(version, applied_at).
//
// The SQL is written once (sql.go): methods on sqlDB, with ? parameters
// that PostgreSQL's querier rebinds to $1, $2, …, scanning times and lists
// through types that read either backend's columns. Each backend adapts
// its driver to it (sqlite_db.go, postgres_db.go: how to query, the column
// conversions, the few SQL words that differ). The files prefixed sqlite
// and postgres keep only what really differs: opening and migrating
// (sqlite.go, postgres.go), the bulk write of records (a staging table
// filled by multi-row INSERTs; COPY), and the outbox claim (the single
// writer; FOR UPDATE SKIP LOCKED).
//
// The rollup filter and its dimensions are the domain's
// (llmflow.RollupFilter, llmflow.RollupDimensions); this package maps the
// dimensions to its columns.
package store
