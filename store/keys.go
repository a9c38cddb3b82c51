package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// keyColumns are the columns of keys in the order scanKey reads them.
const keyColumns = `id, hash, hint, name, org, team, project, owner, rpm, tpm, max_inflight, tags, created_at, revoked_at, disabled, ` +
	`expires_at, models, prev_hash, prev_expires_at`

// keyByHashSQL is the read of the request path (on a cache miss); SQLite
// prepares it.
// A rotated key is found by its previous secret too (its grace period is
// the caller's to check: llmflow.Key.Matches).
const keyByHashSQL = `SELECT ` + keyColumns + ` FROM keys WHERE hash = ? UNION ALL SELECT ` + keyColumns + ` FROM keys WHERE prev_hash = ?`

// CreateKey stores k. It fails with ECONFLICT when a key with the same ID
// or the same Hash exists (revoked or not), and with EINVALID when k.ID is
// empty.
func (a *sqlDB) CreateKey(ctx context.Context, k llmflow.Key) error {
	if k.ID == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "key id is required", Param: "id"}
	}
	_, err := a.write.exec(ctx, `INSERT INTO keys (`+keyColumns+`) VALUES (`+params(19)+`)`,
		k.ID, k.Hash[:], k.Hint, k.Name, k.Org, k.Team, k.Project, k.Owner,
		k.RPM, k.TPM, k.MaxInFlight, a.list(k.Tags), a.time(k.CreatedAt), a.nullTime(k.RevokedAt), k.Disabled,
		a.nullTime(k.ExpiresAt), a.list(k.Models), nullHash(k.PrevHash), a.nullTime(k.PrevExpiresAt))
	switch {
	case err == nil:
		return nil
	case a.primary(err): // the driver error names the column, never the values
		return &llmflow.Error{Code: llmflow.ECONFLICT, Message: fmt.Sprintf("key %s already exists", k.ID), Param: "id", Err: err}
	case a.unique(err):
		return &llmflow.Error{Code: llmflow.ECONFLICT, Message: "a key with the same secret already exists", Err: err}
	}
	return fmt.Errorf("create key: %w", err)
}

// KeyByHash returns the key whose secret hashes to hash, revoked or not:
// the caller checks Key.Active. It returns llmflow.ErrNotFound when there
// is none.
func (a *sqlDB) KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error) {
	return a.key(ctx, "key by hash", keyByHashSQL, hash[:], hash[:])
}

// KeyByID returns the key with the given ID, revoked or not, or
// llmflow.ErrNotFound.
func (a *sqlDB) KeyByID(ctx context.Context, id string) (llmflow.Key, error) {
	return a.key(ctx, "key by id", `SELECT `+keyColumns+` FROM keys WHERE id = ?`, id)
}

func (a *sqlDB) key(ctx context.Context, what, q string, args ...any) (llmflow.Key, error) {
	var k keyRow
	if err := a.one(ctx, what, q, args, a.keyDest(&k)...); err != nil {
		return llmflow.Key{}, err
	}
	key, err := k.key()
	if err != nil {
		return llmflow.Key{}, fmt.Errorf("%s: %w", what, err)
	}
	return key, nil
}

// ListKeys returns the keys matching f ordered by creation time, then ID.
// Revoked keys are included only with f.IncludeRevoked. It returns nil
// when nothing matches.
func (a *sqlDB) ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error) {
	q, args := listKeysQuery(f)
	return all(ctx, a.read, "list keys", q, args, func(rows dbRows) (llmflow.Key, error) {
		var k keyRow
		if err := rows.Scan(a.keyDest(&k)...); err != nil {
			return llmflow.Key{}, err
		}
		return k.key()
	})
}

// listKeysQuery is the ListKeys query.
func listKeysQuery(f llmflow.KeyFilter) (string, []any) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"org", f.Org}, {"team", f.Team}} {
		if c.v != "" {
			args = append(args, c.v)
			where = append(where, c.col+" = ?")
		}
	}
	if !f.IncludeRevoked {
		where = append(where, "revoked_at IS NULL")
	}
	q := `SELECT ` + keyColumns + ` FROM keys`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	return q + ` ORDER BY created_at, id`, args
}

