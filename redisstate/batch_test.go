package redisstate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/admission"
)

// settleWorld is one copy of the keys the settle scripts touch, under a
// prefix of its own: a pool's totals and this replica's part, a key's
// ledger hashes (in flight, window) and two budgets.
type settleWorld struct {
	prefix       string
	h, r, lk, lw string
	budgets      [2]string
}

func newSettleWorld(prefix string) settleWorld {
	return settleWorld{
		prefix: prefix,
		h:      prefix + "counters:{p}", r: prefix + "counters:{p}:r:rep1",
		lk: prefix + "ledger:k:key1", lw: prefix + "ledger:w:key1",
		budgets: [2]string{prefix + "ledger:b:org/a/:100", prefix + "ledger:b:key/key1/:100"},
	}
}

// seed writes the same starting state in w: counts that some calls take
// below zero, usage to decay, holds to give back, a window, one budget
// that does not exist yet (when absent).
func (w settleWorld) seed(t *testing.T, rdb *redis.Client, registered, absentBudget bool) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rdb.HSet(ctx, w.h, "inflight", 3, "borrowing", 1, "i:a", 2, "i:a\x00t", 1, "w:a", 2, "w:a\x00t", 1,
		"u:a", "0.5", "t:a", "1000", "u:", "0.25", "t:", "1000").Err())
	if registered {
		must(rdb.HSet(ctx, w.r, "live", 1, "inflight", 2, "i:a", 1, "w:a", 1, "borrowing", 0).Err())
	} else {
		must(rdb.HSet(ctx, w.r, "inflight", 2).Err())
	}
	must(rdb.HSet(ctx, w.lk, "i:7:rep1", 3, "i:7:rep2", 1).Err())
	must(rdb.HSet(ctx, w.lw, "r:1000", 4, "t:1000", 500).Err())
	must(rdb.HSet(ctx, w.budgets[0], "charged", 100, "h:7:rep1", 40).Err())
	must(rdb.ExpireAt(ctx, w.budgets[0], time.Unix(4000000000, 0)).Err())
	if !absentBudget {
		must(rdb.HSet(ctx, w.budgets[1], "charged", 7, "h:7:rep1", 3).Err())
	}
}

// dump is every key of w as HGETALL and its expiry (unix s, −1: none).
func (w settleWorld) dump(t *testing.T, rdb *redis.Client) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	for i, k := range []string{w.h, w.r, w.lk, w.lw, w.budgets[0], w.budgets[1]} {
		v, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		exp, err := rdb.Do(ctx, "EXPIRETIME", k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		out[strconv.Itoa(i)] = v
		out[strconv.Itoa(i)+"-expire"] = exp
	}
	return out
}

// settleCall is one call of a settle script with w's keys.
type settleCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// randomSettleCall draws a call of one of the settle scripts for world
// w: counts, releases that keep or give back, with or without usage,
// within or not, quota gives of holds and charges, expiries.
func randomSettleCall(rng *rand.Rand, w settleWorld) settleCall {
	paths := [][]any{{"a"}, {"a", "a\x00t"}}
	path := paths[rng.IntN(2)]
	release := func() []any {
		within := ""
		for range path {
			within += strconv.Itoa(rng.IntN(2))
		}
		g := 0.0
		if rng.IntN(3) > 0 {
			g = float64(rng.IntN(1000)) / 1e6
		}
		top := strconv.Itoa(rng.IntN(2))
		args := []any{len(path), within, top, g, 1000 + rng.IntN(100), 3600}
		return append(args, path...)
	}
	keep := func() []any {
		leaf := ""
		if rng.IntN(3) > 0 {
			leaf = path[len(path)-1].(string)
		}
		return append([]any{leaf, 1 + rng.IntN(4), rng.IntN(3)}, release()...)
	}
	give := func() ([]string, []any) {
		keys := []string{w.lk, w.lw}
		args := []any{"7", rng.IntN(3), 1000 - 61*rng.IntN(2), rng.IntN(3) - 1, rng.IntN(200) - 100, 1005, 60}
		n := rng.IntN(3)
		for i := range n {
			keys = append(keys, w.budgets[i])
			args = append(args, rng.IntN(50), rng.IntN(30)-5, 10, 4000000000+rng.IntN(10))
		}
		return keys, append(args, "rep1")
	}
	ctr := []string{w.h, w.r}
	switch rng.IntN(6) {
	case 0:
		return settleCall{countScript, ctr, path}
	case 1:
		return settleCall{releaseScript, ctr, release()}
	case 2:
		return settleCall{releaseKeepScript, ctr, keep()}
	case 3:
		lk, la := give()
		keys, args := joined(lk, la, ctr, release())
		return settleCall{releaseWithQuotaScript, keys, args}
	case 4:
		lk, la := give()
		keys, args := joined(lk, la, ctr, keep())
		return settleCall{releaseKeepWithQuotaScript, keys, args}
	default:
		lk, la := give()
		return settleCall{quotaGiveScript, lk, la}
	}
}

