package redisstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
)

// Ledger is the budget ledger shared by several gateway replicas through
// Redis: budget holds and spend, per-key RPM/TPM windows and per-key
// in-flight counts. Reserve is one Lua script (one round trip), Settle
// another; a pool's Admissions run both inside the counters' admission
// and release scripts (admissions.go), so that a request makes one round
// trip to Redis at admission and one at its end.
//
// In Redis, per budget and period, a hash holds what is held by requests
// in flight (per bucket of admission time, so that holds a dead replica
// left expire) and what was charged in the period (charged, starting
// from the store's figure the first replica saw). A request is admitted
// against held + max(charged, the replica's own figure of the spend from
// the store), so records of other sources still count. Per key: a
// counter of requests in flight and a hash of per-second buckets of
// requests and tokens (60 s window).
//
// When Redis does not answer, the replica falls back to the gateway's
// own in-process ledger (budgets.Mem, handed over by Shared.Pool) until
// a probe succeeds; Health says
// so. That ledger then enforces this replica's slice (budgets.Mem.SetSlice)
// of what was left of each budget and of each key limit: 1/n, n the live
// replicas last seen (LedgerOptions.Replicas), so that the replicas
// together do not spend a budget n-fold. Settles that could not reach
// Redis are retried by Run, so a hold is not kept forever.
type Ledger struct {
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	ifTTL   time.Duration
	log     *slog.Logger
	// replica names this process in the holds and in-flight places it
	// takes, and in the leases (leaseKey, a sorted set of replica →
	// expiry, Redis's clock) renewed at each reservation and beat: what a
	// replica whose lease expired holds no longer counts.
	replica  string
	leaseKey string
	lease    time.Duration

	// The epoch of the ledger's data in Redis (epochKey, a random token
	// set when the data begins): another one than the replica knew means
	// Redis lost the holds of the requests in flight (a restart without
	// persistence). The replica then admits on its fallback slice, which
	// counts what Redis said was used before, until its own requests
	// admitted in Redis before the loss (inRedis) have settled.
	epochKey string
	epoch    atomic.Value // string: known; "" until Redis first answered
	proposal atomic.Value // string: the token to set when there is none
	// the scripts' constant arguments, boxed once (an argument is an any)
	fixedArgs [4]any // replica, leases' key, lease (s), epoch's key
	lost      atomic.Bool
	inRedis   atomic.Int64

	local atomic.Pointer[budgets.Mem]

	replicas func() int64
	// slice is the divisor the local ledger must enforce (1 while Redis
	// answers); sliceMu orders its changes with the fallback's start and
	// end, so a Mem is never left sliced after the fallback, or whole in it.
	sliceMu sync.Mutex
	slice   atomic.Int64

	down      atomic.Bool
	downSince atomic.Int64
	lastErr   atomic.Pointer[errAt]
	errors    atomic.Int64

	mu      sync.Mutex
	pending []pendingSettle // settles Redis did not take

	// p and q, when set (usePipe), are the pipe the ledger's quotas and
	// their settlements go through, and the quotas (quota.go).
	p *pipe
	q *quotas
}

// usePipe makes the ledger take quotas and settle the requests admitted
// from them through p.
func (l *Ledger) usePipe(p *pipe) {
	l.p = p
	l.q = newQuotas(l)
}

type pendingSettle struct {
	script *redis.Script // nil: settleScript
	keys   []string
	args   []any
}

// LedgerOptions configure a Ledger.
type LedgerOptions struct {
	// Prefix starts every key (default "llmflow:ledger:").
	Prefix string
	// Timeout bounds each Redis call on a request's path (default config.DefaultRedisTimeout).
	Timeout time.Duration
	// InFlightTTL is at least the longest a request may run (default
	// 1 h): holds and in-flight counts are kept in buckets of this width,
	// and those older than the previous bucket dropped, so what a replica
	// that died left held counts for at most twice this long.
	InFlightTTL time.Duration
	Log         *slog.Logger
	// Replica names this process (default: a random name); Lease is how
	// long its holds count after its last reservation or beat (default
	// 3 s, three beats of Run at 1 s): a replica killed with requests in
	// flight stops holding budgets and key places within it.
	Replica string
	Lease   time.Duration
	// Replicas returns the number of live replicas (nil: 1): while Redis
	// is away, budgets and key limits are divided by it.
	Replicas func() int64
}

