// Package redisstate keeps the state that gateway replicas share in
// Redis: the fair-share counters of every pool (Counters), the budget
// holds, spend and key limits (Ledger), both taken by one admission of a
// request (Admissions, an admission.Shared), and the invalidation of
// cached keys and admin state (Bus), so that several replicas behind a
// load balancer admit against one set of counts and a revocation on one
// takes effect on all. Shared holds it for the life of a process: it is
// the admission.Source of the gateways built on it.
//
// # Counters
//
// Counters implements fairshare.Counters, and with the Ledger the
// admission.Shared of a pool (Admissions, admissions.go). Each admission
// is one Redis round trip (a Lua script that checks the GrpTRES caps,
// reads the within counts, applies fairshare.Place and counts the request,
// atomically), each release one more (a script that uncounts it and
// charges the usage, decayed in Redis). A request with a budget or key
// limits takes its Ledger reservation in that same script, and settles it
// in the release's: still one round trip each side. What a pool has lives
// under the hash tag "{<pool>}" (one slot in a Redis Cluster): the totals
// in "<prefix>{<pool>}", and what each replica counted in
// "<prefix>{<pool>}:r:<replica>", written by the same scripts.
//
// With a pipe (Shared with Pipeline, as Open makes it), a replica sends
// its scripts in order as pipelines (pipe.go) and admits the common
// request with no round trip at all, from quotas it holds of places
// within reservations (within.go) and of budgets and key limits
// (quota.go): see there for what each may cost in precision, never in
// excess.
//
// Leases: every replica renews its lease in "<prefix>{<pool>}:live" (a
// sorted set of replica → expiry, Redis's clock) every beat (1 s; the
// lease lasts 3 s). Each beat also reaps the replicas whose lease expired:
// their counts are taken off the totals, so the requests a crashed replica
// had in flight disappear within the lease.
//
// Capacity: the beat also tells each replica its rank among the live ones
// (by name), from which Share gives it its part of a pool capacity (the
// gateway-side queue of a scheduler = "gateway" pool), the parts of all
// replicas summing exactly to it.
//
// Redis trouble: after a failed call the pool falls back to counts in
// this process, placing requests against its own slice of each
// reservation (the reservation divided by the number of live replicas
// last seen, rounded down, so that all replicas together never grant more
// than one gateway would), and Health says so. Each beat tries Redis
// again; when it answers, the replica rebuilds its part from what it
// really has in flight: its replica hash is replaced by its own counts
// (what Redis counted and what it admitted alone meanwhile) and the
// totals are moved by the difference, atomically. So a Redis that
// restarted empty, a release that never arrived, or a script that ran but
// whose answer was lost leave neither a leak nor a double count. Usage
// charged while Redis was away is kept here and charged at that rebuild.
package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Options configure Counters.
type Options struct {
	// Prefix starts every key (default "llmflow:counters:").
	Prefix string
	// Timeout bounds each Redis call made on a request's path
	// (default config.DefaultRedisTimeout).
	Timeout time.Duration
	// Replica names this process among the replicas (default: random).
	Replica string
	// Beat is how often the lease is renewed, dead replicas reaped and,
	// after trouble, the counts rebuilt (default 1 s). The lease lasts
	// three beats.
	Beat time.Duration
	// Log receives the fallback's start and end (nil: none).
	Log *slog.Logger
	// Replicas is the number of replicas taken as live until Redis has
	// answered a beat (default 1): a replica started while Redis is away
	// admits against reservation / Replicas. Then the live count of the
	// leases is used.
	Replicas int64
}

// Counters is fairshare.Counters over Redis for one pool.
type Counters struct {
	rdb      redis.UniversalClient
	key      string // totals
	mine     string // this replica's counts
	live     string // leases
	replica  string
	halfLife time.Duration
	timeout  time.Duration
	beat     time.Duration
	log      *slog.Logger
	pool     string

	mu    sync.Mutex // Bind, usage cache, pending charges
	slots map[string]fairshare.Slot
	keys  atomic.Pointer[[]string] // by slot: the path key

	// gate orders admissions and releases (shared) against a rebuild
	// (exclusive), which must see this replica's counts and Redis's agree.
	gate sync.RWMutex
	// tally is what this replica counted in Redis and has in flight.
	tally tallies
	// local counts what was admitted while Redis was away, against the
	// replica's slice.
	local *fairshare.MemCounters

	down      atomic.Bool  // fall back: do not try Redis on the request path
	dirty     atomic.Bool  // rebuild at the next beat
	downSince atomic.Int64 // unix ns; 0 when up
	replicas  atomic.Int64 // live replicas last seen (≥ 1)

	// share is the live replicas and this one's rank last seen, for
	// Share; shareMu orders its replacements (Beat).
	share   atomic.Pointer[shareState]
	shareMu sync.Mutex
	joined  atomic.Int64 // when this replica's lease began (ms, Redis's clock); 0: unknown

	pending map[fairshare.Slot]usageAt // charged here, for the next beat (chargeLater)
	usage   map[fairshare.Slot]usageAt // last usage read from Redis

	lastErr atomic.Pointer[errAt]
	errors  atomic.Int64
	wake    chan struct{}

	capAgreed atomic.Bool // Agree has answered once (capacity.go)

	// room is what the last read of the live replicas' top counts saw,
	// roomAt when (unix ns), roomWant when Room last had borrowers (unix
	// ns); roomMu orders room's replacements; roomWake starts the reads
	// (room.go).
	room     atomic.Pointer[roomState]
	roomMu   sync.Mutex
	roomAt   atomic.Int64
	roomWant atomic.Int64
	roomWake chan struct{}

	// p, when not nil, carries the scripts of the pool's Admissions in
	// order (pipe.go): admissions share round trips and releases are not
	// waited for. A rebuild or a leave first waits for what it carries.
	// wq are then the places within reservations held here (within.go).
	p  *pipe
	wq *withinQuotas
	// requests Admissions admitted with no round trip, and with one
	admitsLocal, admitsRedis atomic.Int64
}

