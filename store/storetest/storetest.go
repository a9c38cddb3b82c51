// Package storetest is the contract every store implementation passes.
//
// An implementation's test calls Run with a function that opens a fresh,
// empty store for each subtest:
//
//	func TestSQLite(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Store {
//			s, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "llmflow.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The open function owns the store's lifetime (a t.Cleanup that closes it);
// the suite also closes stores itself, so Close must be safe to call twice.
package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/google/go-cmp/cmp"
)

// Store is what the suite tests: the methods every store implementation
// provides.
type Store interface {
	// CreateKey stores k. ECONFLICT when k.ID or k.Hash is taken, EINVALID
	// when k.ID is empty.
	CreateKey(ctx context.Context, k llmflow.Key) error
	// KeyByHash returns the key with the hash, revoked or not, or
	// llmflow.ErrNotFound.
	KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error)
	// KeyByID returns the key with the ID, revoked or not, or
	// llmflow.ErrNotFound.
	KeyByID(ctx context.Context, id string) (llmflow.Key, error)
	// ListKeys returns the matching keys ordered by CreatedAt, then ID.
	ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error)
	// RevokeKey sets RevokedAt unless it is already set. llmflow.ErrNotFound
	// for an unknown ID, EINVALID for a zero time.
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// RotateKey gives an active key a new hash and hint; the previous
	// hash stays findable (KeyByHash) with its validity's end.
	// llmflow.ErrNotFound for an unknown or revoked key.
	RotateKey(ctx context.Context, id string, hash [32]byte, hint string, prevUntil time.Time) error
	// WriteRecords stores a batch atomically; the first write of a
	// RequestID wins. EINVALID (nothing written) when a RequestID is empty.
	WriteRecords(ctx context.Context, rs []llmflow.Record) error
	// ClampedRecords counts the records WriteRecords stored with their
	// usage clamped (llmflow.Record.ClampUsage): out-of-bound counts
	// never fail a batch nor overflow a rollup.
	ClampedRecords() int64
	// Records returns from ≤ Time < to, ordered by Time, then RequestID.
	Records(ctx context.Context, from, to time.Time) ([]llmflow.Record, error)
	// SaveShareUsage replaces the saved fair-share usage of a pool and
	// records when it was taken. EINVALID for a zero time.
	SaveShareUsage(ctx context.Context, pool string, at time.Time, usage []llmflow.ShareUsage) error
	// ShareUsage returns a pool's saved usage ordered by path and when it
	// was saved; nothing and a zero time for a pool never saved.
	ShareUsage(ctx context.Context, pool string) ([]llmflow.ShareUsage, time.Time, error)
	// PurgeRecords deletes the records with Time < before, returning how
	// many; rollups stay.
	PurgeRecords(ctx context.Context, before time.Time) (int64, error)
	// Rollups returns the hourly rollups of the hours starting in
	// [from, to), selected and grouped by f, ordered by hour then the kept
	// dimensions. They are maintained by WriteRecords, count each
	// RequestID once and survive PurgeRecords.
	Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	// RollupsByTag is Rollups per tag: a request counts once under each
	// distinct tag, an untagged one under "".
	RollupsByTag(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	// Spend is RollupsByTag when f.NeedsTags, Rollups otherwise.
	Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error
	// Close releases the store; a second call returns without harm.
	Close() error
}

