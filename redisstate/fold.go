package redisstate

import (
	"cmp"
	"slices"
	"strconv"
)

// Folding a batch's settle calls.
//
// Under load most settle calls in a batch are alike: the counts in flight
// of one key's requests (the same chain, the same path keys) and their
// ends (the same chain and quotas, only the tokens and the cost differ).
// Run one by one, each costs Redis about as much Lua as the others
// (tens of µs), for fields that end where a sum would have put them.
// folded makes the calls of one shape one call that stands for all of them:
//
//   - counts (ctr_count) of the same keys and path keys: counted m times
//     at once;
//   - ends that keep or give back their place (ctr_release_keep, alone or
//     with quota_give) and charge no usage (g = 0: the usage of requests
//     placed from quotas is charged at the beat): ctr_release_keep decides
//     each one's keep as it would one after the other (a place kept leaves
//     the leaf's count as it is; one given back takes one off, so the next
//     may be kept), and takes the counts off once, m at a time;
//   - quota gives of the same keys, bucket, second and replica: places,
//     units and charges summed (floor: the first charge's, as the first
//     call that finds a budget's hash gone would set it).
//
// Every field these calls change moves one way within a fold (a count
// up, an end's counts down, a give's holds down and charges up; requests
// and tokens of one sign: the sign is part of the shape), so where a
// count is clamped at zero the fold clamps it where the calls one after
// the other would have. A fold of counts runs where its first call was,
// any other fold where its last call was: a count moves ahead of calls of
// other shapes and an end behind them, so no end runs before its own
// request's count. That is the same as one after the other unless a
// count was already wrong (below what is in flight: Redis lost it, or
// another replica's part was taken off), when a clamp at zero may land
// on another call; the beat's rebuild sets a replica's part right, as it
// does after any such loss. Likewise a budget's hash gone from Redis is
// made again with the floor of the first fold that charges it, which may
// not be the first call's: both are this replica's count of what was
// spent, moments apart.

// batchCall is one call in a settleBatchScript: its kind, keys and
// arguments, and the ops it stands for (one, or a fold of several).
type batchCall struct {
	kind settleKind
	keys []string
	args []any
	ops  []*pipeOp
}

// folded returns run's calls, with those of one shape folded when fold is
// true (else one call per op), and where each op of run went: its call,
// and its place in the call's ops. A fold
// of counts runs where its first op was, any other where its last op
// was: a count only moves ahead and an end only behind, so no end is
// taken off before its own count, and no count below zero.
func folded(run []*pipeOp, fold bool) ([]batchCall, []opRef) {
	calls := make([]batchCall, 0, len(run))
	refs := make([]opRef, len(run))
	anchor := make([]int, 0, len(run)) // where each call runs in run
	var shapes map[string]int
	var buf []byte
	for k, op := range run {
		kind := settleKinds[op.script]
		ok := false
		if fold {
			buf, ok = shapeOf(buf[:0], kind, op)
		}
		if ok {
			if i, seen := shapes[string(buf)]; seen {
				refs[k] = opRef{i, len(calls[i].ops)}
				calls[i].add(op)
				if kind != settleCount {
					anchor[i] = k
				}
				continue
			}
			if shapes == nil {
				shapes = make(map[string]int)
			}
			shapes[string(buf)] = len(calls)
		}
		refs[k] = opRef{len(calls), 0}
		calls = append(calls, batchCall{kind: kind, keys: op.keys, args: op.args, ops: []*pipeOp{op}})
		anchor = append(anchor, k)
	}
	if len(calls) == len(run) {
		return calls, refs // nothing folded: nothing moved
	}
	// the calls in the order of their anchors (distinct: one op each)
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(anchor[a], anchor[b]) })
	sorted := make([]batchCall, len(calls))
	pos := anchor[:len(calls)] // reused: the anchors are read no more
	for i, j := range order {
		sorted[i] = calls[j]
		pos[j] = i
	}
	for k := range refs {
		refs[k].call = pos[refs[k].call]
	}
	return sorted, refs
}

// opRef is where an op went in folded's calls.
type opRef struct{ call, at int }

// Argument layouts (0-based) of the calls that fold.
const (
	// ctr_release_keep: leaf, reservation, threshold, then ctr_release's:
	// n, within, top, GPU-hours, now, half-life, path keys.
	keepG, keepNow = 6, 7
	// quota_give: bucket, places, second, requests, tokens, now, bucket
	// width, then per slot units, charged, floor, expiry; the replica.
	givePlaces, giveReqs, giveToks, giveSlots = 1, 3, 4, 7
)

