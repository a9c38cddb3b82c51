// Package store keeps keys and accounting records.
//
// SQLite (modernc.org/sqlite, pure Go) is the embedded default; a
// PostgreSQL store will follow with the same methods. Both are checked by
// the contract tests in store/storetest.
//
// Conventions shared by every implementation:
//
//   - Times are stored with microsecond precision (SQLite: INTEGER unix
//     microseconds UTC; sub-microsecond digits are truncated) and are
//     returned in UTC. Durations (Record.Latency, Record.TTFB) are stored
//     as whole microseconds.
//   - Key.RevokedAt's zero value is stored as NULL and means active.
//   - Key.Tags are stored as a JSON array of strings in the given order.
//     A key with no tags, whether Tags was nil or empty, reads back with
//     Tags == nil.
//   - Lookups that find nothing return llmflow.ErrNotFound (code
//     ENOTFOUND); duplicates return an *llmflow.Error with code ECONFLICT.
//     Other errors are internal and may name files or SQL, never secrets.
//   - Records are idempotent per RequestID: the first write wins and later
//     writes of the same RequestID are ignored.
//
// Schemas are versioned by numbered files under migrations/<dialect>/,
// embedded in the binary and applied in order at open, each in its own
// transaction, and tracked in schema_migrations(version, applied_at).
package store
