package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/internal/boundedcache"
)

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	const p = "Bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(h[len(p):]), true
}

// keyCache holds keys known to be valid. It is bounded: when full, adding a
// key evicts one other valid key (never the whole map). Misses live in a
// separate cache, so a spray of random keys never touches this one. A stale
// entry is still a key that was valid: the caller re-reads it from the
// store without counting it against the failure limit.
type keyCache = boundedcache.Cache[[32]byte, *cachedKey]

// cachedKey is a valid key as the request path sees it.
type cachedKey struct {
	key llmflow.Key
	// chain is the key's budget chain and limit state (budgets.go),
	// computed at its first request under a budget table.
	chain atomic.Pointer[keyChain]
}

func newKeyCache(max int, ttl time.Duration) *keyCache {
	return boundedcache.New[[32]byte, *cachedKey](max, ttl)
}

// missCache remembers hashes the store did not know, or knew as an
// inactive (revoked) key, for a short time, so a repeated bad key does not
// reach the store again. The value is the key when the store knew it as
// inactive, nil for an unknown hash. Bounded; when full the oldest miss is
// forgotten.
type missCache = boundedcache.Cache[[32]byte, *llmflow.Key]

func newMissCache(max int, ttl time.Duration) *missCache {
	return boundedcache.New[[32]byte, *llmflow.Key](max, ttl)
}

// failureLimiter limits failed authentications per client network (an
// IPv4 address or an IPv6 /64): a token bucket of perMinute tokens refilled
// continuously. Only failures take tokens. The table is bounded; when full,
// buckets that are full again are dropped first.
type failureLimiter struct {
	mu        sync.Mutex
	perMinute float64
	max       int
	m         map[netip.Prefix]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newFailureLimiter(perMinute, max int) *failureLimiter {
	if perMinute <= 0 {
		return nil
	}
	return &failureLimiter{perMinute: float64(perMinute), max: max, m: make(map[netip.Prefix]*bucket)}
}

// clientNetwork returns the network a connection's remote address belongs
// to: the address itself for IPv4, its /64 for IPv6. Proxy headers are
// never consulted.
func clientNetwork(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// clientHost is the address of remoteAddr ("host:port") without the port,
// as the access log shows it; remoteAddr itself when it has no port.
func clientHost(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}

func (l *failureLimiter) refill(b *bucket, now time.Time) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens = min(l.perMinute, b.tokens+el.Minutes()*l.perMinute)
		b.at = now
	}
}

// blocked reports whether the network has no failures left, and when it
// gets one back.
func (l *failureLimiter) blocked(n netip.Prefix, now time.Time) (bool, time.Duration) {
	if l == nil {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m[n]
	if !ok {
		return false, 0
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - b.tokens) / l.perMinute * float64(time.Minute))
}

// fail takes one token from the network's bucket.
func (l *failureLimiter) fail(n netip.Prefix, now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m[n]
	if !ok {
		if len(l.m) >= l.max {
			l.evict(now)
		}
		b = &bucket{tokens: l.perMinute, at: now}
		l.m[n] = b
	}
	l.refill(b, now)
	b.tokens = max(0, b.tokens-1)
}

// evict drops full buckets, or failing that an arbitrary one.
func (l *failureLimiter) evict(now time.Time) {
	for n, b := range l.m {
		l.refill(b, now)
		if b.tokens >= l.perMinute {
			delete(l.m, n)
		}
	}
	for n := range l.m {
		if len(l.m) < l.max {
			return
		}
		delete(l.m, n)
	}
}

// KeyLookup is what the gateway needs of a store to authenticate keys.
type KeyLookup interface {
	KeyByHash(ctx context.Context, hash [32]byte) (llmflow.Key, error)
}

var (
	errNoKey      = &llmflow.Error{Code: llmflow.EUNAUTHORIZED, Message: "missing API key: send Authorization: Bearer llmf-…"}
	errBadKey     = &llmflow.Error{Code: llmflow.EUNAUTHORIZED, Message: "invalid API key"}
	errTooManyBad = &llmflow.Error{Code: llmflow.ERATELIMIT, Message: "too many failed authentications from your network; retry later"}
)