// NewLedger returns a Ledger over rdb. Its fallback is the gateway's Mem
// (Shared.Pool hands it over); until then, a Mem of its own.
func NewLedger(rdb redis.UniversalClient, o LedgerOptions) *Ledger {
	l := &Ledger{rdb: rdb, prefix: o.Prefix, timeout: o.Timeout, ifTTL: o.InFlightTTL, log: o.Log, replicas: o.Replicas,
		replica: o.Replica, lease: o.Lease}
	if l.replica == "" {
		l.replica = NewReplicaID()
	}
	if l.lease <= 0 {
		l.lease = 3 * time.Second
	}
	l.lease = max(l.lease.Truncate(time.Second), time.Second)
	if l.replicas == nil {
		l.replicas = func() int64 { return 1 }
	}
	l.slice.Store(1)
	if l.prefix == "" {
		l.prefix = "llmflow:ledger:"
	}
	l.leaseKey = l.prefix + "live"
	l.epochKey = l.prefix + "epoch"
	l.epoch.Store("")
	l.newProposal()
	l.fixedArgs = [4]any{l.replica, l.leaseKey, int64(l.lease / time.Second), l.epochKey}
	if l.timeout <= 0 {
		l.timeout = config.DefaultRedisTimeout
	}
	if l.ifTTL <= 0 {
		l.ifTTL = time.Hour
	}
	l.ifTTL = max(l.ifTTL.Truncate(time.Second), time.Second)
	l.local.Store(budgets.NewMem(time.Hour))
	return l
}

// setLocal makes m, the serving gateway's ledger, the fallback and the
// keeper of this gateway's own figures.
func (l *Ledger) setLocal(m *budgets.Mem) { l.local.Store(m) }

// reserveScript takes a request's place. KEYS: the key's in-flight
// counter, its window hash, then one hash per budget slot. ARGV: has key,
// max in-flight, RPM, TPM, tokens, now (unix s), in-flight TTL (s),
// prompt cost, output cost (GPU-hours), output wanted, units per
// GPU-hour, then per slot: limit, floor (units), expiry (unix s), and
// last the replica, the leases' key, the lease (s), the epoch's key, the
// epoch the replica knows ("": none yet) and the one to set when there is
// none.
// It returns {"ok", held, output, {each slot's used (held + charged) after
// it}, epoch}, {reason, retry-after s, slot index}, or {"lost", epoch}
// when the epoch is not the one the replica knows (nothing taken)
// ("budget": 1 for retry-after when requests in flight hold part of the
// exhausted budget, else 0).
var reserveScript = redis.NewScript(ledgerReserveLua + "return ledger_reserve(KEYS, ARGV)\n")

// ledgerReserveLua defines ledger_reserve(KEYS, ARGV), the body of
// reserveScript, also run by the admission script of Admissions (admissions.go).
// liveHoldsLua is the part of the ledger's and the quotas' scripts that
// renews this replica's lease and sums a hash's live holds (live: of the
// current or previous bucket, of a replica whose lease has not expired),
// dropping the rest. It needs now, ifttl, rep, lkey and lsecs defined.
const liveHoldsLua = `local cur = math.floor(now / ifttl)
local tnow = tonumber(redis.call('TIME')[1])
redis.call('ZADD', lkey, tnow + lsecs, rep)
local gone = {}
local function dead(r)
  if r == '' then return false end
  local d = gone[r]
  if d == nil then
    local s = redis.call('ZSCORE', lkey, r)
    d = (not s) or tonumber(s) < tnow
    gone[r] = d
  end
  return d
end
local function live(key, prefix)
  local h = redis.call('HGETALL', key)
  local sum, charged = 0, nil
  for i = 1, #h, 2 do
    local f = h[i]
    if f == 'charged' then
      charged = tonumber(h[i + 1])
    elseif string.sub(f, 1, 2) == prefix then
      local bs, r = string.match(f, '^..(%-?%d+):?(.*)$')
      local b = tonumber(bs)
      if b == nil or b < cur - 1 or dead(r) then
        redis.call('HDEL', key, f)
      else
        sum = sum + tonumber(h[i + 1])
      end
    end
  end
  return sum, charged
end
`

