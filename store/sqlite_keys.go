package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-llmflow/llmflow"
	sqlite3 "modernc.org/sqlite/lib"
)

// CreateKey stores k. It fails with ECONFLICT when a key with the same ID
// or the same Hash exists (revoked or not), and with EINVALID when k.ID is
// empty.
func (s *SQLite) CreateKey(ctx context.Context, k llmflow.Key) error {
	if k.ID == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "key id is required", Param: "id"}
	}
	tags, err := encodeTags(k.Tags)
	if err != nil {
		return fmt.Errorf("create key: %w", err)
	}
	_, err = s.write.ExecContext(ctx, `INSERT INTO keys (`+keyColumns+`)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Hash[:], k.Hint, k.Name, k.Org, k.Team, k.Project, k.Owner,
		k.RPM, k.TPM, k.MaxInFlight, tags, toMicros(k.CreatedAt), nullMicros(k.RevokedAt), k.Disabled)
	if err != nil {
		// The driver error names the column, never the values.
		switch sqliteCode(err) {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return &llmflow.Error{Code: llmflow.ECONFLICT, Message: fmt.Sprintf("key %s already exists", k.ID), Param: "id", Err: err}
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return &llmflow.Error{Code: llmflow.ECONFLICT, Message: "a key with the same secret already exists", Err: err}
		}
		return fmt.Errorf("create key: %w", err)
	}
	return nil
}

// KeyByHash returns the key whose secret hashes to hash, revoked or not:
// the caller checks Key.Active. It returns llmflow.ErrNotFound when there
// is none.
func (s *SQLite) KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error) {
	k, err := scanKey(s.keyByHash.QueryRowContext(ctx, hash[:]))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by hash: %w", err)
	}
	return k, nil
}

// KeyByID returns the key with the given ID, revoked or not, or
// llmflow.ErrNotFound.
func (s *SQLite) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	k, err := scanKey(s.read.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = ?`, id))
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by id: %w", err)
	}
	return k, nil
}

// ListKeys returns the keys matching f ordered by creation time, then ID.
// Revoked keys are included only with f.IncludeRevoked. It returns nil
// when nothing matches.
func (s *SQLite) ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error) {
	q, args := sqliteDialect.listKeysQuery(f)

	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	keys, err := scanRows(rows, func() (llmflow.Key, error) { return scanKey(rows) })
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return keys, nil
}

// RevokeKey marks the key revoked at the given time. Revoking a revoked key
// keeps the first revocation time and returns nil. It returns
// llmflow.ErrNotFound for an unknown ID and EINVALID for a zero time (which
// would mean "active").
func (s *SQLite) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "revocation time is required"}
	}
	// SQLite counts a matched row as changed even when COALESCE keeps the
	// old value, so zero rows means no such key.
	res, err := s.write.ExecContext(ctx, `UPDATE keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, toMicros(at), id)
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	if n == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanKey(row rowScanner) (llmflow.Key, error) {
	var (
		k       llmflow.Key
		hash    []byte
		tags    string
		created int64
		revoked sql.NullInt64
	)
	err := row.Scan(&k.ID, &hash, &k.Hint, &k.Name, &k.Org, &k.Team, &k.Project, &k.Owner,
		&k.RPM, &k.TPM, &k.MaxInFlight, &tags, &created, &revoked, &k.Disabled)
	if err != nil {
		return llmflow.Key{}, err
	}
	if len(hash) != len(k.Hash) {
		return llmflow.Key{}, fmt.Errorf("key %s: hash has %d bytes, want %d", k.ID, len(hash), len(k.Hash))
	}
	copy(k.Hash[:], hash)
	if k.Tags, err = decodeTags(tags); err != nil {
		return llmflow.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
	}
	k.CreatedAt = fromMicros(created)
	if revoked.Valid {
		k.RevokedAt = fromMicros(revoked.Int64)
	}
	return k, nil
}