// usePipe makes the counters send their admissions and releases through
// p, and hold places within reservations.
func (c *Counters) usePipe(p *pipe) {
	c.p = p
	c.wq = newWithinQuotas(c)
}

type usageAt struct {
	u float64
	t time.Time
}

type errAt struct {
	err error
	at  time.Time
}

// tallies are per-slot in-flight and within counts, append-only like the
// slots.
type tallies struct {
	inflight, borrowing atomic.Int64
	cells               atomic.Pointer[[]*tally]
}

type tally struct{ inflight, within atomic.Int64 }

var _ fairshare.Counters = (*Counters)(nil)

// roomLocal marks, in Placement.Room, a request placed in this process
// while Redis was away (Room is only read inside Admit, and Place never
// sets every bit).
const roomLocal = ^uint64(0)

// New returns the counters of pool in rdb, whose usage decays with
// halfLife (≤ 0: fairshare.DefaultHalfLife). Run must run for the leases
// and the recovery from Redis trouble.
func New(rdb redis.UniversalClient, pool string, halfLife time.Duration, o Options) *Counters {
	if halfLife <= 0 {
		halfLife = fairshare.DefaultHalfLife
	}
	if o.Prefix == "" {
		o.Prefix = "llmflow:counters:"
	}
	if o.Timeout <= 0 {
		o.Timeout = config.DefaultRedisTimeout
	}
	if o.Beat <= 0 {
		o.Beat = time.Second
	}
	if o.Replica == "" {
		o.Replica = NewReplicaID()
	}
	key := o.Prefix + "{" + pool + "}"
	c := &Counters{rdb: rdb, key: key, mine: key + ":r:" + o.Replica, live: key + ":live", replica: o.Replica,
		halfLife: halfLife, timeout: o.Timeout, beat: o.Beat, log: o.Log, pool: pool,
		slots: map[string]fairshare.Slot{"": fairshare.PoolSlot}, local: fairshare.NewMemCounters(halfLife),
		pending: map[fairshare.Slot]usageAt{}, usage: map[fairshare.Slot]usageAt{}, wake: make(chan struct{}, 1)}
	keys := []string{""}
	c.keys.Store(&keys)
	cells := []*tally{new(tally)}
	c.tally.cells.Store(&cells)
	c.replicas.Store(max(o.Replicas, 1))
	// not settled: no part of a capacity before the first beat
	c.share.Store(&shareState{n: 1, changed: make(chan struct{})})
	c.room.Store(&roomState{me: -1, changed: make(chan struct{})})
	c.roomWake = make(chan struct{}, 1)
	c.dirty.Store(true) // register the lease and an empty part at the first beat
	return c
}

// NewReplicaID returns a random replica name.
func NewReplicaID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Bind implements fairshare.Counters: slots are this process's names for
// path keys; Redis only sees the keys.
func (c *Counters) Bind(key string) fairshare.Slot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.slots[key]; ok {
		return s
	}
	// Published local counters first, then the tally, then the keys:
	// readers that do not lock (a beat's rebuild) go as far as the keys
	// and the tally they load, and find every such slot in the others.
	keys := append(*c.keys.Load(), key)
	s := fairshare.Slot(len(keys) - 1)
	if ls := c.local.Bind(key); ls != s {
		panic(fmt.Sprintf("redisstate: local slot %d for %q, want %d", ls, key, s))
	}
	cells := append(*c.tally.cells.Load(), new(tally))
	c.tally.cells.Store(&cells)
	c.keys.Store(&keys)
	c.slots[key] = s
	return s
}

func (c *Counters) pathKey(s fairshare.Slot) string { return (*c.keys.Load())[s] }

// admitScript places and counts one request: ctrAdmitLua's ctr_admit
// without the ledger's reservation.
var admitScript = redis.NewScript(ctrAdmitLua + "return ctr_admit(KEYS, ARGV, nil)\n")