const ledgerReserveLua = `local function ledger_reserve(KEYS, ARGV)
local ekey, known, fresh = ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
local ep = redis.call('GET', ekey)
if not ep then
  -- the ledger's data begins (or began again: Redis lost it)
  redis.call('SET', ekey, fresh)
  ep = fresh
end
if known ~= '' and ep ~= known then return {'lost', ep} end
local hasKey = tonumber(ARGV[1])
local maxif, rpm, tpm = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local toks, now, ifttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local pc, oc, want, upg = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local nslots = #KEYS - 2
local rep, lkey, lsecs = ARGV[#ARGV - 5], ARGV[#ARGV - 4], tonumber(ARGV[#ARGV - 3])
local function I(x) return string.format('%d', x) end
-- holds and in-flight counts are kept per bucket of ifttl seconds (the
-- longest a request may run) and replica ('h:<bucket>:<replica>'): a
-- bucket older than the previous one can only hold what a replica that
-- died left, and is dropped; so is what a replica whose lease expired
-- or was given up holds (it was killed, or stopped: its requests are
-- gone with it); a replica writes its lease before its first hold
` + liveHoldsLua + `local function wait(list, total, need, limit)
  if total + need <= limit then return 0 end
  table.sort(list, function(a, b) return a[1] < b[1] end)
  local left = total
  for _, e in ipairs(list) do
    left = left - e[2]
    if left + need <= limit then return e[1] + 60 - now end
  end
  return 60
end
if hasKey == 1 then
  if maxif > 0 then
    local n = live(KEYS[1], 'i:')
    if n + 1 > maxif then return {'max_inflight', 1, 0} end
  end
  if rpm > 0 or tpm > 0 then
    local h = redis.call('HGETALL', KEYS[2])
    local rl, tl, rt, tt = {}, {}, 0, 0
    for i = 1, #h, 2 do
      local f = h[i]
      local sec = tonumber(string.sub(f, 3))
      local v = tonumber(h[i + 1])
      if sec == nil or sec <= now - 60 then
        redis.call('HDEL', KEYS[2], f)
      elseif sec <= now then
        if string.sub(f, 1, 1) == 'r' then
          rt = rt + v
          rl[#rl + 1] = {sec, v}
        else
          tt = tt + v
          tl[#tl + 1] = {sec, v}
        end
      end
    end
    if rpm > 0 then
      local w = wait(rl, rt, 1, rpm)
      if w > 0 then return {'rpm', w, 0} end
    end
    if tpm > 0 then
      local w = wait(tl, tt, math.min(toks, tpm), tpm)
      if w > 0 then return {'tpm', w, 0} end
    end
  end
end
local held, out = 0, want
local useds = {}
if nslots > 0 then
  local function cost(o)
    local g = pc + oc * o
    if not (g > 0) then return 0 end
    return math.ceil(g * upg * (1 - 1e-12))
  end
  local avail, tight, theld = nil, 1, 0
  for i = 1, nslots do
    local j = 12 + (i - 1) * 3
    local limit, floor = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
    local h, charged = live(KEYS[i + 2], 'h:')
    local used = h + math.max(charged or 0, floor)
    useds[i] = used
    local a = limit - used
    if avail == nil or a < avail then avail, tight, theld = a, i, h end
  end
  local minOut = math.min(want, 1)
  if avail < cost(minOut) then return {'budget', theld > 0 and 1 or 0, tight} end
  local prompt = cost(0)
  if oc > 0 then
    local afford = math.floor((avail - prompt) / (oc * upg))
    if afford < out then out = afford end
  end
  held = cost(out)
  while held > avail and out > minOut do
    out = out - 1
    held = cost(out)
  end
  for i = 1, nslots do
    local j = 12 + (i - 1) * 3
    redis.call('HSETNX', KEYS[i + 2], 'charged', ARGV[j + 1])
    redis.call('HINCRBY', KEYS[i + 2], 'h:' .. cur .. ':' .. rep, I(held))
    redis.call('EXPIREAT', KEYS[i + 2], ARGV[j + 2])
    useds[i] = useds[i] + held
  end
end
if hasKey == 1 then
  redis.call('HINCRBY', KEYS[1], 'i:' .. cur .. ':' .. rep, 1)
  redis.call('EXPIRE', KEYS[1], 2 * ifttl + 60)
  if rpm > 0 or tpm > 0 then
    redis.call('HINCRBY', KEYS[2], 'r:' .. now, 1)
    redis.call('HINCRBY', KEYS[2], 't:' .. now, I(toks))
    redis.call('EXPIRE', KEYS[2], 61)
  end
end
return {'ok', held, out, useds, ep}
end
`

