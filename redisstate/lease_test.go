package redisstate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/fairshare"
)

// TestPlaceScript compares the Lua port of fairshare.Place with the pure
// function on random chains (depth 1 to 40, deeper than Lua's 32-bit bit
// operations; random levels, reservations and within counts set directly
// in Redis): the same placement, and exactly the placed accounts counted.
func TestPlaceScript(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(12, 34))
	for run := range 300 {
		c := started(New(rdb, "p"+strconv.Itoa(run), time.Hour, Options{Prefix: prefix}))
		n := 1 + rng.IntN(40)
		if run%3 == 0 {
			n = 1 + rng.IntN(4)
		}
		ch := fairshare.Chain{N: n, Slots: make([]fairshare.Slot, n), Res: make([]int64, n), Level: make([]bool, n)}
		w := make([]int64, n)
		key := ""
		for i := range n {
			key += fmt.Sprintf("\x00a%d", i)
			ch.Slots[i] = c.Bind(key)
			ch.Res[i] = int64(rng.IntN(4))
			ch.Level[i] = rng.IntN(4) != 0
			w[i] = int64(rng.IntN(4))
			if w[i] > 0 {
				rdb.HSet(ctx, c.key, "w:"+key, w[i])
			}
		}
		want := fairshare.Place(&ch, w)
		got := c.Admit(&ch)
		if !same(got, want) {
			t.Fatalf("run %d: chain %+v within %v: script %+v, Place %+v", run, ch, w, got, want)
		}
		for i := range n {
			_, wi := c.Counts(ch.Slots[i])
			d := int64(0)
			if want.Within&(1<<i) != 0 {
				d = 1
			}
			if wi != w[i]+d {
				t.Fatalf("run %d: account %d within %d, want %d", run, i, wi, w[i]+d)
			}
		}
		c.Release(&ch, got, 0, time.Now())
		for i := range n {
			if _, wi := c.Counts(ch.Slots[i]); wi != w[i] {
				t.Fatalf("run %d: account %d within %d after release, want %d", run, i, wi, w[i])
			}
		}
	}
}

// deepChain binds org/team/project with reservations res.
func deepChain(c *Counters, res ...int64) *fairshare.Chain {
	ch := &fairshare.Chain{N: len(res), Res: res, Level: make([]bool, len(res))}
	key := ""
	for i := range res {
		if i > 0 {
			key += "\x00"
		}
		key += "n" + strconv.Itoa(i)
		ch.Slots = append(ch.Slots, c.Bind(key))
		ch.Level[i] = true
	}
	return ch
}

// TestCrashedReplicaReaped: a replica that stops beating (crashed) with
// three requests in flight disappears from the counts once its lease
// expires, reaped by a live replica's beat; the live one's own requests
// stay counted.
func TestCrashedReplicaReaped(t *testing.T) {
	rdb, prefix := testRedis(t)
	o := Options{Prefix: prefix, Beat: 50 * time.Millisecond}
	crashed, live := New(rdb, "p", time.Hour, o), New(rdb, "p", time.Hour, o)
	cc, lc := deepChain(crashed, 4, 2), deepChain(live, 4, 2)
	crashed.Beat()
	live.Beat()
	for range 3 {
		crashed.Admit(cc)
	}
	lp := live.Admit(lc)
	if i, _ := live.PoolCounts(); i != 4 {
		t.Fatalf("pool in flight %d, want 4", i)
	}
	if h := live.Health(); h.Replicas != 2 {
		t.Fatalf("live replicas %d, want 2", h.Replicas)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(o.Beat)
		live.Beat()
		i, _ := live.PoolCounts()
		if i == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crashed replica's requests still counted: pool in flight %d", i)
		}
	}
	if i, w := live.Counts(lc.Slots[0]); i != 1 || w != 1 {
		t.Fatalf("org counts %d/%d after the reap, want 1/1", i, w)
	}
	if h := live.Health(); h.Replicas != 1 {
		t.Fatalf("live replicas %d after the reap, want 1", h.Replicas)
	}
	live.Release(lc, lp, 0, time.Now())
	if i, w := live.Counts(lc.Slots[0]); i != 0 || w != 0 {
		t.Fatalf("org counts %d/%d at the end", i, w)
	}
}

