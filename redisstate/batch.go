package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settling in batches.
//
// A request's count in flight and its end, when its quotas cover it, are
// scripts nobody waits for (within.go, releaseLeased), and each touched
// about thirty hash fields one command at a time: under load most of
// Redis's time went there, about 70 µs a request. The settle scripts'
// bodies (ctr_count, ctr_release, ctr_release_keep, quota_give, charge)
// are written over a small hash API with two backends:
//
//   - directLua: each call is the Redis command, as the scripts always
//     did (the single scripts: countScript, releaseScript, ...);
//   - cachedLua: fields are read once, kept in the script's memory, and
//     written back once at its end (HSET and HDEL per key, EXPIREAT last).
//
// Within one script nothing else runs on Redis, so the cached backend
// leaves every key exactly as the direct one does after the same calls
// in the same order (TestSettleBatchSameAsOneByOne). The pipe (pipe.go)
// sends every run of such calls that are next to each other in its queue
// as one call of settleBatchScript: what concurrent requests settle
// shares one script, its fields read and written once, and a single call
// alone still costs fewer commands.

// hashLua's backends define hget(k, f) (the value, false when absent),
// hset(k, f, v, ...), hincr(k, f, d) (the new value), hexists(k, f),
// hdel(k, f), exists(k), expireat(k, t) and flush() (run once, last).
const directLua = `
local function hget(k, f) return redis.call('HGET', k, f) end
local function hset(k, ...) redis.call('HSET', k, ...) end
local function hincr(k, f, d) return redis.call('HINCRBY', k, f, d) end
local function hexists(k, f) return redis.call('HEXISTS', k, f) == 1 end
local function hdel(k, f) redis.call('HDEL', k, f) end
local function exists(k) return redis.call('EXISTS', k) == 1 end
local function expireat(k, t) redis.call('EXPIREAT', k, t) end
local function flush() end
`

// cachedLua: V[k][f] is a field's value as this script knows it (a
// string, false: absent, nil: not read yet), W[k][f] marks the fields
// written, E[k] whether the key exists (nil: not known), X[k] the expiry
// set last. A number is stored as redis.call would send it: integers
// without a fraction.
const cachedLua = `
local V, W, E, X = {}, {}, {}, {}
local function vals(k)
  local t = V[k]
  if not t then t = {}; V[k] = t end
  return t
end
local function put(k, f, v)
  if type(v) == 'number' then
    if v == math.floor(v) then v = string.format('%d', v) else v = string.format('%.17g', v) end
  end
  vals(k)[f] = v
  local w = W[k]
  if not w then w = {}; W[k] = w end
  w[f] = true
end
local function hget(k, f)
  local t = vals(k)
  local v = t[f]
  if v == nil then
    v = redis.call('HGET', k, f)
    t[f] = v
  end
  return v
end
local function hset(k, ...)
  local a = {...}
  for i = 1, #a, 2 do put(k, a[i], a[i + 1]) end
  E[k] = true
end
local function hincr(k, f, d)
  local v = tonumber(hget(k, f) or '0') + tonumber(d)
  put(k, f, v)
  E[k] = true
  return v
end
local function hexists(k, f) return hget(k, f) ~= false end
local function hdel(k, f)
  put(k, f, false)
  E[k] = nil
end
local function flushkey(k)
  local w = W[k]
  if w then
    local t, set, del = V[k], {}, {}
    for f in pairs(w) do
      local v = t[f]
      if v == false then del[#del + 1] = f else set[#set + 1] = f; set[#set + 1] = v end
    end
    if #set > 0 then redis.call('HSET', k, unpack(set)) end
    if #del > 0 then redis.call('HDEL', k, unpack(del)) end
    W[k] = nil
  end
  if X[k] then
    redis.call('EXPIREAT', k, X[k])
    X[k] = nil
  end
end
local function exists(k)
  if E[k] == nil then
    flushkey(k)
    E[k] = redis.call('EXISTS', k) == 1
  end
  return E[k]
end
local function expireat(k, t) X[k] = t end
local function flush()
  for k in pairs(W) do flushkey(k) end
  for k in pairs(X) do flushkey(k) end
end
`

// settleKind is a script settleBatchScript runs for a call of it.
type settleKind int

const (
	settleCount                settleKind = iota + 1 // countScript
	settleRelease                                    // releaseScript
	settleReleaseKeep                                // releaseKeepScript
	settleReleaseWithQuota                           // releaseWithQuotaScript
	settleReleaseKeepWithQuota                       // releaseKeepWithQuotaScript
	settleQuotaGive                                  // quotaGiveScript
)

// settleKinds are the scripts the pipe sends together.
var settleKinds = map[*redis.Script]settleKind{
	countScript:                settleCount,
	releaseScript:              settleRelease,
	releaseKeepScript:          settleReleaseKeep,
	releaseWithQuotaScript:     settleReleaseWithQuota,
	releaseKeepWithQuotaScript: settleReleaseKeepWithQuota,
	quotaGiveScript:            settleQuotaGive,
}