// settleScript gives back what reserveScript took and charges the real
// cost. KEYS as reserveScript's. ARGV: has key, windowed, second of
// admission, tokens to add to that second (real − counted), now, held,
// charge (units), bucket width (s), then per slot: floor, expiry, and
// last the replica that reserved. Nothing goes below 0:
// after Redis lost its data, a settle finds nothing to give back.
var settleScript = redis.NewScript(ledgerSettleLua + "return ledger_settle(KEYS, ARGV)\n")

// ledgerSettleLua defines ledger_settle(KEYS, ARGV), the body of
// settleScript, also run by the release script of Admissions (admissions.go).
const ledgerSettleLua = `local function ledger_settle(KEYS, ARGV)
local hasKey, windowed = tonumber(ARGV[1]), tonumber(ARGV[2])
local sec, dtok, now = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local held, charge, ifttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local rep = ':' .. ARGV[#ARGV]
local function I(x) return string.format('%d', x) end
-- give back to the bucket of the admission, if it was not dropped
local function back(key, f, n)
  if redis.call('HEXISTS', key, f) == 1 and redis.call('HINCRBY', key, f, I(-n)) <= 0 then
    redis.call('HDEL', key, f)
  end
end
local b = math.floor(sec / ifttl)
if hasKey == 1 then
  back(KEYS[1], 'i:' .. b .. rep, 1)
  if windowed == 1 and sec > now - 60 and redis.call('EXISTS', KEYS[2]) == 1 then
    local f = 't:' .. sec
    if redis.call('HINCRBY', KEYS[2], f, I(dtok)) < 0 then redis.call('HSET', KEYS[2], f, 0) end
  end
end
for i = 3, #KEYS do
  local j = 9 + (i - 3) * 2
  if redis.call('EXISTS', KEYS[i]) == 1 then
    back(KEYS[i], 'h:' .. b .. rep, held)
    redis.call('HINCRBY', KEYS[i], 'charged', I(charge))
  else
    redis.call('HSET', KEYS[i], 'charged', I(tonumber(ARGV[j]) + charge))
  end
  redis.call('EXPIREAT', KEYS[i], ARGV[j + 1])
end
return 1
end
`

// slotKey is the hash of a budget's period.
func (l *Ledger) slotKey(s *budgets.Slot) (key string, expire int64) {
	start, end := s.Period()
	// kept a day past the period's end: a request admitted at its end
	// still settles against it
	return l.prefix + "b:" + s.ID() + ":" + strconv.FormatInt(start.Unix(), 10), end.Add(24 * time.Hour).Unix()
}

func (l *Ledger) keyKeys(r *budgets.Request) (inflight, window string) {
	if r.Key == nil {
		return l.prefix + "k:-", l.prefix + "w:-"
	}
	id := r.Key.KeyID()
	return l.prefix + "k:" + id, l.prefix + "w:" + id
}