// ctrAdmitLua defines ctr_admit(KEYS, ARGV, ride), which checks the caps,
// runs ride (a function returning false to refuse; nil: none), then
// places and counts one request. KEYS: totals, this replica's hash.
// ARGV: n, then per account of the chain (organisation first): path key,
// reservation, 1 when it has a level of its own, cap on its requests in
// flight (−1: none). It returns {'ok', within, top, borrow, registered},
// {'capped', index of the account from 0}, or {'refused'} (ride said no),
// counting nothing in the last two. within is a string of '0' and '1'
// (one per account: chains may be deeper than Lua's 32-bit bit
// operations); registered is 0 when this replica's hash was missing
// (Redis lost it, or the replica was reaped): the replica then rebuilds.
//
// The placement is fairshare.Place, ported; TestPlaceScript compares the
// two on random chains.
const ctrAdmitLua = `
local function ctr_admit(KEYS, ARGV, ride)
local h, r = KEYS[1], KEYS[2]
local n = tonumber(ARGV[1])
local keys, res, lvl, w = {}, {}, {}, {}
for i = 1, n do
  keys[i] = ARGV[4*i - 2]
  res[i] = tonumber(ARGV[4*i - 1])
  lvl[i] = ARGV[4*i] == '1'
  local cap = tonumber(ARGV[4*i + 1])
  if cap >= 0 and tonumber(redis.call('HGET', h, 'i:' .. keys[i]) or '0') + 1 > cap then
    return {'capped', i - 1}
  end
  w[i] = tonumber(redis.call('HGET', h, 'w:' .. keys[i]) or '0')
end
if ride and not ride() then return {'refused'} end
local first, leaf = -1, -1
for i = 1, n do
  if lvl[i] then
    if first < 0 then first = i end
    leaf = i
  end
end
local within = {}
for i = 1, n do within[i] = '0' end
local top, borrow = 0, -1
local function room(i) return w[i] < res[i] end
if leaf > 0 then
  if room(leaf) then
    for i = first, leaf do if lvl[i] then within[i] = '1' end end
    top = 1
  elseif first ~= leaf and room(first) then
    top = 1
    within[first] = '1'
    local j = first + 1
    while not lvl[j] do j = j + 1 end
    while j ~= leaf and room(j) do
      within[j] = '1'
      j = j + 1
      while not lvl[j] do j = j + 1 end
    end
    borrow = j - 1
  end
end
local registered = redis.call('HEXISTS', r, 'live')
redis.call('HINCRBY', h, 'inflight', 1)
redis.call('HINCRBY', r, 'inflight', 1)
if top == 0 then
  redis.call('HINCRBY', h, 'borrowing', 1)
  redis.call('HINCRBY', r, 'borrowing', 1)
end
for i = 1, n do
  redis.call('HINCRBY', h, 'i:' .. keys[i], 1)
  redis.call('HINCRBY', r, 'i:' .. keys[i], 1)
  if within[i] == '1' then
    redis.call('HINCRBY', h, 'w:' .. keys[i], 1)
    redis.call('HINCRBY', r, 'w:' .. keys[i], 1)
  end
end
return {'ok', table.concat(within), top, borrow, registered}
end
`

// chargeLua decays the usage of path key k in hash h to now and adds g
// (over hashLua's functions, directLua's or cachedLua's).
const chargeLua = `
local function charge(h, k, g, now, hl)
  local u = tonumber(hget(h, 'u:' .. k) or '')
  local t = tonumber(hget(h, 't:' .. k) or '')
  if u == nil or t == nil then
    u, t = g, now
  elseif now > t then
    u = u * math.exp(-math.log(2) * (now - t) / hl) + g
    t = now
  else
    u = u + g * math.exp(-math.log(2) * (t - now) / hl)
  end
  hset(h, 'u:' .. k, string.format('%.17g', u), 't:' .. k, string.format('%.17g', t))
end
`

// releaseScript uncounts one request and charges its usage: ctr_release
// of ctrReleaseLua (which needs chargeLua before it). A count
// never goes below zero. It returns 0, uncounting nothing, when this
// replica's part is missing (see admitScript). KEYS: totals, this replica's hash. ARGV: n,
// within ('0'/'1' per account), top (1/0), GPU-hours (≤ 0: none), now
// (unix seconds), half-life (seconds), then the n path keys. The usage of
// each account and of the pool ("") is decayed to now and charged, as
// MemCounters does.
var releaseScript = redis.NewScript(directLua + chargeLua + ctrReleaseLua + "return ctr_release(KEYS, ARGV)\n")

const ctrReleaseLua = `
local function ctr_release(KEYS, ARGV)
local h, r = KEYS[1], KEYS[2]
local n = tonumber(ARGV[1])
local within = ARGV[2]
local top = ARGV[3] == '1'
local g = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local hl = tonumber(ARGV[6])
local function dec(f)
  if hincr(h, f, -1) < 0 then hset(h, f, 0) end
  if hincr(r, f, -1) < 0 then hset(r, f, 0) end
end
-- This replica's part is gone (Redis lost it, or the replica was reaped
-- and its counts taken off the totals): uncounting here would take off
-- other replicas' counts. The rebuild this asks for makes the part right.
local registered = hexists(r, 'live') and 1 or 0
if registered == 1 then
  dec('inflight')
  if not top then dec('borrowing') end
end
for i = 1, n do
  local k = ARGV[6 + i]
  if registered == 1 then
    dec('i:' .. k)
    if string.sub(within, i, i) == '1' then dec('w:' .. k) end
  end
  if g > 0 then charge(h, k, g, now, hl) end
end
if g > 0 then charge(h, '', g, now, hl) end
return registered
end
`

