package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/go-llmflow/llmflow"
)

// CreateKey stores k. It fails with ECONFLICT when a key with the same ID
// or the same Hash exists (revoked or not), and with EINVALID when k.ID is
// empty.
func (s *Postgres) CreateKey(ctx context.Context, k llmflow.Key) error {
	if k.ID == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "key id is required", Param: "id"}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO keys (`+keyColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
		k.ID, k.Hash[:], k.Hint, k.Name, k.Org, k.Team, k.Project, k.Owner,
		k.RPM, k.TPM, k.MaxInFlight, nonNil(k.Tags), pgTime(k.CreatedAt), pgNullTime(k.RevokedAt), k.Disabled)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			switch pe.ConstraintName {
			case "keys_pkey":
				return &llmflow.Error{Code: llmflow.ECONFLICT, Message: fmt.Sprintf("key %s already exists", k.ID), Param: "id", Err: err}
			case "keys_hash_key":
				return &llmflow.Error{Code: llmflow.ECONFLICT, Message: "a key with the same secret already exists", Err: err}
			}
		}
		return fmt.Errorf("create key: %w", err)
	}
	return nil
}

// KeyByHash returns the key whose secret hashes to hash, revoked or not,
// or llmflow.ErrNotFound.
func (s *Postgres) KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error) {
	k, err := pgScanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE hash = $1`, hash[:]))
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by hash: %w", err)
	}
	return k, nil
}

// KeyByID returns the key with the given ID, revoked or not, or
// llmflow.ErrNotFound.
func (s *Postgres) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	k, err := pgScanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = $1`, id))
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return llmflow.Key{}, llmflow.ErrNotFound
		}
		return llmflow.Key{}, fmt.Errorf("key by id: %w", err)
	}
	return k, nil
}

// ListKeys returns the keys matching f ordered by creation time, then ID.
// Revoked keys are included only with f.IncludeRevoked. It returns nil
// when nothing matches.
func (s *Postgres) ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error) {
	q, args := postgresDialect.listKeysQuery(f)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	keys, err := scanRows(rows, func() (llmflow.Key, error) { return pgScanKey(rows) })
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return keys, nil
}

// RevokeKey marks the key revoked at the given time, keeping the first
// revocation time of a revoked key. llmflow.ErrNotFound for an unknown ID,
// EINVALID for a zero time.
func (s *Postgres) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "revocation time is required"}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, pgTime(at), id)
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return llmflow.ErrNotFound
	}
	return nil
}

func pgScanKey(row pgx.Row) (llmflow.Key, error) {
	var (
		k       llmflow.Key
		hash    []byte
		created time.Time
		revoked *time.Time
	)
	err := row.Scan(&k.ID, &hash, &k.Hint, &k.Name, &k.Org, &k.Team, &k.Project, &k.Owner,
		&k.RPM, &k.TPM, &k.MaxInFlight, &k.Tags, &created, &revoked, &k.Disabled)
	if err != nil {
		return llmflow.Key{}, err
	}
	if len(hash) != len(k.Hash) {
		return llmflow.Key{}, fmt.Errorf("key %s: hash has %d bytes, want %d", k.ID, len(hash), len(k.Hash))
	}
	copy(k.Hash[:], hash)
	k.Tags = nilIfEmpty(k.Tags)
	k.CreatedAt = created.UTC()
	if revoked != nil {
		k.RevokedAt = revoked.UTC()
	}
	return k, nil
}
