package redisstate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// seedRich writes a state in w where no call of randomFoldCall takes a
// count below zero: counts in flight, places and holds of a consistent
// replica (a fold's order differs from the calls' only where a count was
// already wrong, see fold.go). fresh: nothing in flight (the calls count
// their own requests before they end them).
func (w settleWorld) seedRich(t *testing.T, rdb *redis.Client, absentBudget, fresh bool) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	in, in2 := 300, 200
	if fresh {
		in, in2 = 0, 0
	}
	must(rdb.HSet(ctx, w.h, "inflight", in, "borrowing", in2, "i:a", in, "i:a\x00t", in2, "w:a", 5, "w:a\x00t", 100,
		"u:a", "0.5", "t:a", "1000", "u:", "0.25", "t:", "1000").Err())
	must(rdb.HSet(ctx, w.r, "live", 1, "inflight", in, "borrowing", in2, "i:a", in, "i:a\x00t", in2, "w:a", 5, "w:a\x00t", 100).Err())
	must(rdb.HSet(ctx, w.lk, "i:7:rep1", 300, "i:7:rep2", 1).Err())
	must(rdb.HSet(ctx, w.lw, "r:1000", 400, "t:1000", 50000).Err())
	must(rdb.HSet(ctx, w.budgets[0], "charged", 100, "h:7:rep1", 40000).Err())
	must(rdb.ExpireAt(ctx, w.budgets[0], time.Unix(4000000000, 0)).Err())
	if !absentBudget {
		must(rdb.HSet(ctx, w.budgets[1], "charged", 7, "h:7:rep1", 30000).Err())
	}
}

// randomFoldCall draws a call of few shapes, as a busy key's requests
// make them: counts of one of two chains, their ends (keeping or giving
// back, no usage charged), alone or with a quota give of a few tokens
// and charges, and now and then a shape that does not fold (an end that
// charges usage). With open (the requests of each chain counted and not
// ended yet), an end is only drawn for a chain with one open.
func randomFoldCall(rng *rand.Rand, w settleWorld, open *[2]int) settleCall {
	paths := [][]any{{"a"}, {"a", "a\x00t"}}
	pi := rng.IntN(2)
	path := paths[pi]
	draw := rng.IntN(8)
	if open != nil {
		if draw > 2 && draw < 6 && open[pi] == 0 || draw >= 6 {
			draw = 0 // a count: the world holds no other requests
		}
		if draw < 3 {
			open[pi]++
		} else {
			open[pi]--
		}
	}
	within := []string{"1", "11"}[pi]
	keep := func(g float64) []any {
		leaf := path[len(path)-1].(string)
		args := []any{leaf, int64(8), int64(2), len(path), within, "1", g, 1000 + rng.Float64(), 3600.0}
		return append(args, path...)
	}
	give := func() ([]string, []any) {
		keys := []string{w.lk, w.lw, w.budgets[0], w.budgets[1]}
		args := []any{int64(7), int64(rng.IntN(2)), int64(1000), int64(0), int64(rng.IntN(20)), int64(1005), int64(60)}
		for range 2 {
			args = append(args, int64(rng.IntN(50)), int64(rng.IntN(30)), int64(10), int64(4000000000))
		}
		return keys, append(args, "rep1")
	}
	ctr := []string{w.h, w.r}
	switch draw {
	case 0, 1, 2:
		return settleCall{countScript, ctr, path}
	case 3:
		return settleCall{releaseKeepScript, ctr, keep(0)}
	case 4, 5:
		lk, la := give()
		keys, args := joined(lk, la, ctr, keep(0))
		return settleCall{releaseKeepWithQuotaScript, keys, args}
	case 6:
		lk, la := give()
		return settleCall{quotaGiveScript, lk, la}
	default:
		return settleCall{releaseKeepScript, ctr, keep(0.001)}
	}
}

