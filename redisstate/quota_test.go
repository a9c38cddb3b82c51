package redisstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// quotaTree: organisation o (one team t), and b beside it: o reserves
// half of the pool.
func quotaTree() *fairshare.Node {
	return &fairshare.Node{Children: []*fairshare.Node{
		{Name: "o", Shares: 1, Children: []*fairshare.Node{{Name: "t", Shares: 1}}},
		{Name: "b", Shares: 1},
	}}
}

// quotaReplica is one gateway's pool over a Shared with its pipe (and
// so quotas), on its own client.
type quotaReplica struct {
	s    *Shared
	rep  *replica
	p    admission.Pool
	pool *fairshare.Pool
}

func newQuotaReplica(t *testing.T, rdb redis.UniversalClient, prefix string, now time.Time, capacity int, limit float64) *quotaReplica {
	t.Helper()
	s := NewShared(rdb, SharedOptions{Prefix: prefix, Pipeline: true})
	rep := newReplica(t, rdb, prefix+"ledger:", now, limit, 0)
	p := s.Pool("p", time.Hour, rep.mem)
	// registered: by this Beat or Run's first, which may race (a beat
	// that finds no part yet asks for a rebuild)
	for c, i := s.pools["p"], 0; i < 3; i++ {
		c.Beat()
		for c.dirty.Load() {
			c.Beat()
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.ledger.Beat()
	return &quotaReplica{s: s, rep: rep, p: p, pool: fairshare.NewPoolWith(capacity, quotaTree(), p.Counters, now)}
}

func (q *quotaReplica) chain() *fairshare.Chain {
	return q.pool.Locate(fairshare.Path{Org: "o", Team: "t"}).Chain
}

// TestQuotasAdmitWithoutRoundTrip: far from every limit, once the quotas
// are taken, a request with a budget and key limits is admitted with no
// round trip (each one takes 30 ms here) and its end is not waited for
// either;
// Redis ends holding nothing but the quotas, having charged every
// request, with nothing left in flight.
func TestQuotasAdmitWithoutRoundTrip(t *testing.T) {
	base, prefix := testRedis(t)
	slow := &slowPipelines{d: 30 * time.Millisecond}
	rdb := hookedClient(t, base, slow)
	now := time.Now()
	q := newQuotaReplica(t, rdb, prefix, now, 1000, 100)
	defer q.s.Close()
	ch, ctx := q.chain(), context.Background()
	limits := budgets.KeyLimits{MaxInFlight: 1000, RPM: 1 << 20, TPM: 1 << 30}
	leased, n := 0, 40
	for i := range n {
		r := q.rep.request(now, "k", limits, 0.001)
		r.Tokens = 10
		a := &admission.Admission{Chain: ch, Budget: r}
		t0 := time.Now()
		if err := q.p.Shared.Admit(ctx, a); err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if a.Leased>>32 != 0 && a.Leased&(1<<32-1) != 0 {
			leased++
			if took > 15*time.Millisecond {
				t.Fatalf("request %d admitted from the quotas (%x) in %v: a round trip", i, a.Leased, took)
			}
		}
		if !a.Placement.Top || a.Placement.Within == 0 {
			t.Fatalf("request %d placed %+v, want within", i, a.Placement)
		}
		t0 = time.Now()
		q.p.Shared.Release(ctx, a, admission.End{At: now, GPUHours: 0.001, Tokens: 12})
		if took := time.Since(t0); a.Leased>>32 != 0 && a.Leased&(1<<32-1) != 0 && took > 15*time.Millisecond {
			t.Fatalf("request %d admitted from the quotas ended in %v: a round trip", i, took)
		}
		if i < 2 {
			q.s.p.barrier() // the quotas asked for arrive
		}
	}
	if leased < n-3 {
		t.Fatalf("%d of %d requests admitted from the quotas", leased, n)
	}
	q.s.p.barrier()
	held, charged := slotHash(t, base, prefix+"ledger:", now)
	if charged != int64(n)*budgets.Units(0.001) {
		t.Fatalf("charged %d, want %d", charged, int64(n)*budgets.Units(0.001))
	}
	if held > budgets.Units(100)/2 {
		t.Fatalf("quotas hold %d units, more than half of what was left", held)
	}
	if in, _ := q.p.Counters.PoolCounts(); in != 0 {
		t.Fatalf("%d in flight", in)
	}
	// unused for two beats: every quota goes back
	for range 2 {
		q.s.pools["p"].Beat()
		q.s.ledger.Beat()
	}
	q.s.p.barrier()
	if held, _ := slotHash(t, base, prefix+"ledger:", now); held != 0 {
		t.Fatalf("idle quotas still hold %d units", held)
	}
	slot := q.s.pools["p"].slots[fairshare.PathKey([]string{"o", "t"})]
	if in, w := q.p.Counters.Counts(slot); in != 0 || w != 0 {
		t.Fatalf("team t: %d in flight, %d within after the quotas went back", in, w)
	}
}

// TestQuotasNeverOverspent: three replicas race bursts of requests (60
// clients) against one budget (exactly 200 requests' worth), one key
// limited to 5 in flight (a quarter of the clients) and one team's
// reservation of 32 within (more clients than that): never more than 200
// admitted, never more than 5 of the key in flight at once, never more
// than 32 placed within at once, whatever the quotas held.
func TestQuotasNeverOverspent(t *testing.T) {
	base, prefix := testRedis(t)
	now := time.Now()
	var reps []*quotaReplica
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: base.Options().Addr})
		t.Cleanup(func() { rdb.Close() })
		// capacity 64: o reserves 32, its team t all of them
		reps = append(reps, newQuotaReplica(t, rdb, prefix, now, 64, 2))
	}
	for _, q := range reps {
		q.s.pools["p"].Beat() // every replica sees three live
		defer q.s.Close()
	}
	ctx := context.Background()
	var admitted, keyIn, within, maxKey, maxWithin, leased atomic.Int64
	var wg sync.WaitGroup
	for w := range 60 {
		wg.Go(func() {
			for i := range 10 {
				q := reps[(w+i)%3]
				key, lim := "k2", budgets.KeyLimits{}
				if w%4 == 0 {
					key, lim = "k", budgets.KeyLimits{MaxInFlight: 5}
				}
				r := q.rep.request(now, key, lim, 0.01)
				a := &admission.Admission{Chain: q.chain(), Budget: r}
				err := q.p.Shared.Admit(ctx, a)
				var rf *budgets.Refusal
				if errors.As(err, &rf) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				admitted.Add(1)
				if a.Leased != 0 {
					leased.Add(1)
				}
				if key == "k" {
					updateMax(&maxKey, keyIn.Add(1))
				}
				in := a.Placement.Top && a.Placement.Within&2 != 0
				if in {
					updateMax(&maxWithin, within.Add(1))
				}
				time.Sleep(2 * time.Millisecond)
				if in {
					within.Add(-1)
				}
				if key == "k" {
					keyIn.Add(-1)
				}
				q.p.Shared.Release(ctx, a, admission.End{At: now, GPUHours: 0.01})
			}
		})
	}
	wg.Wait()
	for _, q := range reps {
		q.s.p.barrier()
	}
	t.Logf("%d admitted (%d from quotas), at most %d of the key in flight, %d within", admitted.Load(), leased.Load(), maxKey.Load(), maxWithin.Load())
	if admitted.Load() > 200 {
		t.Errorf("%d requests of 0.01 admitted on a budget of 2", admitted.Load())
	}
	if maxKey.Load() > 5 {
		t.Errorf("%d of the key in flight at once, its limit 5", maxKey.Load())
	}
	if maxWithin.Load() > 32 {
		t.Errorf("%d within at once, the reservation 32", maxWithin.Load())
	}
	if _, charged := slotHash(t, base, prefix+"ledger:", now); charged > budgets.Units(2) {
		t.Errorf("charged %d units, the budget %d", charged, budgets.Units(2))
	}
}

