package boundedcache

import (
	"testing"
	"time"
)

func TestEvictsOldestOneAtATime(t *testing.T) {
	c := New[int, string](3, time.Minute)
	now := time.Unix(0, 0)
	for i := range 5 {
		c.Put(i, "v", now)
	}
	if c.Len() != 3 {
		t.Fatalf("len %d, want 3", c.Len())
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok, _ := c.Get(i, now); ok != want {
			t.Errorf("key %d cached = %v, want %v", i, ok, want)
		}
	}
}

func TestTTL(t *testing.T) {
	c := New[string, int](10, time.Minute)
	now := time.Unix(0, 0)
	c.Put("a", 1, now)
	if v, ok, fresh := c.Get("a", now.Add(time.Minute)); v != 1 || !ok || !fresh {
		t.Errorf("at expiry: %v %v %v, want 1 true true", v, ok, fresh)
	}
	if v, ok, fresh := c.Get("a", now.Add(time.Minute+1)); v != 1 || !ok || fresh {
		t.Errorf("after expiry: %v %v %v, want 1 true false (stale, still returned)", v, ok, fresh)
	}
	c.Put("a", 2, now.Add(time.Hour))
	if v, _, fresh := c.Get("a", now.Add(time.Hour)); v != 2 || !fresh {
		t.Errorf("put again: %v %v", v, fresh)
	}
}

// After Clear, the cache holds its full size of new entries: the eviction
// order of the entries cleared does not evict the new ones early.
func TestClearResetsEvictionOrder(t *testing.T) {
	c := New[int, int](4, time.Minute)
	now := time.Unix(0, 0)
	for i := range 4 {
		c.Put(i, i, now)
	}
	c.Clear()
	if c.Len() != 0 {
		t.Fatalf("len %d after Clear", c.Len())
	}
	for i := 10; i < 14; i++ {
		c.Put(i, i, now)
	}
	for i := 10; i < 14; i++ {
		if _, ok, _ := c.Get(i, now); !ok {
			t.Errorf("key %d put after Clear was evicted", i)
		}
	}
}

// A removed and re-put key is not evicted by its old place in the order,
// and a place left by a removed key evicts nothing.
func TestRemoveThenPut(t *testing.T) {
	c := New[int, int](3, time.Minute)
	now := time.Unix(0, 0)
	c.Put(1, 1, now)
	c.Put(2, 2, now)
	c.Put(3, 3, now)
	c.Remove(1)
	c.Put(1, 1, now) // 1's old place is the oldest; it holds no live entry
	for _, k := range []int{1, 2, 3} {
		if _, ok, _ := c.Get(k, now); !ok {
			t.Errorf("key %d missing", k)
		}
	}
	c.Put(4, 4, now) // evicts 2, the oldest live entry
	for k, want := range map[int]bool{1: true, 2: false, 3: true, 4: true} {
		if _, ok, _ := c.Get(k, now); ok != want {
			t.Errorf("key %d cached = %v, want %v", k, ok, want)
		}
	}
	if c.Len() != 3 {
		t.Errorf("len %d, want 3", c.Len())
	}
}

func TestRemoveFunc(t *testing.T) {
	c := New[int, string](10, time.Minute)
	now := time.Unix(0, 0)
	c.Put(1, "alice", now)
	c.Put(2, "bob", now)
	c.Put(3, "alice", now)
	c.RemoveFunc(func(_ int, v string) bool { return v == "alice" })
	if c.Len() != 1 {
		t.Errorf("len %d, want 1", c.Len())
	}
}

func TestGetAllocatesNothing(t *testing.T) {
	c := New[[32]byte, *int](10, time.Minute)
	now := time.Unix(0, 0)
	var k [32]byte
	c.Put(k, new(int), now)
	if n := testing.AllocsPerRun(100, func() { c.Get(k, now) }); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
}