// TestSettleFoldSameAsOneByOne runs random sequences of calls of few
// shapes one script each (directLua) on one copy of the keys, and through
// the pipe with folding (in runs of random lengths) on another: the same
// answers, keys, fields, values and expiries, and fewer calls in Redis.
// Half the worlds start with nothing in flight, their requests counted
// and ended in the sequence (an end folded ahead of its own count would
// be clamped at zero and leave the count behind).
func TestSettleFoldSameAsOneByOne(t *testing.T) {
	rdb, prefix := testRedis(t)
	calls, sent := 0, 0
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 11))
		one, batched := newSettleWorld(fmt.Sprintf("%s%d:one:", prefix, seed)), newSettleWorld(fmt.Sprintf("%s%d:batch:", prefix, seed))
		absent, fresh := seed%3 == 0, seed%2 == 0
		one.seedRich(t, rdb, absent, fresh)
		batched.seedRich(t, rdb, absent, fresh)
		var open *[2]int
		if fresh {
			open = new([2]int)
		}
		n := 1 + rng.IntN(60)
		calls += n
		sent += sameAsOneByOne(t, rdb, seed, rng, n, 20, true, one, batched, func() settleCall { return randomFoldCall(rng, one, open) })
	}
	if sent*10 > calls*7 {
		t.Fatalf("%d calls folded into %d: the shapes hardly folded", calls, sent)
	}
	t.Logf("%d calls folded into %d", calls, sent)
}

// TestFoldShapes: what folds and what does not.
func TestFoldShapes(t *testing.T) {
	w := newSettleWorld("x:")
	ctr := []string{w.h, w.r}
	keepArgs := func(g float64, now float64) []any {
		return []any{"a", int64(8), int64(2), 1, "1", "1", g, now, 3600.0, "a"}
	}
	give := func(toks, units, charged, floor int64) []any {
		return []any{int64(7), int64(1), int64(1000), int64(0), toks, int64(1005), int64(60), units, charged, floor, int64(4000000000), "rep1"}
	}
	op := func(s *redis.Script, keys []string, args []any) *pipeOp {
		return &pipeOp{script: s, keys: keys, args: args}
	}
	for _, c := range []struct {
		name string
		ops  []*pipeOp
		want int
	}{
		{"counts of one chain", []*pipeOp{op(countScript, ctr, []any{"a"}), op(countScript, ctr, []any{"a"})}, 1},
		{"counts of two chains", []*pipeOp{op(countScript, ctr, []any{"a"}), op(countScript, ctr, []any{"a", "a\x00t"})}, 2},
		{"ends at other instants", []*pipeOp{op(releaseKeepScript, ctr, keepArgs(0, 1000.1)), op(releaseKeepScript, ctr, keepArgs(0, 1000.7))}, 1},
		{"ends charging usage", []*pipeOp{op(releaseKeepScript, ctr, keepArgs(0.1, 1000)), op(releaseKeepScript, ctr, keepArgs(0.1, 1000))}, 2},
		{"gives of any tokens of one sign", []*pipeOp{op(quotaGiveScript, w.budgets[:], give(3, 5, 2, 10)), op(quotaGiveScript, w.budgets[:], give(9, 1, 0, 11))}, 1},
		{"gives of tokens of two signs", []*pipeOp{op(quotaGiveScript, w.budgets[:], give(3, 5, 2, 10)), op(quotaGiveScript, w.budgets[:], give(-9, 1, 0, 11))}, 2},
		{"a key in a path's clothes", []*pipeOp{op(countScript, ctr, []any{"a\x00", "b"}), op(countScript, ctr, []any{"a", "\x00b"})}, 2},
	} {
		if got, _ := folded(c.ops, true); len(got) != c.want {
			t.Errorf("%s: %d calls, want %d", c.name, len(got), c.want)
		}
	}
	// sums, and the floor of the first charge (the first give charges
	// nothing)
	calls, _ := folded([]*pipeOp{
		op(quotaGiveScript, w.budgets[:], give(3, 5, 0, 10)),
		op(quotaGiveScript, w.budgets[:], give(4, 6, 2, 11)),
		op(quotaGiveScript, w.budgets[:], give(5, 7, 3, 12)),
	}, true)
	want := []any{int64(7), int64(3), int64(1000), int64(0), int64(12), int64(1005), int64(60), int64(18), int64(5), int64(11), int64(4000000000), "rep1"}
	if len(calls) != 1 || !reflect.DeepEqual(calls[0].args, want) {
		t.Fatalf("folded gives %v, want one call with %v", calls, want)
	}
}

// BenchmarkFold: a millisecond of a busy key's calls (11 requests: a
// count and an end with a quota give each) folded and merged into one
// script call.
func BenchmarkFold(b *testing.B) {
	w := newSettleWorld("x:")
	rng := rand.New(rand.NewPCG(1, 2))
	var batch []*pipeOp
	for len(batch) < 22 {
		c := randomFoldCall(rng, w, nil)
		if c.script == countScript && len(batch)%2 == 0 || c.script == releaseKeepWithQuotaScript && len(batch)%2 == 1 {
			batch = append(batch, &pipeOp{script: c.script, keys: c.keys, args: c.args})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		mergeSettles(batch, true)
	}
}