func updateMax(m *atomic.Int64, v int64) {
	for {
		x := m.Load()
		if v <= x || m.CompareAndSwap(x, v) {
			return
		}
	}
}

// cutter forwards TCP to Redis until cut: a replica killed with -9, as
// Redis sees it.
type cutter struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func newCutter(t *testing.T, to string) *cutter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{l: l}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			if c.cut {
				in.Close()
				out.Close()
			}
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

func (c *cutter) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	c.l.Close()
	for _, x := range c.conns {
		x.Close()
	}
}

// TestKilledReplicaQuotasComeBack: a replica holding quotas (places
// within a team's reservation, budget units, a key's places in flight)
// is cut off from Redis as if killed; within its lease (3 s) and a beat,
// a live replica can use all of the reservation, the budget and the key
// limit again.
func TestKilledReplicaQuotasComeBack(t *testing.T) {
	base, prefix := testRedis(t)
	now := time.Now()
	cut := newCutter(t, base.Options().Addr)
	deadRdb := redis.NewClient(&redis.Options{Addr: cut.l.Addr().String(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { deadRdb.Close() })
	dead := newQuotaReplica(t, deadRdb, prefix, now, 64, 1)
	liveRdb := redis.NewClient(&redis.Options{Addr: base.Options().Addr})
	t.Cleanup(func() { liveRdb.Close() })
	live := newQuotaReplica(t, liveRdb, prefix, now, 64, 1)
	defer live.s.Close()
	ctx := context.Background()
	limits := budgets.KeyLimits{MaxInFlight: 40}
	// the replica to kill takes its quotas and keeps them
	for i := range 5 {
		a := &admission.Admission{Chain: dead.chain(), Budget: dead.rep.request(now, "k", limits, 0.01)}
		if err := dead.p.Shared.Admit(ctx, a); err != nil {
			t.Fatal(err)
		}
		dead.p.Shared.Release(ctx, a, admission.End{At: now, GPUHours: 0.01})
		if i == 0 {
			dead.s.p.barrier()
		}
	}
	dead.s.p.barrier()
	slot := live.s.pools["p"].slots[fairshare.PathKey([]string{"o", "t"})]
	if _, w := live.p.Counters.Counts(slot); w == 0 {
		dc := dead.s.pools["p"]
		t.Fatalf("the replica to kill holds no places within (no quota taken): down %v dirty %v epoch %q, %v",
			dc.down.Load(), dc.dirty.Load(), dead.s.ledger.epoch.Load(), base.HGetAll(ctx, dc.mine).Val())
	}
	if held, _ := slotHash(t, base, prefix+"ledger:", now); held == 0 {
		t.Fatal("the replica to kill holds no budget units")
	}
	cut.kill() // its Redis calls fail from now on; its leases are not renewed
	t0 := time.Now()
	// the team's whole reservation (32), the key's 40 places and the
	// budget's last units come back to the live replica: 32 within, then
	// 31 more of 0.01 (1 − 5 × 0.01 charged − 32 held pays for 63)
	var held []*admission.Admission
	var last error
	back := func() bool {
		for _, a := range held {
			live.p.Shared.Release(ctx, a, admission.End{At: now})
		}
		held = held[:0]
		live.s.pools["p"].Beat()
		for i := range 63 {
			key, lim := "k", limits
			if i >= 32 {
				key, lim = "k2", budgets.KeyLimits{}
			}
			a := &admission.Admission{Chain: live.chain(), Budget: live.rep.request(now, key, lim, 0.01)}
			if last = live.p.Shared.Admit(ctx, a); last != nil {
				return false
			}
			held = append(held, a)
			if i < 32 && (!a.Placement.Top || a.Placement.Within&2 == 0) {
				last = fmt.Errorf("request %d placed %+v: the reservation is not whole again", i, a.Placement)
				return false
			}
		}
		return true
	}
	for !back() {
		if time.Since(t0) > 6*time.Second {
			t.Fatalf("the killed replica's quotas not back after %v: %v", time.Since(t0), last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the killed replica's quotas back within %v", time.Since(t0))
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("quotas back after %v, want within the lease (3 s, in whole seconds) and a beat", d)
	}
	for _, a := range held {
		live.p.Shared.Release(ctx, a, admission.End{At: now})
	}
}