// TestSettleBatchSameAsOneByOne runs random sequences of settle calls one
// script each (directLua) on one copy of the keys and through the pipe's
// merge (cachedLua, in runs of random lengths) on another, and requires
// the same answers and the same keys, fields, values and expiries.
func TestSettleBatchSameAsOneByOne(t *testing.T) {
	rdb, prefix := testRedis(t)
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		one, batched := newSettleWorld(fmt.Sprintf("%s%d:one:", prefix, seed)), newSettleWorld(fmt.Sprintf("%s%d:batch:", prefix, seed))
		registered, absent := seed%4 != 3, seed%3 == 0
		one.seed(t, rdb, registered, absent)
		batched.seed(t, rdb, registered, absent)
		sameAsOneByOne(t, rdb, seed, rng, 1+rng.IntN(40), 8, false, one, batched, func() settleCall { return randomSettleCall(rng, one) })
	}
}

// sameAsOneByOne draws n calls, runs each as its own script (directLua)
// on one's keys and all of them through a pipe (folding them or not) on
// batched's keys, in runs of 1 to most calls with a barrier (not a
// settle) between them, and fails unless the answers, in order, and the
// keys (fields, values, expiries) are the same. It returns how many
// calls the pipe's scripts made of the n.
func sameAsOneByOne(t *testing.T, rdb *redis.Client, seed uint64, rng *rand.Rand, n, most int, fold bool, one, batched settleWorld, draw func() settleCall) int {
	t.Helper()
	ctx := context.Background()
	var want, got []any
	var ops []*pipeOp
	for range n {
		c := draw()
		keys := make([]string, len(c.keys))
		for i, k := range c.keys {
			keys[i] = strings.Replace(k, one.prefix, batched.prefix, 1)
		}
		v, err := c.script.Run(ctx, rdb, c.keys, c.args...).Result()
		if err != nil {
			t.Fatalf("seed %d: one by one: %v", seed, err)
		}
		want = append(want, v)
		ops = append(ops, &pipeOp{script: c.script, keys: keys, args: c.args, timeout: time.Second, then: func(cmd *redis.Cmd) {
			v, err := cmd.Result()
			if err != nil {
				t.Errorf("seed %d: through the pipe: %v", seed, err)
			}
			got = append(got, v)
		}})
	}
	p := &pipe{rdb: rdb, loaded: map[*redis.Script]bool{}, fold: fold}
	var batch []*pipeOp
	sent := 0
	for i := 0; i < len(ops); {
		j := min(len(ops), i+1+rng.IntN(most))
		calls, _ := folded(ops[i:j], fold)
		sent += len(calls)
		batch = append(batch, ops[i:j]...)
		batch = append(batch, &pipeOp{then: func(*redis.Cmd) {}})
		i = j
	}
	p.exec(batch)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("seed %d: answers one by one %v, through the pipe (fold %v) %v", seed, want, fold, got)
	}
	if a, b := one.dump(t, rdb), batched.dump(t, rdb); !reflect.DeepEqual(a, b) {
		t.Fatalf("seed %d (%d calls): one by one\n%v\nthrough the pipe (fold %v)\n%v", seed, n, a, fold, b)
	}
	return sent
}

