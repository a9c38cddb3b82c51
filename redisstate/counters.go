// Package redisstate keeps the fair-share counters of a pool in Redis, so
// that several gateway replicas admit against one set of counts: the
// reservation and borrowing invariants hold across replicas, not per
// replica.
//
// Counters implements fairshare.Counters. Each admission is one Redis
// round trip (a Lua script that reads the within counts, applies
// fairshare.Place and counts the request, atomically), each release one
// more (a script that uncounts it and charges the usage, decayed in
// Redis). Everything of a pool lives in one hash, "<prefix>{<pool>}", so a
// script touches one key (one slot in a Redis Cluster).
//
// Redis trouble: a call that fails (or takes longer than Options.Timeout)
// admits the request uncounted: placed nowhere within, borrowing (the
// lowest priority band), and marked so that its release does not uncount
// it. LastError reports the last failure. This keeps serving safe for the
// engines (a priority, never a refusal) while Redis is away; falling back
// to a per-replica slice of the capacity and rebuilding the counts from
// what is really in flight (leases per replica) is not done yet.
package redisstate

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/fairshare"
)

// Options configure Counters.
type Options struct {
	// Prefix starts every key (default "llmflow:counters:").
	Prefix string
	// Timeout bounds each Redis call made on a request's path
	// (default 250 ms).
	Timeout time.Duration
}

// Counters is fairshare.Counters over Redis for one pool.
type Counters struct {
	rdb      redis.UniversalClient
	key      string
	halfLife time.Duration
	timeout  time.Duration

	mu    sync.Mutex
	slots map[string]fairshare.Slot
	keys  atomic.Pointer[[]string] // by slot: the path key

	lastErr atomic.Pointer[errAt]
	errors  atomic.Int64
}

type errAt struct {
	err error
	at  time.Time
}

var _ fairshare.Counters = (*Counters)(nil)

// uncounted marks a Placement that Redis never counted (Admit failed):
// not Top, so fairshare.Pool never reads Borrow.
const uncounted int8 = -2

// New returns the counters of pool in rdb, whose usage decays with
// halfLife (≤ 0: fairshare.DefaultHalfLife).
func New(rdb redis.UniversalClient, pool string, halfLife time.Duration, o Options) *Counters {
	if halfLife <= 0 {
		halfLife = fairshare.DefaultHalfLife
	}
	if o.Prefix == "" {
		o.Prefix = "llmflow:counters:"
	}
	if o.Timeout <= 0 {
		o.Timeout = 250 * time.Millisecond
	}
	c := &Counters{rdb: rdb, key: o.Prefix + "{" + pool + "}", halfLife: halfLife, timeout: o.Timeout,
		slots: map[string]fairshare.Slot{"": fairshare.PoolSlot}}
	keys := []string{""}
	c.keys.Store(&keys)
	return c
}

// Bind implements fairshare.Counters: slots are this process's names for
// path keys; Redis only sees the keys.
func (c *Counters) Bind(key string) fairshare.Slot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.slots[key]; ok {
		return s
	}
	keys := append(*c.keys.Load(), key)
	s := fairshare.Slot(len(keys) - 1)
	c.slots[key] = s
	c.keys.Store(&keys)
	return s
}

func (c *Counters) pathKey(s fairshare.Slot) string { return (*c.keys.Load())[s] }