// RevokeKey marks the key revoked at the given time. Revoking a revoked key
// keeps the first revocation time and returns nil. It returns
// llmflow.ErrNotFound for an unknown ID and EINVALID for a zero time (which
// would mean "active").
func (a *sqlDB) RevokeKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "revocation time is required"}
	}
	// Both backends count a matched row as changed even when COALESCE
	// keeps the old value, so zero rows means no such key.
	return execOne(ctx, a.write, "revoke key", `UPDATE keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, a.time(at), id)
}

// SetKeyLimits sets a key's rpm, tpm and max_inflight (0 = unlimited).
// llmflow.ErrNotFound for an unknown ID; EINVALID for a negative limit.
func (a *sqlDB) SetKeyLimits(ctx context.Context, id string, rpm, tpm, maxInFlight int) error {
	if err := (llmflow.Key{RPM: rpm, TPM: tpm, MaxInFlight: maxInFlight}).Validate(); err != nil {
		return err
	}
	return execOne(ctx, a.write, "set key limits", `UPDATE keys SET rpm = ?, tpm = ?, max_inflight = ? WHERE id = ?`, rpm, tpm, maxInFlight, id)
}

// SetKeyDisabled deactivates (true) or reactivates (false) a key.
// llmflow.ErrNotFound for an unknown ID. A revoked key stays revoked.
func (a *sqlDB) SetKeyDisabled(ctx context.Context, id string, disabled bool) error {
	return execOne(ctx, a.write, "set key disabled", `UPDATE keys SET disabled = ? WHERE id = ?`, disabled, id)
}

// RotateKey gives the active key id a new secret (its hash and hint);
// the previous one stays valid until prevUntil (a time not after now
// ends it at once). llmflow.ErrNotFound for an unknown or revoked key.
func (a *sqlDB) RotateKey(ctx context.Context, id string, hash [32]byte, hint string, prevUntil time.Time) error {
	err := execOne(ctx, a.write, "rotate key",
		`UPDATE keys SET prev_hash = hash, prev_expires_at = ?, hash = ?, hint = ? WHERE id = ? AND revoked_at IS NULL`,
		a.nullTime(prevUntil), hash[:], hint, id)
	if err != nil && a.unique(err) {
		return &llmflow.Error{Code: llmflow.ECONFLICT, Message: "a key with the same secret already exists", Err: err}
	}
	return err
}

// nullHash is a hash column's value: NULL for the zero hash.
func nullHash(h [32]byte) any {
	if h == ([32]byte{}) {
		return nil
	}
	return h[:]
}

// keyRow is a row of keys as scanned.
type keyRow struct {
	k        llmflow.Key
	hash     []byte
	prevHash []byte
}

// keyDest returns the scan destinations of keyColumns.
func (a *sqlDB) keyDest(r *keyRow) []any {
	k := &r.k
	return []any{&k.ID, &r.hash, &k.Hint, &k.Name, &k.Org, &k.Team, &k.Project, &k.Owner,
		&k.RPM, &k.TPM, &k.MaxInFlight, a.listDest(&k.Tags), dbTime{&k.CreatedAt}, dbTime{&k.RevokedAt}, &k.Disabled,
		dbTime{&k.ExpiresAt}, a.listDest(&k.Models), &r.prevHash, dbTime{&k.PrevExpiresAt}}
}

func (r *keyRow) key() (llmflow.Key, error) {
	k := r.k
	if len(r.hash) != len(k.Hash) {
		return llmflow.Key{}, fmt.Errorf("key %s: hash has %d bytes, want %d", k.ID, len(r.hash), len(k.Hash))
	}
	copy(k.Hash[:], r.hash)
	switch len(r.prevHash) {
	case 0:
	case len(k.PrevHash):
		copy(k.PrevHash[:], r.prevHash)
	default:
		return llmflow.Key{}, fmt.Errorf("key %s: previous hash has %d bytes, want %d", k.ID, len(r.prevHash), len(k.PrevHash))
	}
	k.Tags = nilIfEmpty(k.Tags)
	k.Models = nilIfEmpty(k.Models)
	return k, nil
}