// Reserve takes r's place as budgets.Mem.Reserve does (a *budgets.Refusal
// when it may not run, having taken nothing), in Redis, or while Redis is
// away in the local Mem: local says which, and Settle must be told the
// same.
func (l *Ledger) Reserve(now time.Time, r *budgets.Request) (local bool, err error) {
	if l.down.Load() {
		return true, l.reserveLocal(now, r)
	}
	keys, args, sec := l.reserveCall(now, r)
	var v []any
	if l.p != nil {
		v, err = l.p.do(reserveScript, keys, args, l.timeout).Slice()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		v, err = reserveScript.Run(ctx, l.rdb, keys, args...).Slice()
		cancel()
	}
	if err != nil {
		l.fail(err)
		return true, l.reserveLocal(now, r)
	}
	if err, ok := l.reserved(v, r, sec); ok {
		if err == errEpochLost {
			return true, l.reserveLocal(now, r)
		}
		if err == nil {
			l.admitted(r)
		}
		return false, err
	}
	l.fail(fmt.Errorf("reserve script answered %v", v))
	return true, l.reserveLocal(now, r)
}

// reserveCall returns reserveScript's keys and arguments for r at now, and
// the second of admission.
func (l *Ledger) reserveCall(now time.Time, r *budgets.Request) (keys []string, args []any, sec int64) {
	r.Output, r.Lowered, r.Sec = r.WantOutput, false, 0
	r.SetHeld(0)
	ik, wk := l.keyKeys(r)
	keys = make([]string, 0, 2+len(r.Slots))
	keys = append(keys, ik, wk)
	sec = now.Unix()
	args = make([]any, 0, 17+3*len(r.Slots))
	args = append(args, b01(r.Key != nil), r.Limits.MaxInFlight, r.Limits.RPM, r.Limits.TPM, r.Tokens, sec,
		int64(l.ifTTL/time.Second), r.PromptCost, r.OutputCost, r.WantOutput, int64(budgets.UnitsPerGPUHour))
	for _, s := range r.Slots {
		k, exp := l.slotKey(s)
		keys = append(keys, k)
		args = append(args, s.Limit(), s.Spent(), exp)
	}
	args = append(append(args, l.fixedArgs[:]...), l.epoch.Load(), l.proposal.Load()) // boxed strings: no allocation
	return keys, args, sec
}

// reserved reads reserveScript's answer v into r: nil when the request
// was admitted, its *budgets.Refusal when not; ok false when v is not an
// answer of the script.
func (l *Ledger) reserved(v []any, r *budgets.Request, sec int64) (err error, ok bool) {
	if len(v) == 2 && v[0] == "lost" {
		ep, _ := v[1].(string)
		l.markLost(ep)
		return errEpochLost, true
	}
	if len(v) < 3 || len(v) > 5 {
		return nil, false
	}
	if len(v) == 5 {
		if ep, _ := v[4].(string); ep != "" && l.epoch.Load() == "" {
			l.adopt(ep)
		}
	}
	reason, _ := v[0].(string)
	n, _ := v[1].(int64)
	x, _ := v[2].(int64)
	switch reason {
	case "ok":
		r.SetHeld(n)
		r.Output, r.Lowered = x, x < r.WantOutput
		r.Sec = sec
		if len(v) >= 4 {
			// what every replica holds and spent: a fallback's slice
			// counts from it
			used, _ := v[3].([]any)
			for i, u := range used {
				if n, ok := u.(int64); ok && i < len(r.Slots) {
					r.Slots[i].SetShared(n)
				}
			}
		}
		return nil, true
	case "max_inflight":
		return &budgets.Refusal{Reason: reason, RetryAfter: time.Second,
			Message: fmt.Sprintf("the key has %d requests in flight, its limit (max_inflight)", r.Limits.MaxInFlight)}, true
	case "rpm":
		return &budgets.Refusal{Reason: reason, RetryAfter: time.Duration(n) * time.Second,
			Message: fmt.Sprintf("the key's limit of %d requests per minute is reached", r.Limits.RPM)}, true
	case "tpm":
		return &budgets.Refusal{Reason: reason, RetryAfter: time.Duration(n) * time.Second,
			Message: fmt.Sprintf("the key's limit of %d tokens per minute is reached", r.Limits.TPM)}, true
	case "budget":
		i := int(x) - 1
		if i < 0 || i >= len(r.Slots) {
			i = 0
		}
		sc := r.Slots[i].Scope()
		_, end := r.Slots[i].Period()
		return &budgets.Refusal{Reason: reason, Scope: sc, Held: n > 0, Reset: end,
			Message: fmt.Sprintf("the budget of %s is exhausted for this %s", sc, periodOf(r.Slots[i]))}, true
	}
	return nil, false
}