// TestRebuildAfterRedisLostData: Redis forgets everything (a restart
// without persistence) while two replicas have requests in flight, and a
// release lands on the empty Redis. The next beats rebuild exactly what is
// in flight: no leak, no double count; releasing the rest leaves zero.
func TestRebuildAfterRedisLostData(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	o := Options{Prefix: prefix, Beat: 50 * time.Millisecond}
	a, b := New(rdb, "p", time.Hour, o), New(rdb, "p", time.Hour, o)
	ca, cb := deepChain(a, 6, 3), deepChain(b, 6, 3)
	a.Beat()
	b.Beat()
	var pa, pb []fairshare.Placement
	for range 4 {
		pa = append(pa, a.Admit(ca))
	}
	for range 2 {
		pb = append(pb, b.Admit(cb))
	}
	keys, _ := rdb.Keys(ctx, prefix+"*").Result()
	rdb.Del(ctx, keys...)
	a.Release(ca, pa[0], 0, time.Now()) // into the empty Redis: clamped at 0
	pa = pa[1:]
	for range 3 { // a missing registration is seen at the next beat and rebuilt at the one after
		a.Beat()
		b.Beat()
	}
	if i, br := a.PoolCounts(); i != 5 || br != 0 {
		t.Fatalf("pool after the rebuild: %d in flight, %d borrowing; want 5, 0", i, br)
	}
	// a: two within the team (one within went), one over it; b: two over it
	if i, w := a.Counts(ca.Slots[1]); i != 5 || w != 2 {
		t.Fatalf("team after the rebuild: %d in flight, %d within; want 5, 2", i, w)
	}
	for _, p := range pa {
		a.Release(ca, p, 0, time.Now())
	}
	for _, p := range pb {
		b.Release(cb, p, 0, time.Now())
	}
	for s := range []fairshare.Slot{ca.Slots[0], ca.Slots[1]} {
		if i, w := a.Counts(ca.Slots[s]); i != 0 || w != 0 {
			t.Fatalf("account %d left at %d/%d", s, i, w)
		}
	}
}