// beatScript renews this replica's lease, reaps the replicas whose lease
// expired (their counts leave the totals) and, when asked, rebuilds this
// replica's part. KEYS: totals, this replica's hash, leases. ARGV:
// replica, lease (ms), rebuild (1/0), half-life (s), joined (ms, when
// this replica's lease began as a previous beat said; 0: unknown), m, then
// m pairs
// field, count (the replica's own counts), then usage charges as triples
// path key, GPU-hours, unix seconds. It returns {live replicas,
// registered, rank, settled, joined}: rank is this replica's place among
// the live ones in byte order of their names (0-based), joined when its
// lease began (now when it had none, or an expired one: it was reaped, or
// Redis lost it), settled 1 when every other live replica has beaten
// since then (a lease's expiry is its last beat plus the lease, alike for
// all replicas of a pool), so all of them count this one.
var beatScript = redis.NewScript(directLua + chargeLua + `
local h, r, l = KEYS[1], KEYS[2], KEYS[3]
local rid, lease, rebuild, hl = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local joined = tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prev = tonumber(redis.call('ZSCORE', l, rid) or '')
if prev == nil or prev <= now or joined <= 0 then joined = now end
local function sub(f, d)
  if d == 0 then return end
  if redis.call('HINCRBY', h, f, d) < 0 then redis.call('HSET', h, f, 0) end
end
local dead = redis.call('ZRANGEBYSCORE', l, '-inf', now)
for _, id in ipairs(dead) do
  if id ~= rid then
    local rk = string.sub(r, 1, #r - #rid) .. id
    local f = redis.call('HGETALL', rk)
    for i = 1, #f, 2 do
      if f[i] ~= 'live' then sub(f[i], -tonumber(f[i + 1])) end
    end
    redis.call('DEL', rk)
    redis.call('ZREM', l, id)
  end
end
redis.call('ZADD', l, now + lease, rid)
if rebuild then
  local old = {}
  local f = redis.call('HGETALL', r)
  for i = 1, #f, 2 do
    if f[i] ~= 'live' then old[f[i]] = tonumber(f[i + 1]) end
  end
  redis.call('DEL', r)
  local m = tonumber(ARGV[6])
  local new = {'live', 1}
  for i = 0, m - 1 do
    local field, v = ARGV[7 + 2*i], tonumber(ARGV[8 + 2*i])
    sub(field, v - (old[field] or 0))
    old[field] = nil
    new[#new + 1] = field
    new[#new + 1] = v
  end
  for field, v in pairs(old) do sub(field, -v) end
  redis.call('HSET', r, unpack(new))
end
-- the usage charged since the last beat (requests settled from quotas,
-- or while Redis was away)
for i = 7 + 2 * tonumber(ARGV[6]), #ARGV - 2, 3 do
  charge(h, ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), hl)
end
-- byte order, not Lua's '<' (strcoll: locale-dependent)
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local live = redis.call('ZRANGEBYSCORE', l, '(' .. now, '+inf', 'WITHSCORES')
local rank, settled = 0, 1
for i = 1, #live, 2 do
  local id = live[i]
  if id ~= rid then
    if before(id, rid) then rank = rank + 1 end
    if tonumber(live[i + 1]) - lease <= joined then settled = 0 end
  end
end
return {#live / 2, redis.call('HEXISTS', r, 'live'), rank, settled, joined}
`)

func (c *Counters) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

// fail records a Redis failure and falls back to this process's slice
// until a beat rebuilds.
func (c *Counters) fail(err error) {
	c.errors.Add(1)
	c.lastErr.Store(&errAt{err: err, at: time.Now()})
	c.dirty.Store(true)
	if !c.down.Swap(true) {
		c.downSince.Store(time.Now().UnixNano())
		if c.log != nil {
			c.log.Warn("redis unreachable: admitting against this replica's slice of each reservation until it answers",
				"pool", c.pool, "replicas", c.replicas.Load(), "err", err)
		}
	}
	c.poke()
}

// readFailed notes a failed read that only informs: a placement's
// preview for a queued request's priority (Peek), an account's usage for
// the ranks (Usage). The answer comes from what this replica knows, and
// admissions go on in Redis: one read slower than the timeout on a loaded
// machine is not an outage, and falling back to this replica's slices of
// the reservations for a beat because of it cost fair share across
// replicas (issue 25's runs near 0.01). A call that admits or releases,
// and the beat, find a real outage.
func (c *Counters) readFailed(err error) {
	c.errors.Add(1)
	c.lastErr.Store(&errAt{err: err, at: time.Now()})
}

func (c *Counters) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// LastError returns when the last Redis failure happened, how many calls
// failed so far, and the last failure (nil when there was none).
func (c *Counters) LastError() (at time.Time, failures int64, err error) {
	if e := c.lastErr.Load(); e != nil {
		return e.at, c.errors.Load(), e.err
	}
	return time.Time{}, c.errors.Load(), nil
}

// Health is what /healthz says about the shared counters.
type Health struct {
	// Fallback is true while Redis is away: the replica admits against
	// its own slice of each reservation.
	Fallback bool
	// Since is when the fallback began.
	Since time.Time
	// Replicas is the number of live replicas last seen in Redis (the
	// divisor of the slice).
	Replicas int64
	// Err is the last Redis failure, when in fallback.
	Err string
}

// Health reports whether the counters fall back, and the live replicas.
func (c *Counters) Health() Health {
	h := Health{Fallback: c.down.Load(), Replicas: c.replicas.Load()}
	if h.Fallback {
		h.Since = time.Unix(0, c.downSince.Load())
		if e := c.lastErr.Load(); e != nil {
			h.Err = e.err.Error()
		}
	}
	return h
}

// slice is c reduced to this replica's slice: each reservation divided by
// the live replicas last seen, rounded down.
func (c *Counters) slice(ch *fairshare.Chain) *fairshare.Chain {
	n := c.replicas.Load()
	if n <= 1 {
		return ch
	}
	s := *ch
	s.Res = make([]int64, len(ch.Res))
	for i, r := range ch.Res {
		s.Res[i] = r / n
	}
	return &s
}

// Admit implements fairshare.Counters in one round trip. It does not
// check the chain's caps: Admissions.Admit does, in the same script.
func (c *Counters) Admit(ch *fairshare.Chain) fairshare.Placement {
	c.gate.RLock()
	defer c.gate.RUnlock()
	p, _ := c.admit(ch, false)
	return p
}