func periodOf(s *budgets.Slot) string {
	start, end := s.Period()
	switch d := end.Sub(start); {
	case d <= 25*time.Hour:
		return "day"
	case d <= 7*24*time.Hour:
		return "week"
	}
	return "month"
}

func (l *Ledger) reserveLocal(now time.Time, r *budgets.Request) error {
	m := l.local.Load()
	if m.Slice() != l.slice.Load() { // a Mem handed over (setLocal) in the fallback
		l.sliceMu.Lock()
		m = l.local.Load()
		m.SetSlice(l.slice.Load())
		l.sliceMu.Unlock()
	}
	return m.Reserve(now, r)
}

// Settle gives back what Reserve took, where it took it (local as
// Reserve said), and charges the real cost (GPU-hours) and tokens. It
// must be called once after a successful Reserve; a second Settle of a
// request settled in Redis does nothing.
func (l *Ledger) Settle(now time.Time, r *budgets.Request, local bool, cost float64, tokens int64) {
	if local {
		l.local.Load().Settle(now, r, cost, tokens)
		return
	}
	keys, args, ok := l.settleCall(now, r, cost, tokens)
	if !ok {
		return
	}
	if l.p != nil { // in a pipeline with the replica's other calls
		if err := l.p.do(settleScript, keys, args, l.timeout).Err(); err != nil {
			l.settleFailed(err, keys, args)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	if err := settleScript.Run(ctx, l.rdb, keys, args...).Err(); err != nil {
		l.settleFailed(err, keys, args)
	}
}

// Cancel gives back what Reserve took for a request a later check of the
// same admission refuses (an account's cap), charging nothing: in the
// local Mem everything (budgets.Mem.Cancel); in Redis as a settle of no
// cost and no tokens (its rate-window request count stays).
func (l *Ledger) Cancel(r *budgets.Request, local bool) {
	if local {
		l.local.Load().Cancel(r)
		return
	}
	l.Settle(r.Start, r, false, 0, 0)
}

// settleCall returns settleScript's keys and arguments for r, reserved
// in Redis, having charged this gateway's own figures; ok false when r
// was settled already (its second of admission, r.Sec, is cleared).
func (l *Ledger) settleCall(now time.Time, r *budgets.Request, cost float64, tokens int64) (keys []string, args []any, ok bool) {
	sec := r.Sec
	if sec == 0 {
		return nil, nil, false
	}
	r.Sec = 0
	l.settled(r, sec, tokens)
	ik, wk := l.keyKeys(r)
	keys = make([]string, 0, 2+len(r.Slots))
	keys = append(keys, ik, wk)
	windowed := r.Key != nil && (r.Limits.RPM > 0 || r.Limits.TPM > 0)
	args = make([]any, 0, 9+2*len(r.Slots))
	args = append(args, b01(r.Key != nil), b01(windowed), sec, tokens-r.Tokens, now.Unix(), r.HeldUnits(), budgets.Units(cost),
		int64(l.ifTTL/time.Second))
	for _, s := range r.Slots {
		k, exp := l.slotKey(s)
		keys = append(keys, k)
		args = append(args, s.Spent(), exp)
	}
	args = append(args, l.fixedArgs[0])
	r.SetHeld(0)
	if len(r.Slots) > 0 {
		l.local.Load().Charge(now, r, cost) // this gateway's figures, after Spent was read
	}
	return keys, args, true
}

// settleFailed keeps a settle Redis did not take, for Probe to replay.
func (l *Ledger) settleFailed(err error, keys []string, args []any) {
	l.fail(err)
	l.mu.Lock()
	l.pending = append(l.pending, pendingSettle{keys: keys, args: args})
	l.mu.Unlock()
}

func (l *Ledger) fail(err error) {
	l.errors.Add(1)
	l.lastErr.Store(&errAt{err: err, at: time.Now()})
	if l.down.Load() {
		return
	}
	n := max(l.replicas(), 1)
	l.sliceMu.Lock()
	// sliced before the fallback begins: no local admission takes the whole
	l.slice.Store(n)
	l.local.Load().SetSlice(n)
	first := !l.down.Swap(true)
	l.sliceMu.Unlock()
	if first && l.q != nil {
		l.q.drop()
	}
	if first {
		l.downSince.Store(time.Now().UnixNano())
		if l.log != nil {
			l.log.Warn("redis unreachable: budget holds and key limits are kept by this replica alone, on its slice of each, until it answers",
				"replicas", n, "err", err)
		}
	}
}

// reslice divides the local ledger by the live replicas now, while in
// fallback.
func (l *Ledger) reslice() {
	n := max(l.replicas(), 1)
	l.sliceMu.Lock()
	defer l.sliceMu.Unlock()
	if l.down.Load() {
		l.slice.Store(n)
		l.local.Load().SetSlice(n)
	}
}

// Probe tries Redis once: it replays the settles Redis missed and, when
// all went through, ends the fallback.
func (l *Ledger) Probe() {
	if !l.down.Load() {
		return
	}
	l.reslice()
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	if err := l.rdb.Ping(ctx).Err(); err != nil {
		l.lastErr.Store(&errAt{err: err, at: time.Now()})
		return
	}
	l.mu.Lock()
	todo := l.pending
	l.pending = nil
	l.mu.Unlock()
	for i, p := range todo {
		sc := p.script
		if sc == nil {
			sc = settleScript
		}
		if err := sc.Run(ctx, l.rdb, p.keys, p.args...).Err(); err != nil {
			l.mu.Lock()
			l.pending = append(todo[i:], l.pending...)
			l.mu.Unlock()
			return
		}
	}
	if l.lost.Load() {
		if n := l.inRedis.Load(); n > 0 {
			return // requests admitted before Redis lost their holds still run
		}
		if err := l.reannounce(ctx); err != nil {
			l.lastErr.Store(&errAt{err: err, at: time.Now()})
			return
		}
		l.lost.Store(false)
	}
	l.sliceMu.Lock()
	ended := l.down.Swap(false)
	l.slice.Store(1)
	l.local.Load().SetSlice(1)
	l.sliceMu.Unlock()
	if ended && l.log != nil {
		l.log.Info("redis answers again: budget holds and key limits shared", "settles_replayed", len(todo),
			"fallback_for", time.Since(time.Unix(0, l.downSince.Load())).Round(time.Millisecond))
	}
	l.downSince.Store(0)
}

// Run renews this replica's lease every interval, and probes Redis
// while in fallback (keeping the fallback's slice to the live replicas),
// until ctx ends; then it gives up the lease.
func (l *Ledger) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.release()
			return
		case <-t.C:
			if l.down.Load() {
				l.Probe()
			} else {
				l.Beat()
			}
		}
	}
}