// base is a microsecond-aligned instant: stores keep microseconds.
var base = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// Run runs the contract suite. open must return a new, empty store each
// time it is called.
func Run(t *testing.T, open func(t *testing.T) Store) {
	t.Run("Ping", func(t *testing.T) { testPing(t, open(t)) })
	t.Run("ShareUsage", func(t *testing.T) {
		t.Run("Never", func(t *testing.T) { testShareUsageNever(t, open(t)) })
		t.Run("RoundTrip", func(t *testing.T) { testShareUsageRoundTrip(t, open(t)) })
		t.Run("ErrZeroTime", func(t *testing.T) { testShareUsageZeroTime(t, open(t)) })
	})
	t.Run("Close", func(t *testing.T) { testClose(t, open(t)) })

	t.Run("CreateKey", func(t *testing.T) {
		t.Run("RoundTrip", func(t *testing.T) { testKeyRoundTrip(t, open(t)) })
		t.Run("Minimal", func(t *testing.T) { testKeyMinimal(t, open(t)) })
		t.Run("CreatedRevoked", func(t *testing.T) { testKeyCreatedRevoked(t, open(t)) })
		t.Run("Tags", func(t *testing.T) { testKeyTags(t, open) })
		t.Run("ErrDuplicateID", func(t *testing.T) { testKeyDuplicateID(t, open(t)) })
		t.Run("ErrDuplicateHash", func(t *testing.T) { testKeyDuplicateHash(t, open(t)) })
		t.Run("ErrIDRequired", func(t *testing.T) { testKeyIDRequired(t, open(t)) })
	})
	t.Run("KeyByHash", func(t *testing.T) {
		t.Run("ErrNotFound", func(t *testing.T) { testKeyByHashNotFound(t, open(t)) })
		t.Run("Revoked", func(t *testing.T) { testKeyByHashRevoked(t, open(t)) })
	})
	t.Run("KeyByID", func(t *testing.T) {
		t.Run("ErrNotFound", func(t *testing.T) { testKeyByIDNotFound(t, open(t)) })
	})
	t.Run("ExpiryModels", func(t *testing.T) { testKeyExpiryModels(t, open(t)) })
	t.Run("RotateKey", func(t *testing.T) { testRotateKey(t, open(t)) })
	t.Run("RevokeKey", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) { testRevoke(t, open(t)) })
		t.Run("Idempotent", func(t *testing.T) { testRevokeIdempotent(t, open(t)) })
		t.Run("ErrNotFound", func(t *testing.T) { testRevokeNotFound(t, open(t)) })
		t.Run("ErrZeroTime", func(t *testing.T) { testRevokeZeroTime(t, open(t)) })
	})
	t.Run("ListKeys", func(t *testing.T) {
		t.Run("Empty", func(t *testing.T) { testListEmpty(t, open(t)) })
		t.Run("Filters", func(t *testing.T) { testListFilters(t, open(t)) })
		t.Run("Order", func(t *testing.T) { testListOrder(t, open(t)) })
	})
	t.Run("WriteRecords", func(t *testing.T) {
		t.Run("RoundTrip", func(t *testing.T) { testRecordRoundTrip(t, open(t)) })
		t.Run("Idempotent", func(t *testing.T) { testRecordIdempotent(t, open(t)) })
		t.Run("FirstWriteWins", func(t *testing.T) { testRecordFirstWriteWins(t, open(t)) })
		t.Run("Empty", func(t *testing.T) { testRecordEmpty(t, open(t)) })
		t.Run("ErrRequestIDRequired", func(t *testing.T) { testRecordIDRequired(t, open(t)) })
		t.Run("ClampsBadUsage", func(t *testing.T) { testRecordClamped(t, open(t)) })
	})
	t.Run("Records", func(t *testing.T) {
		t.Run("Range", func(t *testing.T) { testRecordsRange(t, open(t)) })
		t.Run("SubMicrosecondBounds", func(t *testing.T) { testRecordsSubMicro(t, open(t)) })
		t.Run("Order", func(t *testing.T) { testRecordsOrder(t, open(t)) })
	})
	t.Run("Rollups", func(t *testing.T) {
		t.Run("Basic", func(t *testing.T) { testRollupsBasic(t, open(t)) })
		t.Run("Idempotent", func(t *testing.T) { testRollupsIdempotent(t, open(t)) })
		t.Run("PurgeKeepsRollups", func(t *testing.T) { testRollupsPurge(t, open(t)) })
		t.Run("HourBoundaries", func(t *testing.T) { testRollupsHours(t, open(t)) })
		t.Run("Tags", func(t *testing.T) { testRollupsTags(t, open(t)) })
		t.Run("GroupBy", func(t *testing.T) { testRollupsGroupBy(t, open(t)) })
		t.Run("Filters", func(t *testing.T) { testRollupsFilters(t, open(t)) })
		t.Run("ErrInvalid", func(t *testing.T) { testRollupsInvalid(t, open(t)) })
		t.Run("Spend", func(t *testing.T) { testRollupsSpend(t, open(t)) })
		t.Run("ConcurrentDuplicates", func(t *testing.T) { testRollupsConcurrent(t, open(t)) })
	})
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, open(t)) })
}

// NewKey returns a valid key whose ID and hash derive from name.
func NewKey(name string, created time.Time) llmflow.Key {
	return llmflow.Key{
		ID:        "key_" + fmt.Sprintf("%x", sha256.Sum256([]byte("id:"+name)))[:16],
		Hash:      sha256.Sum256([]byte("llmf-" + name)),
		Hint:      "llmf-" + name[:min(4, len(name))],
		Name:      name,
		Org:       "org",
		Team:      "team",
		CreatedAt: created,
	}
}

func mustCreate(t *testing.T, s Store, keys ...llmflow.Key) {
	t.Helper()
	for _, k := range keys {
		if err := s.CreateKey(t.Context(), k); err != nil {
			t.Fatalf("CreateKey(%s): %v", k.ID, err)
		}
	}
}