// admit places and counts one request, checking the caps when caps is
// true: in Redis, else (or when Redis fails) in this process against the
// replica's slice. c.gate is held (shared).
func (c *Counters) admit(ch *fairshare.Chain, caps bool) (p fairshare.Placement, capped int) {
	if c.down.Load() {
		return c.admitLocal(ch, caps)
	}
	keys, args := c.admitCall(ch, caps)
	v, err := c.run(admitScript, keys, args)
	if err == nil {
		var ok bool
		if p, capped, ok = c.admitted(v, ch); ok {
			return p, capped
		}
		err = fmt.Errorf("admit script answered %v", v)
	}
	// The script may have run: the rebuild takes it off again.
	c.fail(fmt.Errorf("redis admit: %w", err))
	return c.admitLocal(ch, caps)
}

// run runs s and returns its answer: through the pipe when the counters
// have one, else in a call of its own.
func (c *Counters) run(s *redis.Script, keys []string, args []any) ([]any, error) {
	if c.p != nil {
		return c.p.do(s, keys, args, c.timeout).Slice()
	}
	ctx, cancel := c.ctx()
	defer cancel()
	return s.Run(ctx, c.rdb, keys, args...).Slice()
}

// admitCall returns ctr_admit's keys and arguments for ch (with its caps
// when caps is true, else none).
func (c *Counters) admitCall(ch *fairshare.Chain, caps bool) (keys []string, args []any) {
	args = make([]any, 0, 1+4*ch.N)
	args = append(args, ch.N)
	for i := 0; i < ch.N; i++ {
		lvl := 0
		if ch.Level[i] {
			lvl = 1
		}
		args = append(args, c.pathKey(ch.Slots[i]), ch.Res[i], lvl, capOf(ch, i, caps))
	}
	return []string{c.key, c.mine}, args
}

// capOf is account i's cap in ch, −1 for none (or when caps is false).
func capOf(ch *fairshare.Chain, i int, caps bool) int64 {
	if !caps || !ch.Capped || i >= len(ch.Caps) {
		return -1
	}
	return ch.Caps[i]
}

// admitted reads ctr_admit's answer v: the placement counted (capped −1),
// or capped ≥ 0; ok false when v is not an answer of ctr_admit, or is
// {'refused'} (the ledger's answer says why: Admissions).
func (c *Counters) admitted(v []any, ch *fairshare.Chain) (p fairshare.Placement, capped int, ok bool) {
	what, _ := v[0].(string)
	switch {
	case what == "capped" && len(v) == 2:
		i, _ := v[1].(int64)
		if i < 0 || int(i) >= ch.N {
			return p, -1, false
		}
		return p, int(i), true
	case what != "ok" || len(v) != 5:
		return p, -1, false
	}
	mask, _ := v[1].(string)
	top, _ := v[2].(int64)
	borrow, _ := v[3].(int64)
	if reg, _ := v[4].(int64); reg == 0 {
		c.dirty.Store(true)
		c.poke()
	}
	p = fairshare.Placement{Top: top == 1, Borrow: int8(borrow)}
	for i := 0; i < len(mask) && i < ch.N; i++ {
		if mask[i] == '1' {
			p.Within |= 1 << i
		}
	}
	c.count(ch, p, 1)
	return p, -1, true
}

// admitLocal admits in this process, against the replica's slice of each
// reservation and, when caps is true, of each cap. Counted in first, as
// fairshare.Pool does, so that racing admissions cannot both pass.
func (c *Counters) admitLocal(ch *fairshare.Chain, caps bool) (fairshare.Placement, int) {
	p := c.local.Admit(c.slice(ch))
	if caps && ch.Capped {
		n := c.replicas.Load()
		for i := 0; i < ch.N; i++ {
			limit := capOf(ch, i, true)
			if limit < 0 {
				continue
			}
			if in, _ := c.localCounts(ch.Slots[i]); in > limit/max(n, 1) {
				c.local.Release(ch, p, 0, time.Time{})
				return fairshare.Placement{}, i
			}
		}
	}
	p.Room = roomLocal
	return p, -1
}

// count adds d to this replica's tally of p on ch.
func (c *Counters) count(ch *fairshare.Chain, p fairshare.Placement, d int64) {
	cells := *c.tally.cells.Load()
	c.tally.inflight.Add(d)
	if !p.Top {
		c.tally.borrowing.Add(d)
	}
	for i := 0; i < ch.N; i++ {
		x := cells[ch.Slots[i]]
		x.inflight.Add(d)
		if p.Within&(1<<i) != 0 {
			x.within.Add(d)
		}
	}
}

// Peek implements fairshare.Counters (one read; no count changes).
func (c *Counters) Peek(ch *fairshare.Chain) fairshare.Placement {
	var out [1]fairshare.Placement
	c.PeekAll([]*fairshare.Chain{ch}, out[:])
	return out[0]
}

// PeekAll implements fairshare.Counters: one HMGET of the within counts of
// every account of cs (each once), so that a queue's dispatch, which
// re-places all its waiting leaves under its lock, waits for one round
// trip, not one per leaf. While Redis is away, or when the read fails, each
// chain is placed on this replica's slice.
func (c *Counters) PeekAll(cs []*fairshare.Chain, out []fairshare.Placement) {
	if !c.down.Load() {
		err := c.peekAll(cs, out)
		if err == nil {
			return
		}
		c.readFailed(fmt.Errorf("redis peek: %w", err))
	}
	for i, ch := range cs {
		out[i] = c.local.Peek(c.slice(ch))
	}
}