// renewScript renews a replica's lease. KEYS: the leases, the epoch.
// ARGV: the replica, the lease (s), how long the lease of a replica gone
// is kept (s: its holds are dropped by then), the epoch to set when there
// is none. It returns the epoch.
var renewScript = redis.NewScript(`
local t = tonumber(redis.call('TIME')[1])
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t - tonumber(ARGV[3]))
local ep = redis.call('GET', KEYS[2])
if not ep then
  redis.call('SET', KEYS[2], ARGV[4])
  ep = ARGV[4]
end
return ep
`)

// Beat renews this replica's lease, so that the holds of its requests
// in flight keep counting while it lives (a reservation renews it too).
// A Redis that does not answer starts the fallback.
func (l *Ledger) Beat() {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	keep := int64(2*l.ifTTL/time.Second) + 60
	ep, err := renewScript.Run(ctx, l.rdb, []string{l.leaseKey, l.epochKey}, l.replica, int64(l.lease/time.Second), keep,
		l.proposal.Load()).Text()
	if err != nil {
		l.fail(fmt.Errorf("redis lease: %w", err))
		return
	}
	if l.q != nil {
		l.q.idle(time.Now())
	}
	switch known := l.epoch.Load().(string); {
	case known == "":
		l.adopt(ep)
	case ep != known:
		l.markLost(ep)
	}
}

// errEpochLost is the reservation's answer when Redis lost the ledger's
// data: the request is reserved in the fallback instead.
var errEpochLost = errors.New("redis lost the ledger's data")