func mustKeyByID(t *testing.T, s Store, id string) llmflow.Key {
	t.Helper()
	k, err := s.KeyByID(t.Context(), id)
	if err != nil {
		t.Fatalf("KeyByID(%s): %v", id, err)
	}
	return k
}

func mustWrite(t *testing.T, s Store, rs []llmflow.Record) {
	t.Helper()
	if err := s.WriteRecords(t.Context(), rs); err != nil {
		t.Fatalf("WriteRecords: %v", err)
	}
}

func mustRecords(t *testing.T, s Store, from, to time.Time) []llmflow.Record {
	t.Helper()
	rs, err := s.Records(t.Context(), from, to)
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	return rs
}

// checkCode fails unless err carries the code, and for ENOTFOUND unless it
// is also llmflow.ErrNotFound.
func checkCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := llmflow.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
	if code == llmflow.ENOTFOUND && !errors.Is(err, llmflow.ErrNotFound) {
		t.Fatalf("error %v: not errors.Is(err, llmflow.ErrNotFound)", err)
	}
}

func checkUTC(t *testing.T, what string, tm time.Time) {
	t.Helper()
	if !tm.IsZero() && tm.Location() != time.UTC {
		t.Errorf("%s: location %v, want UTC", what, tm.Location())
	}
}

func ids(keys []llmflow.Key) []string {
	var s []string
	for _, k := range keys {
		s = append(s, k.ID)
	}
	return s
}

func requestIDs(rs []llmflow.Record) []string {
	var s []string
	for _, r := range rs {
		s = append(s, r.RequestID)
	}
	return s
}