// ownRedis is a redis-server of the test's own on a free loopback port
// (the machine's shared Redis is never stopped), without persistence.
type ownRedis struct {
	t    *testing.T
	port string
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T, port string, args ...string) *ownRedis {
	t.Helper()
	if os.Getenv("LLMFLOW_SKIP_REDIS") == "1" {
		t.Skip("LLMFLOW_SKIP_REDIS=1")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed (apt-get install redis-server; LLMFLOW_SKIP_REDIS=1 skips)")
	}
	if port == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ = net.SplitHostPort(l.Addr().String())
		l.Close()
	}
	r := &ownRedis{t: t, port: port,
		cmd: exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"}, args...)...)}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	for range 500 {
		if c, err := net.Dial("tcp", r.addr()); err == nil {
			c.Close()
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("redis-server on port %s did not start", port)
	return nil
}

func (r *ownRedis) addr() string { return "127.0.0.1:" + r.port }

func (r *ownRedis) kill() {
	if r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// TestFallbackSliceAndRecovery: three replicas on a Redis of the test's
// own; Redis is killed with requests in flight. Each replica falls back to
// its slice (a reservation of 6 over 3 live replicas: 2 within each, so
// all together never more than 6) and Health says so. Redis comes back
// empty: the beats rebuild the totals from what each really has in flight
// (counted before the kill, and admitted alone since), the fallback ends,
// and releasing everything leaves zero.
func TestFallbackSliceAndRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	r := startOwnRedis(t, "")
	rdb := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	o := Options{Prefix: "t:", Beat: 50 * time.Millisecond, Timeout: 100 * time.Millisecond}
	reps := make([]*Counters, 3)
	chs := make([]*fairshare.Chain, 3)
	for i := range reps {
		reps[i] = New(rdb, "p", time.Hour, o)
		chs[i] = deepChain(reps[i], 6)
		reps[i].Beat()
	}
	for _, c := range reps {
		c.Beat()
		if h := c.Health(); h.Fallback || h.Replicas != 3 {
			t.Fatalf("health before the kill: %+v", h)
		}
	}
	type held struct {
		rep int
		p   fairshare.Placement
	}
	var out []held
	within := 0
	for i := range 3 { // one within per replica before the kill
		p := reps[i].Admit(chs[i])
		if p.Within == 0 {
			t.Fatalf("replica %d: not within before the kill", i)
		}
		out = append(out, held{i, p})
		within++
	}
	r.kill()
	for i := range 3 {
		for range 4 {
			p := reps[i].Admit(chs[i])
			out = append(out, held{i, p})
			if p.Within != 0 {
				within++
			}
		}
		h := reps[i].Health()
		if !h.Fallback || h.Err == "" || h.Replicas != 3 {
			t.Fatalf("replica %d health with Redis down: %+v", i, h)
		}
	}
	// Each replica's slice is 2 within; each already had 1 counted in
	// Redis (not seen now), so 2 more each: 3 + 6 = 9 within in all. The
	// slice guards what is admitted during the outage (6 = the
	// reservation), not what was in flight before it.
	if within != 9 {
		t.Fatalf("%d within in all, want 3 before the kill + 2 per replica's slice", within)
	}
	r2 := startOwnRedis(t, r.port)
	_ = r2
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range reps {
			c.Beat()
		}
		up := 0
		for _, c := range reps {
			if !c.Health().Fallback {
				up++
			}
		}
		if up == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still in fallback 10 s after Redis returned: %+v", reps[0].Health())
		}
		time.Sleep(o.Beat)
	}
	for _, c := range reps {
		c.Beat()
	}
	if i, b := reps[0].PoolCounts(); i != int64(len(out)) || b != int64(len(out)-within) {
		t.Fatalf("rebuilt pool: %d in flight, %d borrowing; want %d, %d", i, b, len(out), len(out)-within)
	}
	if _, w := reps[1].Counts(chs[1].Slots[0]); w != int64(within) {
		t.Fatalf("rebuilt within %d, want %d", w, within)
	}
	// New admissions see the whole: the reservation is taken.
	if p := reps[2].Admit(chs[2]); p.Within != 0 {
		t.Fatalf("admitted within after the rebuild with %d within a reservation of 6", within)
	} else {
		out = append(out, held{2, p})
	}
	for _, h := range out {
		reps[h.rep].Release(chs[h.rep], h.p, 0.1, time.Now())
	}
	for _, c := range reps {
		c.Beat() // local releases are taken off at the next rebuild
	}
	for _, c := range reps {
		c.Beat()
	}
	if i, b := reps[0].PoolCounts(); i != 0 || b != 0 {
		t.Fatalf("pool left at %d in flight, %d borrowing", i, b)
	}
	if _, w := reps[0].Counts(chs[0].Slots[0]); w != 0 {
		t.Fatalf("org left at %d within", w)
	}
	if u := reps[0].Usage(chs[0].Slots[0], time.Now()); u < 0.1*float64(len(out))*0.99 {
		t.Fatalf("usage %g after %d releases of 0.1 GPU-hours (charges made during the outage lost?)", u, len(out))
	}
}

// TestReapedWhileAlive: a replica whose beats stalled past its lease (a
// long pause, not a crash) is reaped while it still has requests in
// flight. Its releases then must not take the other replica's counts off
// the totals, and its next beats put back exactly what it has in flight.
func TestReapedWhileAlive(t *testing.T) {
	rdb, prefix := testRedis(t)
	o := Options{Prefix: prefix, Beat: 50 * time.Millisecond}
	slow, live := started(New(rdb, "p", time.Hour, o)), started(New(rdb, "p", time.Hour, o))
	sc, lc := deepChain(slow, 10), deepChain(live, 10)
	p1, p2 := slow.Admit(sc), slow.Admit(sc)
	for range 3 {
		live.Admit(lc)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(o.Beat)
		live.Beat()
		if i, _ := live.PoolCounts(); i == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled replica was not reaped")
		}
	}
	slow.Release(sc, p1, 0, time.Now()) // its part is gone: must not touch the totals
	if i, w := live.Counts(lc.Slots[0]); i != 3 || w != 3 {
		t.Fatalf("after a reaped replica's release: %d in flight, %d within; want the live replica's 3, 3", i, w)
	}
	slow.Beat() // sees its part missing
	slow.Beat() // rebuilds it
	if i, w := live.Counts(lc.Slots[0]); i != 4 || w != 4 {
		t.Fatalf("after the rebuild: %d in flight, %d within; want 4, 4", i, w)
	}
	slow.Release(sc, p2, 0, time.Now())
	if i, _ := live.PoolCounts(); i != 3 {
		t.Fatalf("pool %d in flight, want 3", i)
	}
}
