package redisstate

import (
	"context"
	"testing"
	"time"
)

// Two replicas agree on one capacity: the first to ask leads and sets it,
// the other follows; when the lease is gone (its leader died), the next to
// ask leads and adopts the C in force before it decides anew.
func TestAgree(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	o := func(name string) Options { return Options{Prefix: prefix, Replica: name, Timeout: time.Second} }
	a, b := New(rdb, "p", time.Hour, o("a")), New(rdb, "p", time.Hour, o("b"))
	ttl := time.Minute
	for i, st := range []struct {
		who      *Counters
		offer    int
		want     int
		wantLead bool
		dropLead bool // before the call: the lease expires
	}{
		{a, 10, 10, true, false},
		{b, 20, 10, false, false},
		{a, 12, 12, true, false},
		{b, 20, 12, false, false},
		{b, 30, 12, true, true}, // takes over: adopts 12
		{b, 30, 30, true, false},
		{a, 12, 30, false, false},
	} {
		if st.dropLead {
			rdb.Del(ctx, a.key+":cap:lease")
		}
		got, lead, err := st.who.Agree(ctx, st.offer, ttl)
		if err != nil || got != st.want || lead != st.wantLead {
			t.Fatalf("step %d: %s offers %d: %d lead %v err %v, want %d lead %v", i, st.who.replica, st.offer, got, lead, err, st.want, st.wantLead)
		}
	}
	if pttl := rdb.PTTL(ctx, a.key+":cap:lease").Val(); pttl <= 0 || pttl > ttl {
		t.Fatalf("lease expires in %v, want within %v", pttl, ttl)
	}
	// A process restarted under b's name, within b's lease: its first call
	// adopts C, the next ones decide.
	b2 := New(rdb, "p", time.Hour, o("b"))
	if got, lead, err := b2.Agree(ctx, 4, ttl); err != nil || got != 30 || !lead {
		t.Fatalf("b restarted, first call: %d lead %v err %v, want 30 lead", got, lead, err)
	}
	if got, lead, err := b2.Agree(ctx, 29, ttl); err != nil || got != 29 || !lead {
		t.Fatalf("b restarted, second call: %d lead %v err %v, want 29 lead", got, lead, err)
	}
	// Redis away: an error, never a C of 0.
	c := New(rdb, "p", time.Hour, o("c"))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got, lead, err := c.Agree(cctx, 5, ttl); err == nil || got != 0 || lead {
		t.Fatalf("cancelled: %d %v %v, want an error", got, lead, err)
	}
}