// authenticator resolves client keys: hit cache, failure limiter, miss
// cache, then the store. Its limiter counts client-key failures only;
// operator secrets have their own (operatorAuth).
//
// The rule for a network throttled by failures (past
// auth_failures_per_minute): a key in the valid-key cache, fresh or stale
// (any key this gateway has served since it started and not evicted) is
// served as usual; every other key, valid or not, is answered 429 with
// Retry-After before any store lookup, until the network's bucket has a
// token again (one every 60/auth_failures_per_minute seconds). The store
// lookup is what the throttle protects, and a valid key not yet cached
// cannot be told from a guess without it; a separate lookup budget for
// throttled networks would be spent by the sprayer as fast as it refills.
// Users behind a NAT shared with a sprayer keep the keys they have used;
// a key new to this gateway waits for a refilled token.
type authenticator struct {
	store   KeyLookup
	hits    *keyCache
	misses  *missCache
	limiter *failureLimiter
	lookups func() // counts store lookups (metrics); may be nil
}

// authenticate returns the key for an Authorization header value: a key
// whose secret it is (or whose previous secret, within the grace of its
// last rotation) and that has not expired.
func (a *authenticator) authenticate(ctx context.Context, header, remoteAddr string, now time.Time) (*cachedKey, error) {
	ck, h, err := a.lookup(ctx, header, remoteAddr, now)
	switch {
	case err != nil:
		return nil, err
	case !ck.key.Matches(h, now): // the previous secret, its grace over
		a.hits.Remove(h)
		a.misses.Put(h, nil, now)
		a.limiter.fail(clientNetwork(remoteAddr), now)
		return nil, errBadKey
	case ck.key.Expired(now):
		return nil, knownKey(&ck.key, &llmflow.Error{Code: llmflow.EUNAUTHORIZED,
			Message: "the API key expired at " + ck.key.ExpiresAt.UTC().Format(time.RFC3339) + "; ask for a new one"})
	}
	return ck, nil
}

// lookup resolves the key of an Authorization header value and its hash.
func (a *authenticator) lookup(ctx context.Context, header, remoteAddr string, now time.Time) (*cachedKey, [32]byte, error) {
	tok, ok := bearer(header)
	if !ok || tok == "" {
		return nil, [32]byte{}, a.failed(remoteAddr, now, errNoKey)
	}
	h := llmflow.HashKey(tok)
	ck, err := a.resolve(ctx, h, tok, remoteAddr, now)
	return ck, h, err
}

// resolve resolves the key of secret tok hashing to h.
func (a *authenticator) resolve(ctx context.Context, h [32]byte, tok, remoteAddr string, now time.Time) (*cachedKey, error) {
	cached, _, fresh := a.hits.Get(h, now)
	if cached != nil && !hashOf(h, &cached.key) {
		cached, fresh = nil, false // cannot happen with a map keyed by the digest
	}
	if fresh {
		return cached, nil
	}
	if cached != nil {
		return a.refresh(ctx, h, cached, now)
	}
	net := clientNetwork(remoteAddr)
	if blocked, after := a.limiter.blocked(net, now); blocked {
		return nil, withRetryAfter(errTooManyBad, after)
	}
	if !llmflow.LooksLikeKey(tok) {
		a.limiter.fail(net, now)
		return nil, errBadKey
	}
	if inactive, _, ok := a.misses.Get(h, now); ok {
		a.limiter.fail(net, now)
		return nil, knownKey(inactive, inactiveError(inactive))
	}
	if a.lookups != nil {
		a.lookups()
	}
	k, err := a.store.KeyByHash(ctx, h)
	switch {
	case errors.Is(err, llmflow.ErrNotFound) || llmflow.ErrorCode(err) == llmflow.ENOTFOUND:
		a.misses.Put(h, nil, now)
		a.limiter.fail(net, now)
		return nil, errBadKey
	case err != nil:
		return nil, &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "key store unavailable", Err: err}
	case !hashOf(h, &k):
		return nil, &llmflow.Error{Code: llmflow.EINTERNAL, Message: "internal error", Err: errors.New("store returned a key with another hash")}
	case !k.Active():
		a.misses.Put(h, &k, now)
		a.limiter.fail(net, now)
		return nil, knownKey(&k, inactiveError(&k))
	}
	return a.putKey(h, k, now), nil
}