// admitScript places and counts one request. ARGV: n, then per account
// of the chain (organisation first): path key, reservation, 1 when it has
// a level of its own. It returns {within, room, top, borrow}: the
// fields of fairshare.Placement (Place ported; the Go test compares the
// two on every case).
var admitScript = redis.NewScript(`
local h = KEYS[1]
local n = tonumber(ARGV[1])
local keys, res, lvl, w = {}, {}, {}, {}
for i = 1, n do
  keys[i] = ARGV[3*i - 1]
  res[i] = tonumber(ARGV[3*i])
  lvl[i] = ARGV[3*i + 1] == '1'
  w[i] = tonumber(redis.call('HGET', h, 'w:' .. keys[i]) or '0')
end
local lv = {}
for i = 1, n do if lvl[i] then lv[#lv + 1] = i end end
local m = #lv
local within, room, top, borrow = 0, 0, 0, -1
local function bitof(i) return bit.lshift(1, i - 1) end
local function hasroom(i) return w[i] < res[i] end
if m > 0 then
  local leaf = lv[m]
  if hasroom(leaf) then
    for _, i in ipairs(lv) do within = bit.bor(within, bitof(i)) end
    room, top = bitof(leaf), 1
  elseif m >= 2 and hasroom(lv[1]) then
    top = 1
    within, room = bitof(lv[1]), bitof(lv[1])
    local j = 2
    while j < m and hasroom(lv[j]) do
      within = bit.bor(within, bitof(lv[j]))
      room = bit.bor(room, bitof(lv[j]))
      j = j + 1
    end
    borrow = lv[j] - 1
  end
end
redis.call('HINCRBY', h, 'inflight', 1)
if top == 0 then redis.call('HINCRBY', h, 'borrowing', 1) end
for i = 1, n do
  redis.call('HINCRBY', h, 'i:' .. keys[i], 1)
  if bit.band(within, bitof(i)) ~= 0 then redis.call('HINCRBY', h, 'w:' .. keys[i], 1) end
end
return {within, room, top, borrow}
`)

// releaseScript uncounts one request and charges its usage. A count
// never goes below zero: after Redis lost its data (a restart without
// persistence) the requests admitted before are released into fresh
// counts, which must not go negative and grant room that is not there. ARGV: n,
// within mask, top (1/0), counted (1/0), GPU-hours (≤ 0: none), now (unix
// seconds), half-life (seconds), then the n path keys. The usage of each
// account and of the pool ("") is decayed to now and charged, as
// MemCounters does.
var releaseScript = redis.NewScript(`
local h = KEYS[1]
local n = tonumber(ARGV[1])
local within = tonumber(ARGV[2])
local top = ARGV[3] == '1'
local counted = ARGV[4] == '1'
local g = tonumber(ARGV[5])
local now = tonumber(ARGV[6])
local hl = tonumber(ARGV[7])
local function charge(k)
  local u = tonumber(redis.call('HGET', h, 'u:' .. k) or '')
  local t = tonumber(redis.call('HGET', h, 't:' .. k) or '')
  if u == nil or t == nil then
    u, t = g, now
  elseif now > t then
    u = u * math.exp(-math.log(2) * (now - t) / hl) + g
    t = now
  else
    u = u + g * math.exp(-math.log(2) * (t - now) / hl)
  end
  redis.call('HSET', h, 'u:' .. k, string.format('%.17g', u), 't:' .. k, string.format('%.17g', t))
end
local function dec(f)
  if redis.call('HINCRBY', h, f, -1) < 0 then redis.call('HSET', h, f, 0) end
end
if counted then
  dec('inflight')
  if not top then dec('borrowing') end
end
for i = 1, n do
  local k = ARGV[7 + i]
  if counted then
    dec('i:' .. k)
    if bit.band(within, bit.lshift(1, i - 1)) ~= 0 then dec('w:' .. k) end
  end
  if g > 0 then charge(k) end
end
if g > 0 then charge('') end
return 1
`)

func (c *Counters) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

func (c *Counters) fail(err error) {
	c.errors.Add(1)
	c.lastErr.Store(&errAt{err: err, at: time.Now()})
}

// LastError returns when the last Redis failure happened, how many calls
// failed so far, and the last failure (nil when there was none).
func (c *Counters) LastError() (at time.Time, failures int64, err error) {
	if e := c.lastErr.Load(); e != nil {
		return e.at, c.errors.Load(), e.err
	}
	return time.Time{}, c.errors.Load(), nil
}

// Admit implements fairshare.Counters in one round trip.
func (c *Counters) Admit(ch *fairshare.Chain) fairshare.Placement {
	args := make([]any, 0, 1+3*ch.N)
	args = append(args, ch.N)
	for i := 0; i < ch.N; i++ {
		lvl := 0
		if ch.Level[i] {
			lvl = 1
		}
		args = append(args, c.pathKey(ch.Slots[i]), ch.Res[i], lvl)
	}
	ctx, cancel := c.ctx()
	defer cancel()
	v, err := admitScript.Run(ctx, c.rdb, []string{c.key}, args...).Int64Slice()
	if err != nil || len(v) != 4 {
		if err == nil {
			err = fmt.Errorf("admit script returned %d values", len(v))
		}
		c.fail(fmt.Errorf("redis admit: %w", err))
		return fairshare.Placement{Borrow: uncounted}
	}
	return fairshare.Placement{Within: uint8(v[0]), Room: uint8(v[1]), Top: v[2] == 1, Borrow: int8(v[3])}
}

