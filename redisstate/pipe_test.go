package redisstate

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// slowPipelines delays every pipeline by d and counts them, and the
// scripts they carried.
type slowPipelines struct {
	d             time.Duration
	pipes, macros atomic.Int64
	// scripted: the pipelines that carry scripts (not a connection's
	// handshake); scripts: the scripts in them
	scripted, scripts atomic.Int64
}

// hookedClient is a client of base's Redis with hook on it, closed at the
// test's end.
func hookedClient(t testing.TB, base *redis.Client, hook redis.Hook) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: base.Options().Addr})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	return rdb
}

func (h *slowPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *slowPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipes.Add(1)
		h.macros.Add(int64(len(cmds)))
		n := 0
		for _, c := range cmds {
			if name := c.Name(); name == "eval" || name == "evalsha" {
				n++
			}
		}
		if n > 0 {
			h.scripted.Add(1)
			h.scripts.Add(int64(n))
		}
		time.Sleep(h.d)
		return next(ctx, cmds)
	}
}

// pipedReplica is a gateway's pool over a Shared with its pipe.
func pipedReplica(t *testing.T, rdb redis.UniversalClient, prefix string, now time.Time, limit float64) (*Shared, *replica, admission.Pool, *fairshare.Chain) {
	t.Helper()
	s := NewShared(rdb, SharedOptions{Prefix: prefix, Pipeline: true})
	t.Cleanup(s.Close)
	rep := newReplica(t, rdb, prefix+"ledger:", now, limit, 0)
	p := s.Pool("p", time.Hour, rep.mem)
	s.pools["p"].Beat()
	pool := fairshare.NewPoolWith(24, &fairshare.Node{Children: []*fairshare.Node{{Name: "o", Shares: 1}}}, p.Counters, now)
	return s, rep, p, pool.Locate(fairshare.Path{Org: "o"}).Chain
}

// TestPipedReleaseSeenByTheNext: near a limit (a key allowed one request
// in flight: no quota of it), a request admitted in Redis ends, through
// the pipe, before its client can send the next one: the next request,
// through another replica, is never refused. In the end Redis holds
// nothing and has charged every request.
func TestPipedReleaseSeenByTheNext(t *testing.T) {
	base, prefix := testRedis(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	var reps []*Shared
	var pools []admission.Pool
	var ch *fairshare.Chain
	var rep *replica
	for range 2 {
		rdb := redis.NewClient(&redis.Options{Addr: base.Options().Addr})
		t.Cleanup(func() { rdb.Close() })
		s, r, p, c := pipedReplica(t, rdb, prefix, now, 1)
		reps, pools, ch, rep = append(reps, s), append(pools, p), c, r
	}
	ctx := context.Background()
	const n = 10
	for i := range n {
		r := rep.request(now, "k", budgets.KeyLimits{MaxInFlight: 1, RPM: 1000}, 0.01)
		a := &admission.Admission{Chain: ch, Budget: r}
		p := pools[i%2]
		if err := p.Shared.Admit(ctx, a); err != nil || a.BudgetLocal {
			t.Fatalf("admission %d: %v (local %v)", i, err, a.BudgetLocal)
		}
		p.Shared.Release(ctx, a, admission.End{At: now, GPUHours: 0.01, Tokens: 3})
	}
	for _, s := range reps {
		s.p.barrier()
		for range 2 { // the quotas taken meanwhile, unused, go back
			s.pools["p"].Beat()
			s.ledger.Beat()
		}
		s.p.barrier()
	}
	if h, c := slotHash(t, base, prefix+"ledger:", now); h != 0 || c != n*budgets.Units(0.01) {
		t.Fatalf("budget in redis: held %d, charged %d; want 0 and %d", h, c, n*budgets.Units(0.01))
	}
	if in, _ := pools[0].Counters.PoolCounts(); in != 0 {
		t.Fatalf("%d left in flight", in)
	}
}

// TestPipeSharesRoundTrips: 32 concurrent requests through one replica's
// pipe share pipelines (each round trip 5 ms here): far fewer round trips
// than the 64 scripts, and every count given back.
func TestPipeSharesRoundTrips(t *testing.T) {
	base, prefix := testRedis(t)
	slow := &slowPipelines{d: 5 * time.Millisecond}
	rdb := hookedClient(t, base, slow)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	s, rep, p, ch := pipedReplica(t, rdb, prefix, now, 100)
	pipes0, macros0 := slow.pipes.Load(), slow.macros.Load()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			a := &admission.Admission{Chain: ch, Budget: rep.request(now, "k", budgets.KeyLimits{MaxInFlight: 100}, 0.01)}
			if err := p.Shared.Admit(context.Background(), a); err != nil {
				t.Error(err)
				return
			}
			p.Shared.Release(context.Background(), a, admission.End{At: now, GPUHours: 0.01})
		})
	}
	wg.Wait()
	s.p.barrier()
	for range 2 { // the quotas taken meanwhile, unused, go back
		s.pools["p"].Beat()
		s.ledger.Beat()
	}
	s.p.barrier()
	pipes, macros := slow.pipes.Load()-pipes0, slow.macros.Load()-macros0
	t.Logf("%d scripts in %d round trips", macros, pipes)
	if macros < 64 || pipes > macros/2 {
		t.Fatalf("%d scripts in %d round trips: not shared", macros, pipes)
	}
	if in, _ := p.Counters.PoolCounts(); in != 0 {
		t.Fatalf("%d left in flight", in)
	}
	if h, c := slotHash(t, rdb, prefix+"ledger:", now); h != 0 || c != 32*budgets.Units(0.01) {
		t.Fatalf("budget in redis: held %d, charged %d", h, c)
	}
}
