package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
)

func newTestAuth(keys *gatewaytest.Keys, perMinute int) *authenticator {
	return &authenticator{
		store:   keys,
		hits:    newKeyCache(100_000, time.Minute),
		misses:  newMissCache(100_000, 30*time.Second),
		limiter: newFailureLimiter(perMinute, 100_000),
	}
}

func addKey(t testing.TB, keys *gatewaytest.Keys) (string, llmflow.Key) {
	secret, hash, hint := llmflow.NewKeySecret()
	k := llmflow.Key{ID: llmflow.NewID("key_"), Hash: hash, Hint: hint, Team: "lab-nlp", Org: "etabA"}
	keys.CreateKey(context.Background(), k)
	return secret, k
}

func TestNewKeySecret(t *testing.T) {
	s, h, hint := llmflow.NewKeySecret()
	if !strings.HasPrefix(s, "llmf-") || len(s) != 5+64 {
		t.Fatalf("secret %q: want llmf- and 64 hex digits", s)
	}
	if _, err := hex.DecodeString(s[5:]); err != nil {
		t.Fatal(err)
	}
	if h != sha256.Sum256([]byte(s)) {
		t.Fatal("hash is not SHA-256 of the secret")
	}
	if !strings.HasPrefix(s, strings.TrimSuffix(hint, "…")) || len(hint) > 15 {
		t.Errorf("hint %q", hint)
	}
	s2, _, _ := llmflow.NewKeySecret()
	if s == s2 {
		t.Fatal("two secrets are equal")
	}
}

