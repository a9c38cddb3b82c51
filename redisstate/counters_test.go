package redisstate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/fairshare"
)

// testRedis connects to the real Redis (LLMFLOW_TEST_REDIS_ADDR, default
// 127.0.0.1:6379) and returns a key prefix of the test's own, deleted
// afterwards.
func testRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv("LLMFLOW_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if os.Getenv("LLMFLOW_SKIP_REDIS") == "1" {
		t.Skip("LLMFLOW_SKIP_REDIS=1")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s: %v (set LLMFLOW_SKIP_REDIS=1 to skip)", addr, err)
	}
	prefix := fmt.Sprintf("llmflow-test:%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// chains are accounts of a small tree: org (res 4) / team (res 2) /
// project (res 1), a team without a level of its own, an org alone.
func chainsFor(ctr fairshare.Counters) []fairshare.Chain {
	org, team, proj := ctr.Bind("o"), ctr.Bind("o\x00t"), ctr.Bind("o\x00t\x00p")
	team2 := ctr.Bind("o\x00u")
	alone := ctr.Bind("z")
	return []fairshare.Chain{
		{N: 3, Slots: []fairshare.Slot{org, team, proj}, Res: []int64{4, 2, 1}, Level: []bool{true, true, true}},
		{N: 2, Slots: []fairshare.Slot{org, team}, Res: []int64{4, 2}, Level: []bool{true, true}},
		{N: 2, Slots: []fairshare.Slot{org, team2}, Res: []int64{4, 1}, Level: []bool{true, false}},
		{N: 1, Slots: []fairshare.Slot{alone}, Res: []int64{2}, Level: []bool{true}},
		{N: 3, Slots: []fairshare.Slot{org, team, proj}, Res: []int64{4, 2, 0}, Level: []bool{true, true, true}},
		{N: 0},
	}
}

// TestSameAsMemCounters runs one random sequence of admissions and
// releases on MemCounters and on Redis: every placement, count and usage
// must be the same (the Lua port of Place against the Go one).
func TestSameAsMemCounters(t *testing.T) {
	rdb, prefix := testRedis(t)
	hl := time.Hour
	rc := started(New(rdb, "p", hl, Options{Prefix: prefix}))
	mc := fairshare.NewMemCounters(hl)
	rch, mch := chainsFor(rc), chainsFor(mc)
	type held struct {
		i    int
		r, m fairshare.Placement
	}
	var out []held
	rng := rand.New(rand.NewPCG(7, 9))
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	slots := []string{"", "o", "o\x00t", "o\x00t\x00p", "o\x00u", "z"}
	for step := range 600 {
		now = now.Add(time.Duration(rng.IntN(600)) * time.Second)
		if len(out) == 0 || rng.IntN(5) < 3 {
			i := rng.IntN(len(rch))
			if pk, pm := rc.Peek(&rch[i]), mc.Peek(&mch[i]); !same(pk, pm) {
				t.Fatalf("step %d: Peek chain %d: redis %+v, mem %+v", step, i, pk, pm)
			}
			// every chain at once (a queue's dispatch), in one read
			rall, mall := make([]*fairshare.Chain, len(rch)), make([]*fairshare.Chain, len(mch))
			for j := range rch {
				rall[j], mall[j] = &rch[j], &mch[j]
			}
			rp, mp := make([]fairshare.Placement, len(rall)), make([]fairshare.Placement, len(mall))
			rc.PeekAll(rall, rp)
			mc.PeekAll(mall, mp)
			for j := range rp {
				if !same(rp[j], mp[j]) || !same(rp[j], mc.Peek(&mch[j])) {
					t.Fatalf("step %d: PeekAll chain %d: redis %+v, mem %+v", step, j, rp[j], mp[j])
				}
			}
			r, m := rc.Admit(&rch[i]), mc.Admit(&mch[i])
			if !same(r, m) {
				t.Fatalf("step %d: Admit chain %d: redis %+v, mem %+v", step, i, r, m)
			}
			out = append(out, held{i, r, m})
		} else {
			k := rng.IntN(len(out))
			h := out[k]
			out = append(out[:k], out[k+1:]...)
			g := float64(rng.IntN(100)) / 1000
			rc.Release(&rch[h.i], h.r, g, now)
			mc.Release(&mch[h.i], h.m, g, now)
		}
		for _, k := range slots {
			ri, rw := rc.Counts(rc.Bind(k))
			mi, mw := mc.Counts(mc.Bind(k))
			if ri != mi || rw != mw {
				t.Fatalf("step %d: counts of %q: redis %d/%d, mem %d/%d", step, k, ri, rw, mi, mw)
			}
			ru, mu := rc.Usage(rc.Bind(k), now), mc.Usage(mc.Bind(k), now)
			if math.Abs(ru-mu) > 1e-9*math.Max(1, mu) {
				t.Fatalf("step %d: usage of %q: redis %g, mem %g", step, k, ru, mu)
			}
		}
		ri, rb := rc.PoolCounts()
		mi, mb := mc.PoolCounts()
		if ri != mi || rb != mb {
			t.Fatalf("step %d: pool counts redis %d/%d, mem %d/%d", step, ri, rb, mi, mb)
		}
	}
	if _, _, err := rc.LastError(); err != nil {
		t.Fatal(err)
	}
}

// TestReplicasShareReservation: two Counters (two replicas) on one Redis,
// 16 goroutines each admitting and releasing at a project whose
// reservation is 3: never more than 3 are within it at once, across both;
// everything is uncounted at the end.
func TestReplicasShareReservation(t *testing.T) {
	rdb, prefix := testRedis(t)
	a, b := started(New(rdb, "p", time.Hour, Options{Prefix: prefix})), started(New(rdb, "p", time.Hour, Options{Prefix: prefix}))
	mk := func(c *Counters) fairshare.Chain {
		return fairshare.Chain{N: 3, Slots: []fairshare.Slot{c.Bind("o"), c.Bind("o\x00t"), c.Bind("o\x00t\x00p")},
			Res: []int64{8, 5, 3}, Level: []bool{true, true, true}}
	}
	ca, cb := mk(a), mk(b)
	var within, most atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		c, ch := a, &ca
		if g%2 == 1 {
			c, ch = b, &cb
		}
		wg.Go(func() {
			for range 100 {
				p := c.Admit(ch)
				if p.Within&(1<<2) != 0 {
					n := within.Add(1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					within.Add(-1)
				}
				c.Release(ch, p, 0, time.Now())
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 3 || m == 0 {
		t.Fatalf("at most %d within the project's reservation of 3 at once across replicas", m)
	}
	for _, k := range []string{"o", "o\x00t", "o\x00t\x00p"} {
		if i, w := a.Counts(a.Bind(k)); i != 0 || w != 0 {
			t.Errorf("%q left at %d in flight, %d within", k, i, w)
		}
	}
	if i, br := b.PoolCounts(); i != 0 || br != 0 {
		t.Errorf("pool left at %d in flight, %d borrowing", i, br)
	}
	if _, _, err := a.LastError(); err != nil {
		t.Fatal(err)
	}
}

func testTree() *fairshare.Node {
	return &fairshare.Node{Children: []*fairshare.Node{
		{Name: "a", Shares: 3, Children: []*fairshare.Node{{Name: "a1", Shares: 1}, {Name: "a2", Shares: 1}}},
		{Name: "b", Shares: 1, Children: []*fairshare.Node{{Name: "b1", Shares: 1}}},
	}}
}

// TestPoolOverRedis: two fairshare.Pools (two replicas) over one Redis
// give the same priorities as one pool over memory counters for the same
// admissions, and their releases charge one shared usage.
func TestPoolOverRedis(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r1 := fairshare.NewPoolWith(8, testTree(), started(New(rdb, "p", time.Hour, Options{Prefix: prefix})), now)
	r2 := fairshare.NewPoolWith(8, testTree(), started(New(rdb, "p", time.Hour, Options{Prefix: prefix})), now)
	one := fairshare.NewPool(8, testTree(), time.Hour, now)
	paths := []fairshare.Path{{Org: "a", Team: "a1"}, {Org: "a", Team: "a2"}, {Org: "b", Team: "b1"}}
	var tr, tm []fairshare.Ticket
	for i := range 12 {
		rep := r1
		if i%2 == 1 {
			rep = r2
		}
		// a queue's dispatch previews every waiting path at once
		classes, all, alone := []int{0, 1, 0}, make([]int, 3), make([]int, 3)
		rep.PeekAll(paths, classes, all, nil)
		one.PeekAll(paths, classes, alone, nil)
		if fmt.Sprint(all) != fmt.Sprint(alone) {
			t.Fatalf("previews before admission %d: replicas %v, one gateway %v", i, all, alone)
		}
		for j, p := range paths {
			if pk := rep.Peek(p, classes[j]); pk != all[j] {
				t.Fatalf("preview of %v before admission %d: %d alone, %d with the others", p, i, pk, all[j])
			}
		}
		a, b := rep.Admit(paths[i%3], 0), one.Admit(paths[i%3], 0)
		if a.Priority != b.Priority {
			t.Fatalf("admission %d at %v: replicas %d, one gateway %d", i, paths[i%3], a.Priority, b.Priority)
		}
		tr, tm = append(tr, a), append(tm, b)
	}
	for i := range tr {
		rep := r1
		if i%2 == 1 {
			rep = r2
		}
		rep.Done(tr[i], 0.5, now)
		one.Done(tm[i], 0.5, now)
	}
	u1, u2 := r1.Usage(now), r2.Usage(now)
	if len(u1) == 0 || fmt.Sprint(u1) != fmt.Sprint(u2) || fmt.Sprint(u1) != fmt.Sprint(one.Usage(now)) {
		t.Fatalf("usage: replica 1 %v, replica 2 %v, one gateway %v", u1, u2, one.Usage(now))
	}
}

// same compares what a placement tells the pool (Room is internal to an
// implementation).
func same(a, b fairshare.Placement) bool {
	return a.Within == b.Within && a.Top == b.Top && a.Borrow == b.Borrow
}

// started registers c as a live replica (its first beat, which Run does
// at once in a gateway).
func started(c *Counters) *Counters {
	c.Beat()
	return c
}

// failingReads fails every HMGET (the reads of Peek and Usage) while on;
// reads counts them.
type failingReads struct {
	on    atomic.Bool
	reads atomic.Int64
}

func (h *failingReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failingReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hmget" {
			h.reads.Add(1)
		}
		if h.on.Load() && cmd.Name() == "hmget" {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return next(ctx, cmd)
	}
}
func (h *failingReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSlowReadIsNotAnOutage: a read that only informs (a queued request's
// placement preview, an account's usage for the ranks) and fails is
// answered from what this replica knows, is counted as a failure, and
// does not make the replica fall back to its slices of the reservations:
// admissions go on in Redis.
func TestSlowReadIsNotAnOutage(t *testing.T) {
	base, prefix := testRedis(t)
	fail := &failingReads{}
	rdb := redis.NewClient(&redis.Options{Addr: base.Options().Addr})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(fail)
	now := time.Now()
	c := started(New(rdb, "p", time.Hour, Options{Prefix: prefix}))
	pool := fairshare.NewPoolWith(8, testTree(), c, now)
	ch := pool.Locate(fairshare.Path{Org: "a", Team: "a1"}).Chain
	c.Release(ch, c.Admit(ch), 0.5, now) // some usage in Redis
	if u := c.Usage(ch.Slots[0], now); math.Abs(u-0.5) > 1e-9 {
		t.Fatalf("usage %g, want 0.5", u)
	}
	fail.on.Store(true)
	if p := c.Peek(ch); !p.Top {
		t.Fatalf("preview while the read fails: %+v, want within", p)
	}
	all := []*fairshare.Chain{ch, pool.Locate(fairshare.Path{Org: "b", Team: "b1"}).Chain}
	placed := make([]fairshare.Placement, 2)
	reads := fail.reads.Load()
	c.PeekAll(all, placed)
	if n := fail.reads.Load() - reads; n != 1 {
		t.Fatalf("previews of two leaves in %d reads, want one", n)
	}
	if !placed[0].Top || !placed[1].Top {
		t.Fatalf("previews of a dispatch while the read fails: %+v, want both within", placed)
	}
	if u := c.Usage(ch.Slots[0], now); math.Abs(u-0.5) > 1e-9 {
		t.Fatalf("usage %g while the read fails, want the last one read, 0.5", u)
	}
	if c.down.Load() || c.dirty.Load() {
		t.Fatal("a failed read made the replica fall back")
	}
	if c.errors.Load() < 3 {
		t.Fatalf("%d failures counted, want the three reads", c.errors.Load())
	}
}

// TestBindWhileBeating: a beat that rebuilds this replica's part reads
// every slot bound so far while the account tree grows (a Slurm import,
// an admin write): no slot it sees may be missing from the local
// counters (a panic, index out of range, in CI).
func TestBindWhileBeating(t *testing.T) {
	rdb, prefix := testRedis(t)
	c := New(rdb, "p", time.Hour, Options{Prefix: prefix})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20000 {
			c.Bind(fmt.Sprintf("org%d", i))
		}
	}()
	for {
		select {
		case <-done:
			if args := c.rebuildArgs(nil); len(args) != 1 || args[0] != 0 {
				t.Fatalf("rebuild of nothing in flight: %v", args)
			}
			return
		default:
			c.rebuildArgs(nil)
		}
	}
}

// TestChargesWhileBeating: ends of requests keep their charges for the
// beat while a beat takes the ones kept so far; every charge reaches
// exactly one beat (a race in CI: a beat that found none kept read the
// map the ends went on writing, and could send a charge it also left for
// the next beat).
func TestChargesWhileBeating(t *testing.T) {
	c := New(nil, "p", time.Hour, Options{Prefix: "t:"})
	ch := &fairshare.Chain{N: 1, Slots: []fairshare.Slot{c.Bind("o")}, Res: []int64{1}, Level: []bool{true}}
	now := time.Unix(1_700_000_000, 0)
	const n = 20000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			c.chargeLater(ch, 1, now)
		}
	}()
	var sent float64
	take := func() {
		args, _ := c.chargeArgs(nil)
		for i := 0; i+2 < len(args); i += 3 {
			if args[i] == "" { // the pool's own
				sent += args[i+1].(float64)
			}
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		take()
	}
	take()
	if sent != n || len(c.pending) != 0 {
		t.Fatalf("%g of %d charges sent, %d slots still kept", sent, n, len(c.pending))
	}
}