// TestSettleBatchOneScriptPerRun: the pipe sends a run of settle calls as
// one script, and other calls around it as they are, in order.
func TestSettleBatchOneScriptPerRun(t *testing.T) {
	w := newSettleWorld("x:")
	batch := []*pipeOp{
		{script: countScript, keys: []string{w.h, w.r}, args: []any{"a"}},
		{script: releaseScript, keys: []string{w.h, w.r}},
		{script: quotaTakeScript},
		{script: quotaGiveScript, keys: []string{w.lk}},
		{},
		{script: countScript},
	}
	got := mergeSettles(batch, true)
	var scripts []any
	for _, op := range got {
		scripts = append(scripts, op.script)
	}
	want := []any{settleBatchScript, quotaTakeScript, settleBatchScript, (*redis.Script)(nil), settleBatchScript}
	if !reflect.DeepEqual(scripts, want) {
		t.Fatalf("merged scripts %v, want %v", scripts, want)
	}
	if k := strings.Join(got[0].keys, ","); k != "x:counters:{p},x:counters:{p}:r:rep1,x:counters:{p},x:counters:{p}:r:rep1" {
		t.Errorf("merged keys %s", k)
	}
	if a := fmt.Sprint(got[0].args); a != "[2 1 2 1 1 2 2 0 1 a]" {
		t.Errorf("merged args %s", a)
	}
}

// TestPipeLingersSettles: settle calls nobody waits for wait in the pipe
// (here for an hour) and go with the next call that cannot wait, as one
// script in one round trip, each answered in order.
func TestPipeLingersSettles(t *testing.T) {
	base, prefix := testRedis(t)
	slow := &slowPipelines{}
	rdb := hookedClient(t, base, slow)
	w := newSettleWorld(prefix)
	w.seed(t, base, true, false)
	p := newPipe(rdb)
	p.linger = time.Hour
	t.Cleanup(p.close)
	var order []int
	for i := range 5 {
		p.send(countScript, []string{w.h, w.r}, []any{"a"}, time.Second, func(cmd *redis.Cmd) {
			if v, err := cmd.Int64(); err != nil || v != 1 {
				t.Errorf("count %d: %v %v", i, v, err)
			}
			order = append(order, i)
		})
	}
	time.Sleep(20 * time.Millisecond) // nothing may go meanwhile
	if n := slow.scripted.Load(); n != 0 {
		t.Fatalf("%d round trips before anything waited", n)
	}
	p.barrier()
	if pipes, scripts := slow.scripted.Load(), slow.scripts.Load(); pipes != 1 || scripts != 1 {
		t.Fatalf("%d scripts in %d round trips, want 1 in 1", scripts, pipes)
	}
	if fmt.Sprint(order) != "[0 1 2 3 4]" {
		t.Fatalf("answered in order %v", order)
	}
	if v, _ := base.HGet(context.Background(), w.h, "inflight").Int(); v != 3+5 {
		t.Fatalf("inflight %d, want 8", v)
	}
}

// TestPipeLingersWhileSending: settle calls handed over while a batch is
// on its way wait for their own linger, not only for that round trip, and
// a call that is waited for takes them along at once.
func TestPipeLingersWhileSending(t *testing.T) {
	base, prefix := testRedis(t)
	slow := &slowPipelines{d: 40 * time.Millisecond}
	rdb := hookedClient(t, base, slow)
	w := newSettleWorld(prefix)
	w.seed(t, base, true, false)
	p := newPipe(rdb)
	p.linger = 300 * time.Millisecond
	t.Cleanup(p.close)
	count := func() {
		p.send(countScript, []string{w.h, w.r}, []any{"a"}, time.Second, func(cmd *redis.Cmd) {
			if err := cmd.Err(); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 10 s", what)
			}
		}
	}
	// A waited call on its way (40 ms), and a count handed over meanwhile.
	done := make(chan struct{})
	go func() {
		p.do(releaseScript, []string{w.h, w.r}, []any{1, "0", "1", 0, 1000, 3600, "a"}, time.Second)
		close(done)
	}()
	waitFor("the first round trip", func() bool { return slow.scripted.Load() == 1 })
	count()
	t0 := time.Now()
	<-done
	time.Sleep(100 * time.Millisecond) // the round trip is over, the linger is not
	if n := slow.scripted.Load(); n != 1 && time.Since(t0) < p.linger {
		t.Fatalf("%d round trips: the count went with no linger", n)
	}
	waitFor("the count after its linger", func() bool { return slow.scripted.Load() == 2 })
	// A count lingers; a waited call takes it along at once.
	count()
	p.do(countScript, []string{w.h, w.r}, []any{"a"}, time.Second)
	if n := slow.scripted.Load(); n != 3 {
		t.Fatalf("%d round trips, want 3", n)
	}
	if v, _ := base.HGet(context.Background(), w.h, "inflight").Int(); v != 3-1+3 {
		t.Fatalf("inflight %d, want 5", v)
	}
}