// shapeOf appends to buf what op's call must share with another to fold
// with it, and reports whether it may fold at all.
func shapeOf(buf []byte, kind settleKind, op *pipeOp) ([]byte, bool) {
	buf = append(buf, byte(kind))
	for _, k := range op.keys {
		buf = appendString(buf, k)
	}
	buf = append(buf, 1)
	switch kind {
	case settleCount:
		return appendArgs(buf, op.args, nil)
	case settleReleaseKeep:
		return keepShape(buf, op.args)
	case settleQuotaGive:
		return giveShape(buf, op.args)
	case settleReleaseKeepWithQuota:
		na, ok := splitCounts(op)
		if !ok {
			return buf, false
		}
		if buf, ok = giveShape(buf, op.args[2:2+na]); !ok {
			return buf, false
		}
		return keepShape(buf, op.args[2+na:])
	}
	return buf, false
}

// splitCounts are the numbers of ledger keys and arguments that lead a
// call of ledger and counters (joined).
func splitCounts(op *pipeOp) (na int, ok bool) {
	if len(op.args) < 2 {
		return 0, false
	}
	k, ok1 := intArg(op.args[0])
	a, ok2 := intArg(op.args[1])
	if !ok1 || !ok2 || k < 0 || a < 0 || int(k) > len(op.keys) || 2+int(a) > len(op.args) {
		return 0, false
	}
	return int(a), true
}

func keepShape(buf []byte, args []any) ([]byte, bool) {
	if len(args) <= keepNow {
		return buf, false
	}
	if g, ok := floatArg(args[keepG]); !ok || g != 0 {
		return buf, false // usage charged here: decayed to its own now
	}
	return appendArgs(buf, args, func(i int) bool { return i == keepNow })
}

func giveShape(buf []byte, args []any) ([]byte, bool) {
	if len(args) < giveSlots+1 || (len(args)-giveSlots-1)%4 != 0 {
		return buf, false
	}
	for _, i := range []int{giveReqs, giveToks} {
		d, ok := intArg(args[i])
		if !ok {
			return buf, false
		}
		buf = append(buf, byte(cmp.Compare(d, 0)+'1')) // of one sign
	}
	for i := givePlaces; i < len(args)-1; i++ {
		if additive(i) || floorArg(i) {
			if d, ok := intArg(args[i]); !ok || d < 0 && !signed(i) {
				return buf, false
			}
		}
	}
	return appendArgs(buf, args, func(i int) bool { return additive(i) || floorArg(i) })
}

// additive reports whether quota_give's argument i is summed in a fold.
func additive(i int) bool {
	return i == givePlaces || i == giveReqs || i == giveToks || i >= giveSlots && (i-giveSlots)%4 < 2
}

func signed(i int) bool   { return i == giveReqs || i == giveToks }
func floorArg(i int) bool { return i >= giveSlots && (i-giveSlots)%4 == 2 }

// appendArgs appends args but those skip reports (a placeholder for
// them), each so that no two lists of arguments append the same bytes.
func appendArgs(buf []byte, args []any, skip func(int) bool) ([]byte, bool) {
	for i, a := range args {
		if skip != nil && skip(i) {
			buf = append(buf, '_', 0)
			continue
		}
		switch v := a.(type) {
		case string:
			buf = appendString(buf, v)
		case int:
			buf = append(strconv.AppendInt(buf, int64(v), 10), 0)
		case int64:
			buf = append(strconv.AppendInt(buf, v, 10), 0)
		case float64:
			buf = append(strconv.AppendFloat(buf, v, 'g', -1, 64), 0)
		default:
			return buf, false
		}
	}
	return buf, true
}

// appendString appends s with its length first.
func appendString(buf []byte, s string) []byte {
	buf = strconv.AppendInt(buf, int64(len(s)), 10)
	return append(append(buf, ':'), s...)
}

func intArg(a any) (int64, bool) {
	switch v := a.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func floatArg(a any) (float64, bool) {
	switch v := a.(type) {
	case float64:
		return v, true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return 0, false
}

// add folds op into c: its arguments become a copy the first time, the
// gives' numbers summed in it.
func (c *batchCall) add(op *pipeOp) {
	if len(c.ops) == 1 {
		c.args = append([]any(nil), c.args...)
	}
	c.ops = append(c.ops, op)
	switch c.kind {
	case settleQuotaGive:
		sumGive(c.args, op.args)
	case settleReleaseKeepWithQuota:
		na, _ := splitCounts(op)
		sumGive(c.args[2:2+na], op.args[2:2+na])
	}
}

// sumGive adds op's places, requests, tokens, units and charges to
// those of the fold's quota_give arguments args; the floor is the first
// charge's.
func sumGive(args, op []any) {
	sum := func(i int) {
		a, _ := intArg(args[i])
		b, _ := intArg(op[i])
		args[i] = a + b
	}
	sum(givePlaces)
	sum(giveReqs)
	sum(giveToks)
	for j := giveSlots; j+3 < len(args); j += 4 {
		if c, _ := intArg(args[j+1]); c == 0 {
			args[j+2] = op[j+2] // no charge yet: a later one sets the floor
		}
		sum(j)
		sum(j + 1)
	}
}