// Peek implements fairshare.Counters (one read; no count changes). On a
// Redis failure it places on zero counts.
func (c *Counters) Peek(ch *fairshare.Chain) fairshare.Placement {
	var w [fairshare.MaxDepth]int64
	if ch.N > 0 {
		fields := make([]string, ch.N)
		for i := 0; i < ch.N; i++ {
			fields[i] = "w:" + c.pathKey(ch.Slots[i])
		}
		ctx, cancel := c.ctx()
		defer cancel()
		vals, err := c.rdb.HMGet(ctx, c.key, fields...).Result()
		if err != nil {
			c.fail(fmt.Errorf("redis peek: %w", err))
		} else {
			for i, v := range vals {
				w[i] = toInt(v)
			}
		}
	}
	return fairshare.Place(ch, &w)
}

// Release implements fairshare.Counters in one round trip.
func (c *Counters) Release(ch *fairshare.Chain, p fairshare.Placement, gpuHours float64, now time.Time) {
	counted := p.Borrow != uncounted
	if !(gpuHours > 0) || math.IsInf(gpuHours, 0) {
		gpuHours = 0
	}
	if !counted && gpuHours == 0 {
		return
	}
	args := make([]any, 0, 7+ch.N)
	args = append(args, ch.N, int(p.Within), b01(p.Top), b01(counted), gpuHours,
		float64(now.UnixNano())/1e9, c.halfLife.Seconds())
	for i := 0; i < ch.N; i++ {
		args = append(args, c.pathKey(ch.Slots[i]))
	}
	ctx, cancel := c.ctx()
	defer cancel()
	if err := releaseScript.Run(ctx, c.rdb, []string{c.key}, args...).Err(); err != nil {
		c.fail(fmt.Errorf("redis release: %w", err))
	}
}

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

// Counts implements fairshare.Counters.
func (c *Counters) Counts(s fairshare.Slot) (inflight, within int64) {
	k := c.pathKey(s)
	ctx, cancel := c.ctx()
	defer cancel()
	vals, err := c.rdb.HMGet(ctx, c.key, "i:"+k, "w:"+k).Result()
	if err != nil {
		c.fail(fmt.Errorf("redis counts: %w", err))
		return 0, 0
	}
	return toInt(vals[0]), toInt(vals[1])
}

// PoolCounts implements fairshare.Counters.
func (c *Counters) PoolCounts() (inflight, borrowing int64) {
	ctx, cancel := c.ctx()
	defer cancel()
	vals, err := c.rdb.HMGet(ctx, c.key, "inflight", "borrowing").Result()
	if err != nil {
		c.fail(fmt.Errorf("redis pool counts: %w", err))
		return 0, 0
	}
	return toInt(vals[0]), toInt(vals[1])
}

// Usage implements fairshare.Counters: the stored usage decayed to now
// (nothing written).
func (c *Counters) Usage(s fairshare.Slot, now time.Time) float64 {
	k := c.pathKey(s)
	ctx, cancel := c.ctx()
	defer cancel()
	vals, err := c.rdb.HMGet(ctx, c.key, "u:"+k, "t:"+k).Result()
	if err != nil {
		c.fail(fmt.Errorf("redis usage: %w", err))
		return 0
	}
	u, ok1 := toFloat(vals[0])
	t, ok2 := toFloat(vals[1])
	if !ok1 || !ok2 {
		return 0
	}
	at := time.Unix(0, int64(t*1e9))
	if now.After(at) {
		u *= fairshare.DecayFactor(now.Sub(at), c.halfLife)
	}
	return u
}

// SetUsage implements fairshare.Counters.
func (c *Counters) SetUsage(s fairshare.Slot, gpuHours float64, now time.Time) {
	k := c.pathKey(s)
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
