package redisstate

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/budgets"
)

// deadRedis is a client of a port where nothing listens.
func deadRedis(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// slicedReplica is newReplica whose Ledger sees n() live replicas.
func slicedReplica(t *testing.T, rdb redis.UniversalClient, now time.Time, limit, stored float64, n func() int64) *replica {
	p := newReplica(t, rdb, "t:", now, limit, stored)
	p.l = NewLedger(rdb, LedgerOptions{Prefix: "t:", Timeout: 100 * time.Millisecond, Replicas: n})
	p.l.setLocal(p.mem)
	return p
}

// admitAll reserves requests on p until one is refused (at most 100) and
// returns how many were admitted, and the refusal's reason.
func admitAll(t *testing.T, p *replica, now time.Time, key string, lim budgets.KeyLimits, cost float64) (int, string) {
	t.Helper()
	for i := range 100 {
		_, err := p.l.Reserve(now, p.request(now, key, lim, cost))
		var rf *budgets.Refusal
		if errors.As(err, &rf) {
			return i, rf.Reason
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return 100, ""
}

// TestLedgerFallbackSlice: Redis is unreachable and the replica last saw
// 3 live replicas: it admits a third of what is left of a budget (10
// GPU-hours, 4 spent: 2), a third of a key's RPM and max_inflight, and
// Health says by what it divides. A change of the live count reaches the
// slice at the next probe.
func TestLedgerFallbackSlice(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 30, 0, time.UTC)
	var live atomic.Int64
	live.Store(3)
	p := slicedReplica(t, deadRedis(t), now, 10, 4, live.Load)
	if got, why := admitAll(t, p, now, "", budgets.KeyLimits{}, 0.5); got != 4 || why != "budget" {
		t.Fatalf("admitted %d of 0.5 GPU-hours (%s), want 4: a third of the 6 left", got, why)
	}
	if h := p.l.Health(); !h.Fallback || h.Divisor != 3 {
		t.Fatalf("health: %+v", h)
	}
	// a Mem handed over in the fallback (a reload's gateway) is sliced too
	o := newReplica(t, deadRedis(t), "t:", now, 10, 4)
	p.l.setLocal(o.mem)
	if got, why := admitAll(t, &replica{mem: o.mem, l: p.l, t: o.t}, now, "", budgets.KeyLimits{}, 0.5); got != 4 || why != "budget" {
		t.Fatalf("admitted %d of 0.5 GPU-hours on a Mem handed over (%s), want 4", got, why)
	}
	q := slicedReplica(t, deadRedis(t), now, 1000, 0, live.Load)
	if got, why := admitAll(t, q, now, "k", budgets.KeyLimits{RPM: 9}, 0); got != 3 || why != "rpm" {
		t.Fatalf("admitted %d of RPM 9 (%s), want 3", got, why)
	}
	if got, why := admitAll(t, q, now, "k2", budgets.KeyLimits{MaxInFlight: 7}, 0.001); got != 2 || why != "max_inflight" {
		t.Fatalf("admitted %d of max_inflight 7 (%s), want 2", got, why)
	}
	live.Store(2)
	q.l.Probe()
	if h := q.l.Health(); !h.Fallback || h.Divisor != 2 || q.mem.Slice() != 2 {
		t.Fatalf("after the live count changed: %+v, Mem sliced 1/%d", h, q.mem.Slice())
	}
	if got, why := admitAll(t, q, now, "k3", budgets.KeyLimits{RPM: 9}, 0); got != 4 || why != "rpm" {
		t.Fatalf("admitted %d of RPM 9 over 2 replicas (%s), want 4", got, why)
	}
	// nil Replicas: one replica, the whole
	r := newReplica(t, deadRedis(t), "t:", now, 10, 4)
	if got, _ := admitAll(t, r, now, "", budgets.KeyLimits{}, 0.5); got != 12 {
		t.Fatalf("admitted %d with no Replicas, want 12", got)
	}
}

// TestLedgerFallbackSliceEnds: the slice begins when the ledger's Redis
// is killed, from what is left then (spend through Redis counts), and
// ends when a probe finds Redis back; a second outage counts from what is
// left at its start.
func TestLedgerFallbackSliceEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	srv := startOwnRedis(t, "")
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	p := slicedReplica(t, rdb, now, 10, 4, func() int64 { return 3 })
	r := p.request(now, "", budgets.KeyLimits{}, 3) // through Redis
	if _, err := p.l.Reserve(now, r); err != nil {
		t.Fatal(err)
	}
	if h := p.l.Health(); h.Fallback || h.Divisor != 1 || p.mem.Slice() != 1 {
		t.Fatalf("with Redis: %+v, Mem 1/%d", p.l.Health(), p.mem.Slice())
	}
	p.l.Settle(now, r, false, 3, 0) // 7 of 10 spent, as this replica knows it
	srv.kill()
	if got, why := admitAll(t, p, now, "", budgets.KeyLimits{}, 0.5); got != 2 || why != "budget" {
		t.Fatalf("admitted %d of 0.5 (%s), want 2: a third of the 3 left", got, why)
	}
	if h := p.l.Health(); !h.Fallback || h.Divisor != 3 || p.mem.Slice() != 3 {
		t.Fatalf("in fallback: %+v, Mem 1/%d", h, p.mem.Slice())
	}
	srv = startOwnRedis(t, srv.port)
	p.l.Probe()
	if h := p.l.Health(); h.Fallback || h.Divisor != 1 || p.mem.Slice() != 1 {
		t.Fatalf("after Redis returned: %+v, Mem 1/%d", h, p.mem.Slice())
	}
	// the 2 admitted alone are still held (1): 8 of 10 used; a second
	// outage slices the 2 left then
	srv.kill()
	if got, why := admitAll(t, p, now, "", budgets.KeyLimits{}, 0.5); got != 1 || why != "budget" {
		t.Fatalf("second outage: admitted %d of 0.5 (%s), want 1: a third of the 2 left", got, why)
	}
}

// TestCountersInitialReplicas: a replica started while Redis is away, told
// it is one of 3 (Options.Replicas), admits within a reservation of 12 at
// most 4 times; without the option, 12.
func TestCountersInitialReplicas(t *testing.T) {
	for _, tc := range []struct {
		replicas int64
		want     int
	}{{3, 4}, {0, 12}, {1, 12}} {
		c := New(deadRedis(t), "p", time.Hour, Options{Prefix: "t:", Timeout: 100 * time.Millisecond, Replicas: tc.replicas})
		c.Beat() // fails: nothing seen
		ch := deepChain(c, 12)
		within := 0
		for range 20 {
			if p := c.Admit(ch); p.Within != 0 {
				within++
			}
		}
		if within != tc.want {
			t.Errorf("Replicas %d: %d within a reservation of 12 with Redis away, want %d", tc.replicas, within, tc.want)
		}
		if h := c.Health(); !h.Fallback || h.Replicas != max(tc.replicas, 1) {
			t.Errorf("Replicas %d: health %+v", tc.replicas, h)
		}
	}
}