func (c *Counters) peekAll(cs []*fairshare.Chain, out []fairshare.Placement) error {
	at := map[fairshare.Slot]int{} // a slot's field in the read
	var fields []string
	for _, ch := range cs {
		for _, s := range ch.Slots[:ch.N] {
			if _, ok := at[s]; !ok {
				at[s] = len(fields)
				fields = append(fields, "w:"+c.pathKey(s))
			}
		}
	}
	var vals []any
	if len(fields) > 0 {
		ctx, cancel := c.ctx()
		defer cancel()
		var err error
		if vals, err = c.rdb.HMGet(ctx, c.key, fields...).Result(); err != nil {
			return err
		}
		if len(vals) != len(fields) {
			return fmt.Errorf("HMGET returned %d values for %d fields", len(vals), len(fields))
		}
	}
	var buf [16]int64
	for i, ch := range cs {
		w := buf[:0]
		for _, s := range ch.Slots[:ch.N] {
			w = append(w, toInt(vals[at[s]]))
		}
		out[i] = fairshare.Place(ch, w)
	}
	return nil
}

// Release implements fairshare.Counters in one round trip.
func (c *Counters) Release(ch *fairshare.Chain, p fairshare.Placement, gpuHours float64, now time.Time) {
	c.gate.RLock()
	defer c.gate.RUnlock()
	c.release(ch, p, gpuHours, now)
}

// release uncounts one request and charges its usage. c.gate is held
// (shared).
func (c *Counters) release(ch *fairshare.Chain, p fairshare.Placement, gpuHours float64, now time.Time) {
	gpuHours = finiteCost(gpuHours)
	if c.releaseLocal(ch, p, gpuHours, now) {
		return
	}
	keys, args := c.releaseCall(ch, p, gpuHours, now)
	ctx, cancel := c.ctx()
	defer cancel()
	reg, err := releaseScript.Run(ctx, c.rdb, keys, args...).Int64()
	c.released(reg, err, ch, gpuHours, now)
}

func finiteCost(gpuHours float64) float64 {
	if !(gpuHours > 0) || math.IsInf(gpuHours, 0) {
		return 0
	}
	return gpuHours
}

// releaseLater is release through the pipe (waited for: in a pipeline
// with the other replicas' calls). c.gate is held (shared).
func (c *Counters) releaseLater(ch *fairshare.Chain, p fairshare.Placement, gpuHours float64, now time.Time) {
	if c.releaseLocal(ch, p, gpuHours, now) {
		return
	}
	keys, args := c.releaseCall(ch, p, gpuHours, now)
	reg, err := c.p.do(releaseScript, keys, args, c.timeout).Int64()
	c.released(reg, err, ch, gpuHours, now)
}

// releaseLocal uncounts a request from this replica's tally, and reports
// whether that is all there is to do now: it was admitted in this process,
// or Redis is away (the rebuild uncounts it there; the charge waits).
func (c *Counters) releaseLocal(ch *fairshare.Chain, p fairshare.Placement, gpuHours float64, now time.Time) bool {
	if p.Room == roomLocal {
		p.Room = 0
		c.local.Release(ch, p, 0, now) // Release reads no reservation: the slice is not needed
		// Redis may have counted it at a rebuild: the next one takes it off.
		c.dirty.Store(true)
		c.chargeLater(ch, gpuHours, now)
		return true
	}
	c.count(ch, p, -1)
	if c.down.Load() {
		c.chargeLater(ch, gpuHours, now)
		return true // uncounted at the rebuild
	}
	return false
}

// releaseCall returns ctr_release's keys and arguments.
func (c *Counters) releaseCall(ch *fairshare.Chain, p fairshare.Placement, gpuHours float64, now time.Time) (keys []string, args []any) {
	within := make([]byte, ch.N)
	for i := range within {
		within[i] = '0'
		if p.Within&(1<<i) != 0 {
			within[i] = '1'
		}
	}
	args = make([]any, 0, 6+ch.N)
	args = append(args, ch.N, string(within), b01(p.Top), gpuHours,
		float64(now.UnixNano())/1e9, c.halfLife.Seconds())
	for i := 0; i < ch.N; i++ {
		args = append(args, c.pathKey(ch.Slots[i]))
	}
	return []string{c.key, c.mine}, args
}

// released handles ctr_release's answer (registered, or the call's err).
func (c *Counters) released(reg int64, err error, ch *fairshare.Chain, gpuHours float64, now time.Time) {
	if err != nil {
		// Whether it ran or not, the rebuild makes the counts right. The
		// charge is kept for the rebuild: if the script ran and only its
		// answer was lost, the usage is charged twice (a loss would be
		// worse for fairness than that rare excess).
		c.fail(fmt.Errorf("redis release: %w", err))
		c.chargeLater(ch, gpuHours, now)
		return
	}
	if reg == 0 {
		c.dirty.Store(true)
		c.poke()
	}
}

// chargeLater keeps a charge for the next beat: made while Redis is away,
// or at the end of a request placed from a quota (its end script then
// charges nothing: a second's delay is nothing to usage that decays over
// days, and the beat charges the pool's accounts once for all of them).
func (c *Counters) chargeLater(ch *fairshare.Chain, g float64, now time.Time) {
	if g <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < ch.N; i++ {
		addUsage(c.pending, ch.Slots[i], usageAt{g, now}, c.halfLife)
	}
	addUsage(c.pending, fairshare.PoolSlot, usageAt{g, now}, c.halfLife)
}

// addUsage adds x to m[s], both decayed to the later of their times.
func addUsage(m map[fairshare.Slot]usageAt, s fairshare.Slot, x usageAt, hl time.Duration) {
	y, ok := m[s]
	switch {
	case !ok:
	case x.t.After(y.t):
		x.u += y.u * fairshare.DecayFactor(x.t.Sub(y.t), hl)
	default:
		x = usageAt{y.u + x.u*fairshare.DecayFactor(y.t.Sub(x.t), hl), y.t}
	}
	m[s] = x
}