// TestLeasedUsageChargedAtBeat: requests placed from quotas charge their
// usage at the pool's next beat, all at once, not in their end scripts;
// this replica sees it at once, Redis (so the other replicas) after the
// beat, and none of it is lost or counted twice.
func TestLeasedUsageChargedAtBeat(t *testing.T) {
	rdb, prefix := testRedis(t)
	now := time.Now()
	s, _, p, ch := pipedReplica(t, rdb, prefix, now, 100)
	ctx := context.Background()
	// until ten were placed from quotas (the first ask for them is
	// answered on the pipe's time)
	const g = 0.01
	n, leased := 0, 0
	for deadline := time.Now().Add(10 * time.Second); leased < 10 && time.Now().Before(deadline); n++ {
		a := &admission.Admission{Chain: ch}
		if err := p.Shared.Admit(ctx, a); err != nil {
			t.Fatal(err)
		}
		if a.Leased != 0 {
			leased++
		}
		p.Shared.Release(ctx, a, admission.End{At: now, GPUHours: g})
		s.p.barrier()
	}
	if leased < 10 {
		t.Fatalf("%d of %d requests placed from a quota", leased, n)
	}
	slot := ch.Slots[0]
	stored := func() float64 {
		v, _ := rdb.HGet(ctx, prefix+"counters:{p}", "u:"+s.pools["p"].pathKey(slot)).Float64()
		return v
	}
	if u := p.Counters.Usage(slot, now); math.Abs(u-float64(n)*g) > 1e-9 {
		t.Fatalf("this replica sees usage %g before the beat, want %g", u, float64(n)*g)
	}
	// the requests placed in Redis charged in their end scripts; a beat of
	// the pool's own may have charged the others already
	if before, inline := stored(), float64(n-leased)*g; before < inline-1e-9 || before > float64(n)*g+1e-9 {
		t.Fatalf("Redis has usage %g before the beat: want from %g (the %d requests placed in Redis) to %g", before, inline, n-leased, float64(n)*g)
	}
	s.pools["p"].Beat()
	if u := stored(); math.Abs(u-float64(n)*g) > 1e-6 {
		t.Fatalf("Redis has usage %g after the beat, want %g", u, float64(n)*g)
	}
	if u := p.Counters.Usage(slot, now); math.Abs(u-float64(n)*g) > 1e-6 {
		t.Fatalf("this replica sees usage %g after the beat, want %g", u, float64(n)*g)
	}
}

// TestSettleBatchBounded: a long run of settle calls goes as scripts of
// settleBatchMost calls at most, in order.
func TestSettleBatchBounded(t *testing.T) {
	var batch []*pipeOp
	for i := range 2*settleBatchMost + 3 {
		batch = append(batch, &pipeOp{script: countScript, args: []any{strconv.Itoa(i)}})
	}
	got := mergeSettles(batch, true) // all different: none folds
	var sizes []any
	for _, op := range got {
		sizes = append(sizes, op.args[0])
	}
	if fmt.Sprint(sizes) != fmt.Sprint([]int{settleBatchMost, settleBatchMost, 3}) {
		t.Fatalf("scripts of %v calls", sizes)
	}
	if last := got[2].args[len(got[2].args)-1]; last != strconv.Itoa(2*settleBatchMost+2) {
		t.Fatalf("last call's argument %v", last)
	}
}