func testPing(t *testing.T, s Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testClose(t *testing.T, s Store) {
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Ping(t.Context()); err == nil {
		t.Error("Ping after Close: nil error")
	}
	if _, err := s.KeyByID(t.Context(), "key_x"); err == nil || errors.Is(err, llmflow.ErrNotFound) {
		t.Errorf("KeyByID after Close: %v, want a store error", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func testKeyRoundTrip(t *testing.T, s Store) {
	k := llmflow.Key{
		ID:          "key_0123456789abcdef",
		Hash:        sha256.Sum256([]byte("llmf-secret")),
		Hint:        "llmf-3f9a…",
		Name:        "Ünïcode name, with 'quotes' and \"double\"",
		Org:         "uni-x",
		Team:        "physics",
		Project:     "lattice-qcd",
		Owner:       "alice",
		RPM:         60,
		TPM:         100000,
		MaxInFlight: 8,
		Tags:        []string{"prod", "gpu:h100", "ünï"},
		// Not UTC: the store returns the same instant in UTC.
		CreatedAt: base.In(time.FixedZone("CET", 3600)),
	}
	mustCreate(t, s, k)

	want := k
	want.CreatedAt = k.CreatedAt.UTC()
	byID := mustKeyByID(t, s, k.ID)
	if diff := cmp.Diff(want, byID); diff != "" {
		t.Errorf("KeyByID (-want +got):\n%s", diff)
	}
	checkUTC(t, "KeyByID CreatedAt", byID.CreatedAt)
	byHash, err := s.KeyByHash(t.Context(), k.Hash)
	if err != nil {
		t.Fatalf("KeyByHash: %v", err)
	}
	if diff := cmp.Diff(want, byHash); diff != "" {
		t.Errorf("KeyByHash (-want +got):\n%s", diff)
	}
	list, err := s.ListKeys(t.Context(), llmflow.KeyFilter{})
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	if diff := cmp.Diff([]llmflow.Key{want}, list); diff != "" {
		t.Errorf("ListKeys (-want +got):\n%s", diff)
	}
	if !byID.Active() {
		t.Error("new key not Active")
	}
}

// testKeyMinimal stores a key with every optional field zero, CreatedAt
// included: zero values read back as zero values.
func testKeyMinimal(t *testing.T, s Store) {
	k := llmflow.Key{ID: "key_minimal", Hash: [32]byte{1}}
	mustCreate(t, s, k)
	got := mustKeyByID(t, s, k.ID)
	if diff := cmp.Diff(k, got); diff != "" {
		t.Errorf("KeyByID (-want +got):\n%s", diff)
	}
	if !got.CreatedAt.IsZero() || !got.RevokedAt.IsZero() {
		t.Errorf("times: created %v revoked %v, want zero", got.CreatedAt, got.RevokedAt)
	}
}

func testKeyCreatedRevoked(t *testing.T, s Store) {
	k := NewKey("revoked", base)
	k.RevokedAt = base.Add(time.Hour)
	mustCreate(t, s, k)
	got := mustKeyByID(t, s, k.ID)
	if diff := cmp.Diff(k, got); diff != "" {
		t.Errorf("KeyByID (-want +got):\n%s", diff)
	}
	if got.Active() {
		t.Error("revoked key Active")
	}
}

// testKeyTags checks the tags convention: order and content kept, no tags
// (nil or empty) read back as nil.
func testKeyTags(t *testing.T, open func(t *testing.T) Store) {
	tests := []struct {
		name string
		tags []string
		want []string
	}{
		{"Nil", nil, nil},
		{"Empty", []string{}, nil},
		{"One", []string{"a"}, []string{"a"}},
		{"OrderKept", []string{"z", "a", "m"}, []string{"z", "a", "m"}},
		{"Duplicates", []string{"a", "a"}, []string{"a", "a"}},
		{"EmptyString", []string{""}, []string{""}},
		{"Special", []string{`"quoted"`, "comma,semi;colon", "back\\slash", "ünï ✓", "[]", "null"},
			[]string{`"quoted"`, "comma,semi;colon", "back\\slash", "ünï ✓", "[]", "null"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			k := NewKey("tags", base)
			k.Tags = tt.tags
			mustCreate(t, s, k)
			got := mustKeyByID(t, s, k.ID)
			if tt.want == nil {
				if got.Tags != nil {
					t.Errorf("Tags = %#v, want nil", got.Tags)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got.Tags); diff != "" {
				t.Errorf("Tags (-want +got):\n%s", diff)
			}
		})
	}
}

func testKeyDuplicateID(t *testing.T, s Store) {
	k := NewKey("first", base)
	mustCreate(t, s, k)
	dup := NewKey("second", base.Add(time.Second))
	dup.ID = k.ID
	checkCode(t, s.CreateKey(t.Context(), dup), llmflow.ECONFLICT)
	if diff := cmp.Diff(k, mustKeyByID(t, s, k.ID)); diff != "" {
		t.Errorf("original changed (-want +got):\n%s", diff)
	}
	if _, err := s.KeyByHash(t.Context(), dup.Hash); !errors.Is(err, llmflow.ErrNotFound) {
		t.Errorf("KeyByHash(duplicate's hash): %v, want ErrNotFound", err)
	}
}

func testKeyDuplicateHash(t *testing.T, s Store) {
	k := NewKey("first", base)
	mustCreate(t, s, k)
	dup := NewKey("second", base.Add(time.Second))
	dup.Hash = k.Hash
	checkCode(t, s.CreateKey(t.Context(), dup), llmflow.ECONFLICT)
	if _, err := s.KeyByID(t.Context(), dup.ID); !errors.Is(err, llmflow.ErrNotFound) {
		t.Errorf("KeyByID(duplicate): %v, want ErrNotFound", err)
	}
	// A revoked key still holds its hash.
	if err := s.RevokeKey(t.Context(), k.ID, base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	checkCode(t, s.CreateKey(t.Context(), dup), llmflow.ECONFLICT)
}

func testKeyIDRequired(t *testing.T, s Store) {
	k := NewKey("noid", base)
	k.ID = ""
	checkCode(t, s.CreateKey(t.Context(), k), llmflow.EINVALID)
}

func testKeyByHashNotFound(t *testing.T, s Store) {
	mustCreate(t, s, NewKey("present", base))
	_, err := s.KeyByHash(t.Context(), sha256.Sum256([]byte("llmf-absent")))
	checkCode(t, err, llmflow.ENOTFOUND)
	_, err = s.KeyByHash(t.Context(), [32]byte{})
	checkCode(t, err, llmflow.ENOTFOUND)
}

func testKeyByIDNotFound(t *testing.T, s Store) {
	mustCreate(t, s, NewKey("present", base))
	for _, id := range []string{"key_absent", ""} {
		_, err := s.KeyByID(t.Context(), id)
		checkCode(t, err, llmflow.ENOTFOUND)
	}
}

func testKeyByHashRevoked(t *testing.T, s Store) {
	k := NewKey("k", base)
	mustCreate(t, s, k)
	at := base.Add(time.Hour)
	if err := s.RevokeKey(t.Context(), k.ID, at); err != nil {
		t.Fatal(err)
	}
	got, err := s.KeyByHash(t.Context(), k.Hash)
	if err != nil {
		t.Fatalf("KeyByHash(revoked): %v", err)
	}
	if got.Active() || !got.RevokedAt.Equal(at) {
		t.Errorf("RevokedAt = %v, want %v", got.RevokedAt, at)
	}
}

func testRevoke(t *testing.T, s Store) {
	k, other := NewKey("k", base), NewKey("other", base)
	mustCreate(t, s, k, other)
	at := base.Add(90 * time.Minute).In(time.FixedZone("EST", -5*3600))
	if err := s.RevokeKey(t.Context(), k.ID, at); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	got := mustKeyByID(t, s, k.ID)
	want := k
	want.RevokedAt = at.UTC()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("KeyByID (-want +got):\n%s", diff)
	}
	checkUTC(t, "RevokedAt", got.RevokedAt)
	if !mustKeyByID(t, s, other.ID).Active() {
		t.Error("other key revoked too")
	}
}

func testRevokeIdempotent(t *testing.T, s Store) {
	k := NewKey("k", base)
	mustCreate(t, s, k)
	first := base.Add(time.Hour)
	if err := s.RevokeKey(t.Context(), k.ID, first); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{first.Add(time.Hour), first.Add(-time.Minute), first} {
		if err := s.RevokeKey(t.Context(), k.ID, at); err != nil {
			t.Errorf("RevokeKey again at %v: %v", at, err)
		}
	}
	if got := mustKeyByID(t, s, k.ID).RevokedAt; !got.Equal(first) {
		t.Errorf("RevokedAt = %v, want the first revocation %v", got, first)
	}
}

func testRevokeNotFound(t *testing.T, s Store) {
	mustCreate(t, s, NewKey("present", base))
	checkCode(t, s.RevokeKey(t.Context(), "key_absent", base), llmflow.ENOTFOUND)
}

func testRevokeZeroTime(t *testing.T, s Store) {
	k := NewKey("k", base)
	mustCreate(t, s, k)
	checkCode(t, s.RevokeKey(t.Context(), k.ID, time.Time{}), llmflow.EINVALID)
	if !mustKeyByID(t, s, k.ID).Active() {
		t.Error("key revoked by a zero time")
	}
}

func testListEmpty(t *testing.T, s Store) {
	got, err := s.ListKeys(t.Context(), llmflow.KeyFilter{IncludeRevoked: true})
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	if len(got) != 0 {
		t.Errorf("ListKeys on an empty store: %d keys", len(got))
	}
}

func testListFilters(t *testing.T, s Store) {
	mk := func(name, org, team string, minute int, revoked bool) llmflow.Key {
		k := NewKey(name, base.Add(time.Duration(minute)*time.Minute))
		k.ID = "key_" + name
		k.Org, k.Team = org, team
		if revoked {
			k.RevokedAt = base.Add(time.Hour)
		}
		return k
	}
	keys := []llmflow.Key{
		mk("a1", "a", "t1", 1, false),
		mk("a2", "a", "t2", 2, false),
		mk("a3", "a", "t1", 3, true),
		mk("b1", "b", "t1", 4, false), // same team name under another org
		mk("b2", "b", "t3", 5, true),
		mk("c1", "c", "", 6, false), // no team
	}
	mustCreate(t, s, keys...)

	tests := []struct {
		name string
		f    llmflow.KeyFilter
		want []string
	}{
		{"All", llmflow.KeyFilter{}, []string{"key_a1", "key_a2", "key_b1", "key_c1"}},
		{"AllWithRevoked", llmflow.KeyFilter{IncludeRevoked: true}, []string{"key_a1", "key_a2", "key_a3", "key_b1", "key_b2", "key_c1"}},
		{"Org", llmflow.KeyFilter{Org: "a"}, []string{"key_a1", "key_a2"}},
		{"OrgWithRevoked", llmflow.KeyFilter{Org: "a", IncludeRevoked: true}, []string{"key_a1", "key_a2", "key_a3"}},
		{"Team", llmflow.KeyFilter{Team: "t1"}, []string{"key_a1", "key_b1"}},
		{"OrgTeam", llmflow.KeyFilter{Org: "a", Team: "t1"}, []string{"key_a1"}},
		{"OrgTeamWithRevoked", llmflow.KeyFilter{Org: "a", Team: "t1", IncludeRevoked: true}, []string{"key_a1", "key_a3"}},
		{"OnlyRevokedMatch", llmflow.KeyFilter{Org: "b", Team: "t3"}, nil},
		{"UnknownOrg", llmflow.KeyFilter{Org: "zzz", IncludeRevoked: true}, nil},
		{"OrgIsExact", llmflow.KeyFilter{Org: "A"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ListKeys(t.Context(), tt.f)
			if err != nil {
				t.Fatalf("ListKeys: %v", err)
			}
			if diff := cmp.Diff(tt.want, ids(got)); diff != "" {
				t.Errorf("ListKeys(%+v) IDs (-want +got):\n%s", tt.f, diff)
			}
		})
	}
}

func testListOrder(t *testing.T, s Store) {
	// Created out of order; b and c share a creation time and sort by ID.
	times := map[string]time.Time{
		"key_d": base.Add(-time.Hour),
		"key_c": base,
		"key_b": base,
		"key_a": base.Add(time.Microsecond),
		"key_e": base.Add(24 * time.Hour),
	}
	for _, id := range []string{"key_c", "key_a", "key_e", "key_b", "key_d"} {
		k := NewKey(id, times[id])
		k.ID = id
		mustCreate(t, s, k)
	}
	got, err := s.ListKeys(t.Context(), llmflow.KeyFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"key_d", "key_b", "key_c", "key_a", "key_e"}
	if diff := cmp.Diff(want, ids(got)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// fullRecord has every field set to a value distinct from the zero value.
func fullRecord(id string, tm time.Time) llmflow.Record {
	return llmflow.Record{
		Time:             tm,
		RequestID:        id,
		KeyID:            "key_0123456789abcdef",
		Project:          "lattice-qcd",
		Team:             "physics",
		Org:              "uni-x",
		Model:            "llama-3.1-70b",
		Pool:             "h100",
		Upstream:         "vllm-2",
		PromptTokens:     llmflow.MaxRecordTokens, // beyond 32 bits, at the bound: not clamped
		CompletionTokens: 345,
		CachedTokens:     128,
		GPUHours:         0.1 + 0.2, // not exactly 0.3: the float must survive bit for bit
		Status:           200,
		Outcome:          llmflow.OutcomeIncomplete,
		Estimated:        true,
		EstimateReason:   llmflow.EstimateIncomplete,
		Stream:           true,
		Priority:         -3,
		Preemptions:      2,
		RecomputedTokens: 1 << 33, // beyond 32 bits
		Latency:          1234567 * time.Microsecond,
		TTFB:             89 * time.Microsecond,
		Tags:             []string{"teaching", "ünï, \"q\"", "teaching"},
	}
}

func testRecordRoundTrip(t *testing.T, s Store) {
	full := fullRecord("req-full", base.In(time.FixedZone("JST", 9*3600)))
	zero := llmflow.Record{RequestID: "req-zero", Time: base.Add(time.Second)}
	mustWrite(t, s, []llmflow.Record{full, zero})

	got := mustRecords(t, s, base.Add(-time.Hour), base.Add(time.Hour))
	wantFull := full
	wantFull.Time = full.Time.UTC()
	if diff := cmp.Diff([]llmflow.Record{wantFull, zero}, got); diff != "" {
		t.Errorf("Records (-want +got):\n%s", diff)
	}
	for _, r := range got {
		checkUTC(t, r.RequestID+" Time", r.Time)
	}
}

func recordsAt(prefix string, n int, start time.Time) []llmflow.Record {
	rs := make([]llmflow.Record, n)
	for i := range rs {
		rs[i] = fullRecord(fmt.Sprintf("%s-%04d", prefix, i), start.Add(time.Duration(i)*time.Millisecond))
	}
	return rs
}

func testRecordIdempotent(t *testing.T, s Store) {
	batch := recordsAt("req", 10, base)
	mustWrite(t, s, batch)
	mustWrite(t, s, batch)
	// A batch overlapping the first, and a batch repeating a record inside itself.
	mustWrite(t, s, append(slices.Clone(batch[5:]), recordsAt("more", 2, base)...))
	mustWrite(t, s, []llmflow.Record{fullRecord("twice", base), fullRecord("twice", base)})

	got := mustRecords(t, s, base.Add(-time.Hour), base.Add(time.Hour))
	if len(got) != 13 {
		t.Fatalf("Records: %d records, want 13 (10 + 2 + 1): %v", len(got), requestIDs(got))
	}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.RequestID] {
			t.Errorf("request %s stored twice", r.RequestID)
		}
		seen[r.RequestID] = true
	}
}

func testRecordFirstWriteWins(t *testing.T, s Store) {
	first := fullRecord("req", base)
	mustWrite(t, s, []llmflow.Record{first})
	second := first
	second.CompletionTokens = 999
	second.Time = base.Add(time.Minute)
	mustWrite(t, s, []llmflow.Record{second})
	got := mustRecords(t, s, base.Add(-time.Hour), base.Add(time.Hour))
	if diff := cmp.Diff([]llmflow.Record{first}, got); diff != "" {
		t.Errorf("Records (-want +got):\n%s", diff)
	}
}

func testRecordEmpty(t *testing.T, s Store) {
	if err := s.WriteRecords(t.Context(), nil); err != nil {
		t.Errorf("WriteRecords(nil): %v", err)
	}
	if err := s.WriteRecords(t.Context(), []llmflow.Record{}); err != nil {
		t.Errorf("WriteRecords(empty): %v", err)
	}
	if got := mustRecords(t, s, time.Unix(0, 0), base.Add(time.Hour)); len(got) != 0 {
		t.Errorf("Records after empty writes: %v", requestIDs(got))
	}
}

func testRecordIDRequired(t *testing.T, s Store) {
	batch := recordsAt("req", 3, base)
	batch[2].RequestID = ""
	checkCode(t, s.WriteRecords(t.Context(), batch), llmflow.EINVALID)
	if got := mustRecords(t, s, base.Add(-time.Hour), base.Add(time.Hour)); len(got) != 0 {
		t.Errorf("invalid batch partly written: %v", requestIDs(got))
	}
}

func testRecordsRange(t *testing.T, s Store) {
	from, to := base, base.Add(time.Hour)
	at := func(id string, tm time.Time) llmflow.Record { return llmflow.Record{RequestID: id, Time: tm} }
	mustWrite(t, s, []llmflow.Record{
		at("before", from.Add(-time.Microsecond)),
		at("at-from", from),
		at("after-from", from.Add(time.Microsecond)),
		at("middle", from.Add(30*time.Minute)),
		at("before-to", to.Add(-time.Microsecond)),
		at("at-to", to),
		at("after", to.Add(time.Microsecond)),
	})
	tests := []struct {
		name     string
		from, to time.Time
		want     []string
	}{
		{"FromInclusiveToExclusive", from, to, []string{"at-from", "after-from", "middle", "before-to"}},
		{"Everything", from.Add(-time.Hour), to.Add(time.Hour), []string{"before", "at-from", "after-from", "middle", "before-to", "at-to", "after"}},
		{"OneMicrosecond", from, from.Add(time.Microsecond), []string{"at-from"}},
		{"OtherZone", from.In(time.FixedZone("X", -7*3600)), to.In(time.FixedZone("Y", 5*3600)), []string{"at-from", "after-from", "middle", "before-to"}},
		{"EmptyRange", from, from, nil},
		{"Reversed", to, from, nil},
		{"Nothing", to.Add(time.Hour), to.Add(2 * time.Hour), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustRecords(t, s, tt.from, tt.to)
			if diff := cmp.Diff(tt.want, requestIDs(got)); diff != "" {
				t.Errorf("Records(%v, %v) (-want +got):\n%s", tt.from, tt.to, diff)
			}
		})
	}
}

// testRecordsSubMicro queries with bounds finer than the stored precision:
// the comparison must still be exact against the stored instant.
func testRecordsSubMicro(t *testing.T, s Store) {
	mustWrite(t, s, []llmflow.Record{{RequestID: "r", Time: base}})
	tests := []struct {
		name     string
		from, to time.Time
		want     []string
	}{
		{"FromJustAfter", base.Add(time.Nanosecond), base.Add(time.Hour), nil},
		{"FromJustBefore", base.Add(-time.Nanosecond), base.Add(time.Hour), []string{"r"}},
		{"ToJustAfter", base.Add(-time.Hour), base.Add(time.Nanosecond), []string{"r"}},
		{"ToJustBefore", base.Add(-time.Hour), base.Add(-time.Nanosecond), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustRecords(t, s, tt.from, tt.to)
			if diff := cmp.Diff(tt.want, requestIDs(got)); diff != "" {
				t.Errorf("Records (-want +got):\n%s", diff)
			}
		})
	}
}

func testRecordsOrder(t *testing.T, s Store) {
	at := func(id string, d time.Duration) llmflow.Record {
		return llmflow.Record{RequestID: id, Time: base.Add(d)}
	}
	// Written out of order, in two batches; "b" and "a" share an instant.
	mustWrite(t, s, []llmflow.Record{at("z", 3*time.Second), at("b", time.Second), at("y", -time.Second)})
	mustWrite(t, s, []llmflow.Record{at("a", time.Second), at("x", 2*time.Second)})
	got := mustRecords(t, s, base.Add(-time.Hour), base.Add(time.Hour))
	want := []string{"y", "a", "b", "x", "z"}
	if diff := cmp.Diff(want, requestIDs(got)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// testConcurrent writes from 8 goroutines while 4 others read keys: no
// call may fail (in SQLite terms: SQLITE_BUSY must never surface), and
// every record must be stored exactly once.
func testConcurrent(t *testing.T, s Store) {
	const (
		writers = 8
		batches = 10
		size    = 25
		readers = 4
	)
	keys := make([]llmflow.Key, 16)
	for i := range keys {
		keys[i] = NewKey(fmt.Sprintf("concurrent-%d", i), base)
	}
	mustCreate(t, s, keys...)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, writers+readers)
	var wwg, rwg sync.WaitGroup
	for w := range writers {
		wwg.Go(func() {
			for b := range batches {
				rs := recordsAt(fmt.Sprintf("w%d-b%d", w, b), size, base.Add(time.Duration(w)*time.Minute))
				// Every writer also repeats one record of writer 0's first batch.
				rs = append(rs, fullRecord("w0-b0-0000", base))
				if err := s.WriteRecords(t.Context(), rs); err != nil {
					errc <- fmt.Errorf("writer %d batch %d: %w", w, b, err)
					return
				}
			}
		})
	}
	var reads sync.Map
	for r := range readers {
		rwg.Go(func() {
			n := 0
			for i := 0; ctx.Err() == nil || n == 0; i++ {
				k := keys[(i+r)%len(keys)]
				got, err := s.KeyByHash(t.Context(), k.Hash)
				if err != nil {
					errc <- fmt.Errorf("reader %d: KeyByHash: %w", r, err)
					return
				}
				if got.ID != k.ID {
					errc <- fmt.Errorf("reader %d: KeyByHash returned %s, want %s", r, got.ID, k.ID)
					return
				}
				n++
			}
			reads.Store(r, n)
		})
	}
	wwg.Wait()
	cancel()
	rwg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	got := mustRecords(t, s, base.Add(-time.Hour), base.Add(time.Hour))
	if want := writers * batches * size; len(got) != want {
		t.Errorf("Records: %d, want %d", len(got), want)
	}
	if n := rollupRequests(t, s, base.Add(-time.Hour), base.Add(time.Hour)); n != writers*batches*size {
		t.Errorf("rollups count %d requests, want %d", n, writers*batches*size)
	}
	reads.Range(func(r, n any) bool {
		t.Logf("reader %d: %d lookups", r, n)
		return true
	})
}

// testKeyExpiryModels: a key's expiry and model list round-trip; a key
// without them reads back without them.
func testKeyExpiryModels(t *testing.T, s Store) {
	k := NewKey("expiring", base)
	k.ExpiresAt = base.Add(72 * time.Hour)
	k.Models = []string{"llama-3.3-70b", "org/model:v2"}
	mustCreate(t, s, k)
	if diff := cmp.Diff(k, mustKeyByID(t, s, k.ID)); diff != "" {
		t.Errorf("KeyByID (-want +got):\n%s", diff)
	}
	byHash, err := s.KeyByHash(t.Context(), k.Hash)
	if err != nil || !byHash.ExpiresAt.Equal(k.ExpiresAt) || len(byHash.Models) != 2 {
		t.Errorf("KeyByHash: %+v %v", byHash, err)
	}
}

// testRotateKey: after a rotation the key has its new hash and hint, is
// found by both secrets, and carries the previous hash with the end of
// its grace; a second rotation drops the first secret; a revoked or
// unknown key cannot be rotated.
func testRotateKey(t *testing.T, s Store) {
	k := NewKey("rotated", base)
	mustCreate(t, s, k)
	next, until := [32]byte{0xa1, 0xb2}, base.Add(time.Hour)
	if err := s.RotateKey(t.Context(), k.ID, next, "llmf-next", until); err != nil {
		t.Fatalf("RotateKey: %v", err)
	}
	want := k
	want.Hash, want.Hint, want.PrevHash, want.PrevExpiresAt = next, "llmf-next", k.Hash, until
	for _, h := range [][32]byte{next, k.Hash} {
		got, err := s.KeyByHash(t.Context(), h)
		if err != nil {
			t.Fatalf("KeyByHash(%x): %v", h[:2], err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("KeyByHash(%x) (-want +got):\n%s", h[:2], diff)
		}
	}
	third := [32]byte{0xc3}
	if err := s.RotateKey(t.Context(), k.ID, third, "llmf-third", base.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyByHash(t.Context(), k.Hash); !errors.Is(err, llmflow.ErrNotFound) {
		t.Errorf("the first secret after two rotations: %v, want ErrNotFound", err)
	}
	if got, err := s.KeyByHash(t.Context(), next); err != nil || got.Hash != third || got.PrevHash != next {
		t.Errorf("the second secret: %+v %v", got, err)
	}
	if err := s.RevokeKey(t.Context(), k.ID, base.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{k.ID, "key_nope"} {
		if err := s.RotateKey(t.Context(), id, [32]byte{0xd4}, "x", base); !errors.Is(err, llmflow.ErrNotFound) {
			t.Errorf("rotate %s: %v, want ErrNotFound", id, err)
		}
	}
}