// Run renews the lease, reaps dead replicas and rebuilds after trouble,
// every beat, until ctx ends; then it gives up the lease and this
// replica's part (a clean stop leaves nothing for the others to reap).
func (c *Counters) Run(ctx context.Context) {
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		c.pollRoom(ctx)
	}()
	defer func() { <-polled }()
	t := time.NewTicker(c.beat)
	defer t.Stop()
	c.Beat()
	for {
		select {
		case <-ctx.Done():
			c.leave()
			return
		case <-t.C:
		case <-c.wake:
			// a failure or a missing registration: rebuild soon, not in a
			// tight loop against a Redis that is away
			select {
			case <-ctx.Done():
				c.leave()
				return
			case <-time.After(c.beat / 10):
			}
		}
		c.Beat()
	}
}

// Beat renews the lease and reaps dead replicas; when the counts may
// disagree with Redis (after a failure, or Redis lost this replica's
// part) it rebuilds them from what is in flight here, and leaves the
// fallback when that succeeds.
func (c *Counters) Beat() {
	rebuild := c.dirty.Load()
	if rebuild && c.down.Load() {
		// Probe first, without stopping admissions (which go on against
		// the slice) for a Redis that does not answer.
		ctx, cancel := c.ctx()
		err := c.rdb.Ping(ctx).Err()
		cancel()
		if err != nil {
			c.fail(fmt.Errorf("redis ping: %w", err))
			c.shareUnseen()
			return
		}
	}
	if rebuild {
		c.gate.Lock()
		defer c.gate.Unlock()
		c.dirty.Store(false)
		if c.p != nil {
			// the releases handed over before (counted off the tally
			// already) reach Redis before the part is replaced, which
			// does not count the places the quotas hold
			c.p.barrier()
			c.wq.drop()
		}
	}
	args := []any{c.replica, (3 * c.beat).Milliseconds(), b01(rebuild), c.halfLife.Seconds(), c.joined.Load()}
	var charged map[fairshare.Slot]usageAt
	if rebuild {
		args = c.rebuildArgs(args)
	} else {
		args = append(args, 0)
	}
	args, charged = c.chargeArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.timeout)
	defer cancel()
	v, err := beatScript.Run(ctx, c.rdb, []string{c.key, c.mine, c.live}, args...).Int64Slice()
	if err == nil && len(v) != 5 {
		err = fmt.Errorf("beat script returned %d values", len(v))
	}
	if err != nil {
		c.fail(fmt.Errorf("redis beat: %w", err))
		c.shareUnseen()
		c.mu.Lock()
		for sl, x := range charged { // kept for the next rebuild
			addUsage(c.pending, sl, x, c.halfLife)
		}
		c.mu.Unlock()
		return
	}
	c.replicas.Store(max(v[0], 1))
	c.joined.Store(v[4])
	if c.wq != nil && !rebuild {
		c.wq.idle()
	}
	c.setShare(shareState{n: max(int(v[0]), 1), rank: int(v[2]), settled: v[3] == 1})
	if v[1] == 0 {
		c.dirty.Store(true)
		c.poke()
		return
	}
	if rebuild && c.down.Load() {
		c.down.Store(false)
		if c.log != nil {
			c.log.Info("redis answers again: this replica's counts rebuilt from what it has in flight",
				"pool", c.pool, "replicas", v[0], "fallback_for", time.Since(time.Unix(0, c.downSince.Load())).Round(time.Millisecond))
		}
		c.downSince.Store(0)
	}
}

// rebuildArgs appends this replica's counts (Redis's tally plus what was
// admitted alone).
func (c *Counters) rebuildArgs(args []any) []any {
	keys := *c.keys.Load()
	cells := *c.tally.cells.Load()
	var fields []any
	add := func(f string, v int64) {
		if v != 0 {
			fields = append(fields, f, v)
		}
	}
	li, lb := c.local.PoolCounts()
	add("inflight", c.tally.inflight.Load()+li)
	add("borrowing", c.tally.borrowing.Load()+lb)
	for s := 1; s < len(keys) && s < len(cells); s++ {
		i, w := c.local.Counts(fairshare.Slot(s))
		add("i:"+keys[s], cells[s].inflight.Load()+i)
		add("w:"+keys[s], cells[s].within.Load()+w)
	}
	args = append(args, len(fields)/2)
	return append(args, fields...)
}

// chargeArgs appends the pending charges, which it takes.
func (c *Counters) chargeArgs(args []any) ([]any, map[fairshare.Slot]usageAt) {
	keys := *c.keys.Load()
	c.mu.Lock()
	var charged map[fairshare.Slot]usageAt
	if len(c.pending) > 0 {
		// taken whole: an empty map left in place is not read here, since
		// releases add to it without waiting for the beat
		charged, c.pending = c.pending, map[fairshare.Slot]usageAt{}
	}
	c.mu.Unlock()
	for s, x := range charged {
		args = append(args, keys[s], x.u, float64(x.t.UnixNano())/1e9)
	}
	return args, charged
}

