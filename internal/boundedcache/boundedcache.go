// Package boundedcache is a map bounded in size whose entries expire: the
// gateway's caches of valid keys and of misses, and the admin principal
// cache, are one type. When full, adding a new entry evicts the oldest
// one (insertion order), never the whole map; Clear empties the map and
// its eviction order together.
package boundedcache

import (
	"sync"
	"time"
)

// Cache maps K to V for at most a fixed number of entries, each fresh for the TTL given
// to New after it was put. It is safe for concurrent use; Get takes a read
// lock only and allocates nothing.
type Cache[K comparable, V any] struct {
	mu   sync.RWMutex
	max  int
	ttl  time.Duration
	m    map[K]entry[V]
	ring []K // insertion order, for eviction; len(ring) <= max
	next int // the ring slot evicted next once the ring is full
}

type entry[V any] struct {
	v       V
	expires time.Time
	slot    int // this entry's place in ring
}

// New returns an empty cache of at most size entries (at least 1), each
// fresh for ttl after it was put.
func New[K comparable, V any](size int, ttl time.Duration) *Cache[K, V] {
	size = max(size, 1)
	return &Cache[K, V]{max: size, ttl: ttl, m: make(map[K]entry[V], min(size, 1024))}
}

// Get returns the value under k, whether there is one, and whether it is
// still fresh at now (now is not after its expiry). A stale value is
// returned too: the caller decides whether it may still serve.
func (c *Cache[K, V]) Get(k K, now time.Time) (v V, ok, fresh bool) {
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	return e.v, ok, ok && !now.After(e.expires)
}

// Put stores v under k, fresh until now plus the TTL. A key already
// present keeps its place in the eviction order; a new key takes the
// oldest place when the cache is full, evicting the entry there if it
// still holds it (a place left by a removed entry evicts nothing).
func (c *Cache[K, V]) Put(k K, v V, now time.Time) {
	e := entry[V]{v: v, expires: now.Add(c.ttl)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok {
		e.slot = old.slot
		c.m[k] = e
		return
	}
	if len(c.ring) < c.max {
		e.slot = len(c.ring)
		c.ring = append(c.ring, k)
	} else {
		e.slot = c.next
		if old, ok := c.m[c.ring[c.next]]; ok && old.slot == c.next {
			delete(c.m, c.ring[c.next])
		}
		c.ring[c.next] = k
		c.next = (c.next + 1) % c.max
	}
	c.m[k] = e
}

// Remove drops k.
func (c *Cache[K, V]) Remove(k K) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

// RemoveFunc drops every entry for which drop returns true.
func (c *Cache[K, V]) RemoveFunc(drop func(K, V) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if drop(k, e.v) {
			delete(c.m, k)
		}
	}
}

// Clear drops every entry and resets the eviction order, so entries put
// afterwards are evicted only by entries put after them.
func (c *Cache[K, V]) Clear() {
	c.mu.Lock()
	clear(c.m)
	clear(c.ring) // let the keys be collected
	c.ring = c.ring[:0]
	c.next = 0
	c.mu.Unlock()
}

// Len returns the number of entries, fresh or stale.
func (c *Cache[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