// hashOf reports whether h is k's hash or its previous one (in constant
// time; whether the previous one is still valid is Key.Matches').
func hashOf(h [32]byte, k *llmflow.Key) bool {
	return subtle.ConstantTimeCompare(h[:], k.Hash[:])|subtle.ConstantTimeCompare(h[:], k.PrevHash[:]) == 1
}

// refresh re-reads a key whose cache entry went stale. The caller presented
// a key that was valid, so the failure limit does not apply; when the store
// cannot be read the stale entry keeps serving.
func (a *authenticator) refresh(ctx context.Context, h [32]byte, stale *cachedKey, now time.Time) (*cachedKey, error) {
	if a.lookups != nil {
		a.lookups()
	}
	k, err := a.store.KeyByHash(ctx, h)
	switch {
	case errors.Is(err, llmflow.ErrNotFound) || llmflow.ErrorCode(err) == llmflow.ENOTFOUND:
		a.hits.Remove(h)
		a.misses.Put(h, nil, now)
		return nil, errBadKey
	case err == nil && !k.Active():
		a.hits.Remove(h)
		a.misses.Put(h, &k, now)
		return nil, knownKey(&k, inactiveError(&k))
	case err != nil:
		return stale, nil
	}
	return a.putKey(h, k, now), nil
}

// putKey caches k as valid.
func (a *authenticator) putKey(h [32]byte, k llmflow.Key, now time.Time) *cachedKey {
	e := &cachedKey{key: k}
	a.hits.Put(h, e, now)
	return e
}

func (a *authenticator) failed(remoteAddr string, now time.Time, err error) error {
	net := clientNetwork(remoteAddr)
	if blocked, after := a.limiter.blocked(net, now); blocked {
		return withRetryAfter(errTooManyBad, after)
	}
	a.limiter.fail(net, now)
	return err
}

var errKeyDisabled = &llmflow.Error{Code: llmflow.EFORBIDDEN, Message: "the API key is deactivated; ask your administrator to reactivate it"}

// inactiveError is the refusal of a key the store knows as inactive: a
// revoked key is as invalid as an unknown one; a deactivated one is told
// so (its holder knows the key already).
func inactiveError(k *llmflow.Key) error {
	if k != nil && k.RevokedAt.IsZero() && k.Disabled {
		return errKeyDisabled
	}
	return errBadKey
}

// knownKeyError is a refusal of a key the store knows (a revoked key): the
// admission runner records it against the key's team.
type knownKeyError struct {
	key *llmflow.Key
	err error
}

func (e *knownKeyError) Error() string { return e.err.Error() }
func (e *knownKeyError) Unwrap() error { return e.err }

// knownKey wraps err with the key it refused; a nil key leaves err as is.
func knownKey(k *llmflow.Key, err error) error {
	if k == nil {
		return err
	}
	return &knownKeyError{key: k, err: err}
}

// forget drops a key from both caches (after a revocation).
func (a *authenticator) forget(h [32]byte) {
	a.hits.Remove(h)
	a.misses.Remove(h)
}

// secretMatcher compares a presented token with a secret after hashing
// both, so neither the content nor the length leaks through timing.
type secretMatcher struct{ sum [32]byte }

func newSecretMatcher(secret string) *secretMatcher {
	if secret == "" {
		return nil
	}
	return &secretMatcher{sum: sha256.Sum256([]byte(secret))}
}

func (m *secretMatcher) match(tok string) bool {
	if m == nil {
		return false
	}
	s := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(s[:], m.sum[:]) == 1
}