// leave gives up the lease and this replica's part (taken off the
// totals), for a clean stop.
func (c *Counters) leave() {
	c.gate.Lock()
	defer c.gate.Unlock()
	// From now on admissions and releases stay in this process: the part
	// given up is no longer this replica's to change.
	c.down.Store(true)
	if c.p != nil {
		c.p.barrier()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.timeout)
	defer cancel()
	if err := leaveScript.Run(ctx, c.rdb, []string{c.key, c.mine, c.live}, c.replica).Err(); err != nil {
		c.fail(fmt.Errorf("redis leave: %w", err))
	}
}

// leaveScript takes this replica's part off the totals and gives up its
// lease. A field at 0 (a count back to zero) is skipped: its negation is
// -0, which HINCRBY refuses as not an integer, failing the whole leave.
var leaveScript = redis.NewScript(`
local h, r, l = KEYS[1], KEYS[2], KEYS[3]
local f = redis.call('HGETALL', r)
for i = 1, #f, 2 do
  local v = tonumber(f[i + 1])
  if f[i] ~= 'live' and v ~= 0 then
    if redis.call('HINCRBY', h, f[i], -v) < 0 then redis.call('HSET', h, f[i], 0) end
  end
end
redis.call('DEL', r)
redis.call('ZREM', l, ARGV[1])
return 1
`)

func b01(b bool) int {
	if b {
		return 1
	}
	return 0
}

func toInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func toFloat(v any) (float64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// Counts implements fairshare.Counters: the totals of every replica (in
// fallback, this replica's own: what it counted before and admits alone).
func (c *Counters) Counts(s fairshare.Slot) (inflight, within int64) {
	if c.down.Load() {
		return c.localCounts(s)
	}
	k := c.pathKey(s)
	ctx, cancel := c.ctx()
	defer cancel()
	vals, err := c.rdb.HMGet(ctx, c.key, "i:"+k, "w:"+k).Result()
	if err != nil {
		c.fail(fmt.Errorf("redis counts: %w", err))
		return c.Counts(s)
	}
	return toInt(vals[0]), toInt(vals[1])
}

// localCounts is what this replica has in flight at s: what it counted
// in Redis and what it admitted alone.
func (c *Counters) localCounts(s fairshare.Slot) (inflight, within int64) {
	cell := (*c.tally.cells.Load())[s]
	i, w := c.local.Counts(s)
	return i + cell.inflight.Load(), w + cell.within.Load()
}

// PoolCounts implements fairshare.Counters.
func (c *Counters) PoolCounts() (inflight, borrowing int64) {
	if c.down.Load() {
		i, b := c.local.PoolCounts()
		return i + c.tally.inflight.Load(), b + c.tally.borrowing.Load()
	}
	ctx, cancel := c.ctx()
	defer cancel()
	vals, err := c.rdb.HMGet(ctx, c.key, "inflight", "borrowing").Result()
	if err != nil {
		c.fail(fmt.Errorf("redis pool counts: %w", err))
		return c.PoolCounts()
	}
	return toInt(vals[0]), toInt(vals[1])
}

// Usage implements fairshare.Counters: the stored usage decayed to now
// (nothing written). While Redis is away it is the last value read plus
// what was charged since.
func (c *Counters) Usage(s fairshare.Slot, now time.Time) float64 {
	var u float64
	if !c.down.Load() {
		k := c.pathKey(s)
		ctx, cancel := c.ctx()
		vals, err := c.rdb.HMGet(ctx, c.key, "u:"+k, "t:"+k).Result()
		cancel()
		if err == nil {
			x, ok1 := toFloat(vals[0])
			t, ok2 := toFloat(vals[1])
			at := time.Unix(0, int64(t*1e9))
			if !ok1 || !ok2 {
				x, at = 0, now
			}
			c.mu.Lock()
			c.usage[s] = usageAt{x, at}
			p, ok := c.pending[s]
			c.mu.Unlock()
			if ok {
				x += decayTo(p, at, c.halfLife)
			}
			return decayTo(usageAt{x, at}, now, c.halfLife)
		}
		c.readFailed(fmt.Errorf("redis usage: %w", err))
	}
	c.mu.Lock()
	last, ok := c.usage[s]
	p, okp := c.pending[s]
	c.mu.Unlock()
	if ok {
		u += decayTo(last, now, c.halfLife)
	}
	if okp {
		u += decayTo(p, now, c.halfLife)
	}
	return u
}

func decayTo(x usageAt, now time.Time, hl time.Duration) float64 {
	if now.After(x.t) {
		return x.u * fairshare.DecayFactor(now.Sub(x.t), hl)
	}
	return x.u
}

// SetUsage implements fairshare.Counters.
func (c *Counters) SetUsage(s fairshare.Slot, gpuHours float64, now time.Time) {
	k := c.pathKey(s)
	c.mu.Lock()
	c.usage[s] = usageAt{gpuHours, now}
	c.mu.Unlock()
	ctx, cancel := c.ctx()
	defer cancel()
	if err := c.rdb.HSet(ctx, c.key, "u:"+k, strconv.FormatFloat(gpuHours, 'g', 17, 64),
		"t:"+k, strconv.FormatFloat(float64(now.UnixNano())/1e9, 'g', 17, 64)).Err(); err != nil {
		c.fail(fmt.Errorf("redis set usage: %w", err))
	}
}

// HoldsUsage reports whether Redis holds the pool's usage (another
// replica, or an earlier run, charged or restored it).
func (c *Counters) HoldsUsage(ctx context.Context) bool {
	n, err := c.rdb.HExists(ctx, c.key, "u:").Result()
	if err != nil {
		c.fail(fmt.Errorf("redis usage check: %w", err))
	}
	return n
}

// HalfLife implements fairshare.Counters.
func (c *Counters) HalfLife() time.Duration { return c.halfLife }