// settleBatchScript runs the calls of settleKinds in order, over
// cachedLua, and returns their answers. KEYS: the calls' keys one after
// the other. ARGV: m, then per call its kind, its number of keys and of
// arguments and how many ops it stands for (its multiplicity, see fold),
// then the calls' arguments one after the other. A call's answer is one
// value for all its ops, or a list of one per op.
var settleBatchScript = redis.NewScript(cachedLua + chargeLua + ctrReleaseLua + ctrReleaseKeepLua + ctrCountLua + quotaGiveLua + splitLua + `
local m = tonumber(ARGV[1])
local ki, ai = 1, 2 + 4 * m
local out = {}
for s = 1, m do
  local kind, nk, na, x = tonumber(ARGV[4 * s - 2]), tonumber(ARGV[4 * s - 1]), tonumber(ARGV[4 * s]), tonumber(ARGV[4 * s + 1])
  if x == 1 then x = nil end
  local K, A = {}, {}
  for i = 1, nk do K[i] = KEYS[ki + i - 1] end
  for i = 1, na do A[i] = ARGV[ai + i - 1] end
  ki, ai = ki + nk, ai + na
  local r = 0
  if kind == 1 then r = ctr_count(K, A, x)
  elseif kind == 2 then r = ctr_release(K, A)
  elseif kind == 3 then r = ctr_release_keep(K, A, x)
  elseif kind == 4 or kind == 5 then
    local LK, LA, CK, CA = split(K, A)
    if kind == 4 then r = ctr_release(CK, CA) else r = ctr_release_keep(CK, CA, x) end
    quota_give(LK, LA)
  elseif kind == 6 then r = quota_give(K, A)
  else return redis.error_reply('settle batch: unknown kind ' .. tostring(kind))
  end
  out[s] = r
end
flush()
return out
`)

// settleBatchMost is the most calls one settleBatchScript runs: a script
// blocks Redis while it runs (tens of µs a call), so a long queue goes as
// several, in the same pipeline.
const settleBatchMost = 64

// mergeSettles returns batch with each op of settleKinds, and each run of
// them next to each other, made one call of settleBatchScript (of
// settleBatchMost calls at most) whose answers go to each op as its own;
// with fold, the calls of one shape in a run as one (fold.go).
func mergeSettles(batch []*pipeOp, fold bool) []*pipeOp {
	var out []*pipeOp
	for i := 0; i < len(batch); {
		if settleKinds[batch[i].script] == 0 {
			out = append(out, batch[i])
			i++
			continue
		}
		j := i + 1
		for j < len(batch) && settleKinds[batch[j].script] != 0 {
			j++
		}
		calls, refs := folded(batch[i:j], fold)
		for first := 0; first < len(calls); first += settleBatchMost {
			last := min(len(calls), first+settleBatchMost)
			// the ops of these calls, in run's order
			var mine []opRef
			for _, r := range refs {
				if r.call >= first && r.call < last {
					mine = append(mine, opRef{r.call - first, r.at})
				}
			}
			out = append(out, settleOp(calls[first:last], mine))
		}
		i = j
	}
	return out
}

// settleOp is the call of settleBatchScript for calls; their ops are
// answered in the order of refs.
func settleOp(calls []batchCall, refs []opRef) *pipeOp {
	nk, na := 0, 1+4*len(calls)
	for _, c := range calls {
		nk += len(c.keys)
		na += len(c.args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 0, na)
	args = append(args, len(calls))
	var timeout time.Duration
	for _, c := range calls {
		args = append(args, int(c.kind), len(c.keys), len(c.args), len(c.ops))
		keys = append(keys, c.keys...)
		for _, op := range c.ops {
			timeout = max(timeout, op.timeout)
		}
	}
	for _, c := range calls {
		args = append(args, c.args...)
	}
	return &pipeOp{script: settleBatchScript, keys: keys, args: args, timeout: timeout, then: func(cmd *redis.Cmd) {
		answers, err := cmd.Slice()
		if err == nil && len(answers) != len(calls) {
			err = fmt.Errorf("settle batch: %d answers for %d calls", len(answers), len(calls))
		}
		for _, r := range refs {
			c := redis.NewCmd(context.Background())
			v := answer(answers, r, len(calls[r.call].ops), err)
			if e, ok := v.(error); ok {
				c.SetErr(e)
			} else {
				c.SetVal(v)
			}
			calls[r.call].ops[r.at].answer(c)
		}
	}}
}

// answer is the answer of the op at r in a batch's answers: the call's
// (one for all its ops) or the op's own in the call's list of n; an error
// when there is none.
func answer(answers []any, r opRef, n int, err error) any {
	if err != nil {
		return err
	}
	each, ok := answers[r.call].([]any)
	if !ok {
		return answers[r.call]
	}
	if len(each) != n {
		return fmt.Errorf("settle batch: %d answers for %d folded calls", len(each), n)
	}
	return each[r.at]
}

// answer hands op its answer: to the waiting caller, or to then.
func (op *pipeOp) answer(cmd *redis.Cmd) {
	switch {
	case op.wait != nil:
		op.wait <- cmd
	case op.then != nil:
		op.then(cmd)
	}
}