// adopt makes ep the epoch this replica knows (and proposes another one
// when there is none, should the data be lost again).
func (l *Ledger) adopt(ep string) {
	l.epoch.Store(ep)
	if l.proposal.Load() == ep {
		l.newProposal()
	}
}

func (l *Ledger) newProposal() {
	l.proposal.Store(NewReplicaID())
}

// markLost handles a Redis that lost the ledger's data (epoch ep is not
// the one this replica knew): the holds of the requests in flight are
// gone there, so the replica admits on its fallback slice, counted from
// the budgets' used as Redis last answered (every replica's holds then),
// until its requests admitted before have settled (Probe); then it
// shares Redis again, in the new epoch.
func (l *Ledger) markLost(ep string) {
	l.adopt(ep)
	if l.lost.Swap(true) {
		return
	}
	if l.log != nil {
		l.log.Warn("redis lost the budget ledger's data (restarted empty?): this replica admits on its slice until its requests in flight settle",
			"in_flight", l.inRedis.Load())
	}
	l.fail(errEpochLost)
}

// admitted counts a request reserved in Redis among this replica's in
// flight there, and in its key's in-flight figure and rate windows here
// (what it announces again should Redis lose them: reannounce).
func (l *Ledger) admitted(r *budgets.Request) {
	l.inRedis.Add(1)
	if r.Key != nil {
		r.Key.AddInFlight(1)
		if r.Limits.RPM > 0 || r.Limits.TPM > 0 {
			r.Key.CountWindow(r.Sec, 1, r.Tokens)
		}
	}
}

// settled undoes admitted for a request reserved in Redis at second sec
// that settles with tokens used: its key's window counts those.
func (l *Ledger) settled(r *budgets.Request, sec, tokens int64) {
	l.inRedis.Add(-1)
	if r.Key != nil {
		r.Key.AddInFlight(-1)
		if r.Limits.RPM > 0 || r.Limits.TPM > 0 {
			r.Key.CountWindow(sec, 0, tokens-r.Tokens)
		}
	}
}

// reannounce counts again in Redis, which lost them, the requests and
// tokens this replica admitted in the last minute (in Redis before the
// loss, or alone since) in its keys' rate windows, so that a key's RPM
// and TPM do not start afresh with the new epoch.
func (l *Ledger) reannounce(ctx context.Context) error {
	m, now := l.local.Load(), time.Now().Unix()
	pipe := l.rdb.Pipeline()
	m.EachKey(func(k *budgets.KeyState) {
		wk := l.prefix + "w:" + k.KeyID()
		n := 0
		k.EachWindow(now, func(sec, reqs, toks int64) {
			s := strconv.FormatInt(sec, 10)
			if reqs != 0 {
				pipe.HIncrBy(ctx, wk, "r:"+s, reqs)
			}
			if toks != 0 {
				pipe.HIncrBy(ctx, wk, "t:"+s, toks)
			}
			n++
		})
		if n > 0 {
			pipe.Expire(ctx, wk, 61*time.Second)
		}
	})
	if pipe.Len() == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// release gives up the lease of a replica that stops: its holds are
// settled by then (a gateway drains first), and a restarted process is
// another replica.
func (l *Ledger) release() {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	l.rdb.ZRem(ctx, l.leaseKey, l.replica)
}

// LedgerHealth is the state of the shared ledger.
type LedgerHealth struct {
	Fallback bool // Redis away: this replica's own ledger
	Since    time.Time
	Err      string
	Pending  int // settles waiting for Redis
	// Divisor is what budgets and key limits are divided by in the
	// fallback (the live replicas last seen); 1 while Redis answers.
	Divisor int64
}

// Health returns the ledger's state.
func (l *Ledger) Health() LedgerHealth {
	h := LedgerHealth{Fallback: l.down.Load(), Divisor: l.slice.Load()}
	if h.Fallback {
		h.Since = time.Unix(0, l.downSince.Load())
		if e := l.lastErr.Load(); e != nil {
			h.Err = e.err.Error()
		}
	}
	l.mu.Lock()
	h.Pending = len(l.pending)
	l.mu.Unlock()
	return h
}