// A spray of 200,000 random keys must not evict a valid key: the valid key
// keeps being served from the cache without reaching the store.
func TestRandomKeySprayDoesNotEvictValidKey(t *testing.T) {
	keys := gatewaytest.NewKeys()
	a := newTestAuth(keys, 0) // the failure limit would stop the spray early; test the caches alone
	secret, _ := addKey(t, keys)
	now := time.Unix(1_800_000_000, 0)
	ctx := context.Background()
	if _, err := a.authenticate(ctx, "Bearer "+secret, "192.0.2.1:1234", now); err != nil {
		t.Fatal(err)
	}
	before := keys.Lookups.Load()
	var b [32]byte
	for i := range 200_000 {
		rand.Read(b[:])
		_, err := a.authenticate(ctx, "Bearer llmf-"+hex.EncodeToString(b[:]), "198.51.100.7:1", now)
		if !errors.Is(err, errBadKey) {
			t.Fatalf("random key %d: %v", i, err)
		}
		if i%50_000 == 0 {
			if _, err := a.authenticate(ctx, "Bearer "+secret, "192.0.2.1:1234", now); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := keys.Lookups.Load() - before; got != 200_000 {
		t.Errorf("store lookups during the spray: %d, want one per random key", got)
	}
	before = keys.Lookups.Load()
	ck, err := a.authenticate(ctx, "Bearer "+secret, "192.0.2.1:1234", now)
	if err != nil || ck == nil {
		t.Fatalf("valid key after the spray: %v", err)
	}
	if keys.Lookups.Load() != before {
		t.Error("valid key was evicted: it reached the store again")
	}
	if n := a.hits.Len(); n != 1 {
		t.Errorf("valid-key cache holds %d entries, want 1", n)
	}
	if n := a.misses.Len(); n > 100_000 {
		t.Errorf("miss cache holds %d entries, bound %d", n, 100_000)
	}
}

func TestKeyCacheBoundedEviction(t *testing.T) {
	c := newKeyCache(3, time.Minute)
	now := time.Unix(0, 0)
	var hs [5][32]byte
	for i := range hs {
		hs[i][0] = byte(i + 1)
		c.Put(hs[i], &cachedKey{key: llmflow.Key{Hash: hs[i]}}, now)
	}
	if c.Len() != 3 {
		t.Fatalf("len %d, want 3", c.Len())
	}
	for i, want := range []bool{false, false, true, true, true} {
		if e, _, _ := c.Get(hs[i], now); (e != nil) != want {
			t.Errorf("key %d cached = %v, want %v (oldest evicted one at a time)", i, e != nil, want)
		}
	}
}

// ForgetAllKeys empties the caches and their eviction order: a key cached
// again afterwards is not evicted by the place it (or another key) held
// before, while the cache is not full.
func TestForgetAllKeysThenRecache(t *testing.T) {
	keys := gatewaytest.NewKeys()
	a := newTestAuth(keys, 0)
	a.hits = newKeyCache(2, time.Minute)
	g := &Gateway{auth: a}
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	s1, _ := addKey(t, keys)
	s2, _ := addKey(t, keys)
	s3, _ := addKey(t, keys)
	for _, s := range []string{s1, s2} {
		if _, err := a.authenticate(ctx, "Bearer "+s, "192.0.2.1:1", now); err != nil {
			t.Fatal(err)
		}
	}
	g.ForgetAllKeys()
	if a.hits.Len() != 0 {
		t.Fatalf("valid-key cache holds %d entries after ForgetAllKeys", a.hits.Len())
	}
	for _, s := range []string{s2, s3} { // two keys: the cache holds both
		if _, err := a.authenticate(ctx, "Bearer "+s, "192.0.2.1:1", now); err != nil {
			t.Fatal(err)
		}
	}
	before := keys.Lookups.Load()
	for _, s := range []string{s2, s3} {
		if _, err := a.authenticate(ctx, "Bearer "+s, "192.0.2.1:1", now); err != nil {
			t.Fatal(err)
		}
	}
	if n := keys.Lookups.Load() - before; n != 0 {
		t.Errorf("%d store lookups for two keys cached after ForgetAllKeys, want 0 (evicted early)", n)
	}
}

func TestFailureLimitPerNetwork(t *testing.T) {
	keys := gatewaytest.NewKeys()
	a := newTestAuth(keys, 5)
	secret, _ := addKey(t, keys)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	// warm the cache for the valid key from the attacked network
	if _, err := a.authenticate(ctx, "Bearer "+secret, "203.0.113.9:5", now); err != nil {
		t.Fatal(err)
	}
	bad := "Bearer llmf-" + strings.Repeat("0", 64)
	for i := range 5 {
		if _, err := a.authenticate(ctx, bad, "203.0.113.9:5", now); !errors.Is(err, errBadKey) {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	lookups := keys.Lookups.Load()
	_, err := a.authenticate(ctx, "Bearer llmf-"+strings.Repeat("1", 64), "203.0.113.9:6", now)
	if llmflow.ErrorCode(err) != llmflow.ERATELIMIT {
		t.Fatalf("6th failure: %v, want rate limited", err)
	}
	if keys.Lookups.Load() != lookups {
		t.Error("a limited network reached the store")
	}
	var ra *retryAfter
	if !errors.As(err, &ra) || ra.after <= 0 || ra.after > time.Minute {
		t.Errorf("no sensible Retry-After: %v", err)
	}
	// a valid key already cached still works from the limited network
	if _, err := a.authenticate(ctx, "Bearer "+secret, "203.0.113.9:7", now); err != nil {
		t.Errorf("cached valid key refused on a limited network: %v", err)
	}
	// other networks are unaffected; IPv6 is limited per /64
	if _, err := a.authenticate(ctx, bad, "203.0.113.10:5", now); !errors.Is(err, errBadKey) {
		t.Errorf("another IPv4 address: %v", err)
	}
	for i := range 5 {
		a.authenticate(ctx, bad, "[2001:db8:1:2::"+string(rune('a'+i))+"]:1", now)
	}
	if _, err := a.authenticate(ctx, bad, "[2001:db8:1:2:ffff::1]:1", now); llmflow.ErrorCode(err) != llmflow.ERATELIMIT {
		t.Errorf("same /64: %v, want rate limited", err)
	}
	if _, err := a.authenticate(ctx, bad, "[2001:db8:1:3::1]:1", now); !errors.Is(err, errBadKey) {
		t.Errorf("another /64: %v", err)
	}
	// the bucket refills over a minute
	if _, err := a.authenticate(ctx, bad, "203.0.113.9:5", now.Add(13*time.Second)); !errors.Is(err, errBadKey) {
		t.Errorf("after refill: %v", err)
	}
}

// A key revoked elsewhere (another gateway, the store directly) stops
// working once its cache entry goes stale; a store outage keeps a stale
// valid key serving.
func TestStaleCacheEntryIsRefreshed(t *testing.T) {
	keys := gatewaytest.NewKeys()
	a := newTestAuth(keys, 1)
	secret, k := addKey(t, keys)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	if _, err := a.authenticate(ctx, "Bearer "+secret, "192.0.2.1:1", now); err != nil {
		t.Fatal(err)
	}
	// store outage after expiry: the stale entry keeps serving
	keys.SetFail(errors.New("database is locked"))
	if _, err := a.authenticate(ctx, "Bearer "+secret, "192.0.2.1:1", now.Add(2*time.Minute)); err != nil {
		t.Fatalf("stale key during a store outage: %v", err)
	}
	keys.SetFail(nil)
	keys.RevokeKey(ctx, k.ID, now)
	if _, err := a.authenticate(ctx, "Bearer "+secret, "192.0.2.1:1", now.Add(30*time.Second)); err != nil {
		t.Fatalf("fresh cache entry should still serve: %v", err)
	}
	if _, err := a.authenticate(ctx, "Bearer "+secret, "192.0.2.1:1", now.Add(3*time.Minute)); !errors.Is(err, errBadKey) {
		t.Fatalf("revoked key after the cache TTL: %v, want refused", err)
	}
	if a.hits.Len() != 0 {
		t.Error("revoked key still in the valid-key cache")
	}
}

func TestStoreOutageIsUnavailableNotUnauthorized(t *testing.T) {
	keys := gatewaytest.NewKeys()
	keys.SetFail(errors.New("connection refused"))
	a := newTestAuth(keys, 60)
	_, err := a.authenticate(context.Background(), "Bearer llmf-"+strings.Repeat("a", 64), "192.0.2.1:1", time.Now())
	if llmflow.ErrorCode(err) != llmflow.EUNAVAILABLE {
		t.Fatalf("%v, want unavailable", err)
	}
	if strings.Contains(llmflow.ErrorMessage(err), "refused") {
		t.Error("internal error detail in the public message")
	}
}

func TestBearer(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc ": "abc",
		"Basic abc": "", "Bearer": "", "": "", "Bearerabc": "",
	} {
		if got, _ := bearer(in); got != want {
			t.Errorf("bearer(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClientNetwork(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1:5":              "192.0.2.1/32",
		"[::ffff:192.0.2.1]:5":     "192.0.2.1/32",
		"[2001:db8:a:b:c:d:e:f]:5": "2001:db8:a:b::/64",
		"[fe80::1%eth0]:5":         "fe80::/64",
		"[2001:db8:a:b::1]:443":    "2001:db8:a:b::/64",
	} {
		if got := clientNetwork(in).String(); got != want {
			t.Errorf("clientNetwork(%q) = %s, want %s", in, got, want)
		}
	}
}
