package redisstate

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Each ask is claimed once, by one of the replicas racing for it, and an
// ask nobody claims lapses.
func TestReclaimAskClaimedOnce(t *testing.T) {
	rdb, prefix := testRedis(t)
	a := NewReclaim(rdb, prefix, prefix+"bus", "gpu", time.Second, nil)
	b := NewReclaim(rdb, prefix, prefix+"bus", "gpu", time.Second, nil)
	if b.Claim() {
		t.Fatal("claimed an ask nobody made")
	}
	a.Ask("etabA", 0)
	a.Ask("etabA", 0)
	var claimed atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Claim() {
				claimed.Add(1)
			}
		}()
	}
	wg.Wait()
	if claimed.Load() != 2 {
		t.Fatalf("%d claims of 2 asks", claimed.Load())
	}
	b.Unclaim()
	if !a.Claim() || a.Claim() {
		t.Fatal("an ask given back is claimed once again")
	}
	a.Ask("etabA", 0)
	if ttl := rdb.PTTL(t.Context(), a.key).Val(); ttl <= 0 || ttl > askTTL {
		t.Fatalf("ask lives %v, want at most %v", ttl, askTTL)
	}
}

// FuzzParseReclaim: what Ask announces is read back as it was; anything
// else on the channel is not a reclaim.
func FuzzParseReclaim(f *testing.F) {
	f.Add("gpu", "etabA", 3)
	f.Add("", "", -1)
	f.Fuzz(func(t *testing.T, pool, org string, prio int) {
		msg := msgReclaim + pool + "\x1f" + strconv.Itoa(prio) + "\x1f" + org
		p, o, n, ok := parseReclaim(msg)
		if strings.Contains(pool, "\x1f") {
			return // not a pool name
		}
		if !ok || p != pool || o != org || n != prio {
			t.Fatalf("parseReclaim(%q) = %q %q %d %v", msg, p, o, n, ok)
		}
		parseReclaim(pool + org) // never panics
	})
}
