// Package store keeps keys and accounting records.
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
//   - Key.Tags are stored as a JSON array of strings in the given order.
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
// Files say which backend they belong to: sqlite*.go and postgres*.go hold
// each backend's type and its methods, one file per concern (keys,
// records, rollups, accounts, share usage). The code both share has no
// prefix: the SQL built for either backend (keys.go, rollup.go) takes a
// dialect (dialect.go), the one value per backend that says how its SQL
// differs; records.go and migrate.go hold the rest.
//
// The rollup filter and its dimensions are the domain's
// (llmflow.RollupFilter, llmflow.RollupDimensions); this package maps the
// dimensions to its columns.
package store
