package redisstate

import (
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/fairshare"
)

// Within quotas: places within an account's reservation held by a
// replica (the fair share's side of quota.go).
//
// A replica that pipes its scripts takes, for the deepest account with a
// level of its own of a chain (its leaf), places within the leaf's
// reservation: counted in Redis as within at the leaf and at every
// account with a level above it, exactly as fairshare.Place counts a
// request placed where the leaf has room, in the totals and in the
// replica's part (so a replica's death or a rebuild takes them off). A
// request whose leaf has such a place here is placed within there, as
// Place would, with no round trip; its count in flight and its end go
// through the pipe, its end not waited for.
//
// Bounds. Within-share requests never exceed a reservation: the places
// held count as within. The error is the other way, a request placed as
// borrowing while another replica holds an unused place of its leaf, and
// it is kept small: a grant is at most 1/(4n) of the leaf's room left (n
// live replicas) and there is none while that room is below 8n (a
// reservation near full is placed in Redis, exactly, one request at a
// time); a place ending is kept as the quota's only while Redis still
// finds that room and the quota holds less than its last grant; a quota
// unused for a beat goes back. So at most a quarter of a room of at
// least 8n is held unused at a time, and none near a full reservation.
// Chains with a GrpTRES cap are always placed in Redis.
type withinQuotas struct {
	c   *Counters
	mu  sync.Mutex
	gen uint64
	by  map[fairshare.Slot]*withinQuota
}

type withinQuota struct {
	ch            *fairshare.Chain // the chain it was taken for
	leaf          int
	spare         int64
	grant         int64 // the last grant: a place ending is kept while spare < grant
	granted, used bool
	asking        bool
	quiet         time.Time // asks for nothing before: the last grant was none
	taken         int64     // requests placed since the last ask
}

// quotaWithin is the places a replica asks for at once.
const quotaWithin = 16

func newWithinQuotas(c *Counters) *withinQuotas {
	return &withinQuotas{c: c, gen: 1, by: map[fairshare.Slot]*withinQuota{}}
}

// leafOf is the index of ch's deepest account with a level, −1 if none.
func leafOf(ch *fairshare.Chain) int {
	for i := ch.N - 1; i >= 0; i-- {
		if ch.Level[i] {
			return i
		}
	}
	return -1
}

// sameLevels reports whether a and b have the same accounts with the same
// levels down to leaf.
func sameLevels(a, b *fairshare.Chain, leaf int) bool {
	if a == b {
		return true
	}
	if a.N <= leaf || b.N <= leaf {
		return false
	}
	for i := 0; i <= leaf; i++ {
		if a.Slots[i] != b.Slots[i] || a.Level[i] != b.Level[i] {
			return false
		}
	}
	return true
}

// leasedPlacement is Place's answer for ch when its leaf has room.
func leasedPlacement(ch *fairshare.Chain, leaf int) fairshare.Placement {
	p := fairshare.Placement{Top: true, Borrow: -1, Room: 1 << leaf}
	for i := 0; i <= leaf; i++ {
		if ch.Level[i] {
			p.Within |= 1 << i
		}
	}
	return p
}

// take places a request of ch within, from a place held here, and
// returns the quotas' generation; 0: none held.
func (w *withinQuotas) take(ch *fairshare.Chain) (fairshare.Placement, uint64) {
	leaf := leafOf(ch)
	if ch.Capped || leaf < 0 {
		return fairshare.Placement{}, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.by[ch.Slots[leaf]]
	if q == nil || q.spare < 1 || q.leaf != leaf || !sameLevels(q.ch, ch, leaf) {
		return fairshare.Placement{}, 0
	}
	q.spare--
	q.used = true
	q.taken++
	return leasedPlacement(ch, leaf), w.gen
}

// untake gives back a place take took for a request admitted no further.
func (w *withinQuotas) untake(ch *fairshare.Chain, gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.by[ch.Slots[leafOf(ch)]]; q != nil && gen == w.gen {
		q.spare++
		return
	}
	w.giveBack(ch, leafOf(ch), 1)
}

// ask asks Redis for places of ch's leaf (not waited for), unless it
// holds more than half of its last grant.
func (w *withinQuotas) ask(ch *fairshare.Chain) {
	leaf := leafOf(ch)
	if ch.Capped || leaf < 0 || ch.Res[leaf] <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.by[ch.Slots[leaf]]
	if q != nil && (q.asking || q.spare > q.grant/2 && sameLevels(q.ch, ch, leaf) || time.Now().Before(q.quiet)) {
		return
	}
	if q == nil {
		q = &withinQuota{}
		w.by[ch.Slots[leaf]] = q
	}
	if q.spare > 0 && !sameLevels(q.ch, ch, leaf) { // for other levels: back
		w.giveBack(q.ch, q.leaf, q.spare)
		q.spare = 0
	}
	q.ch, q.leaf, q.asking = ch, leaf, true
	c := w.c
	keys, args := c.leaseCall(ch, leaf, min(max(2*q.taken, quotaWithin), quotaMost))
	q.taken = 0
	gen := w.gen
	c.p.send(withinTakeScript, keys, args, c.timeout, func(cmd *redis.Cmd) {
		v, err := cmd.Int64Slice()
		if err == nil && len(v) != 2 {
			err = fmt.Errorf("within quota script answered %v", v)
		}
		if err != nil {
			w.mu.Lock()
			q.asking = false
			w.mu.Unlock()
			c.fail(fmt.Errorf("redis within quota: %w", err))
			return
		}
		if v[0] == 0 {
			c.dirty.Store(true)
			c.poke()
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		q.asking = false
		q.granted, q.grant = v[1] > 0, v[1]
		if !q.granted {
			q.quiet = time.Now().Add(quotaQuiet)
		}
		if gen != w.gen || q.ch != ch {
			w.giveBack(ch, leaf, v[1])
			return
		}
		q.spare += v[1]
	})
}

// giveBack hands n places of ch's leaf back to Redis. w.mu is held.
func (w *withinQuotas) giveBack(ch *fairshare.Chain, leaf int, n int64) {
	if n <= 0 {
		return
	}
	c := w.c
	keys, args := c.leaseCall(ch, leaf, -n)
	c.p.send(withinGiveScript, keys, args, c.timeout, func(cmd *redis.Cmd) {
		if err := cmd.Err(); err != nil {
			c.fail(fmt.Errorf("redis within quota: %w", err)) // the rebuild takes them off
		}
	})
}

// keepable reports whether the place of a request of ch admitted from
// the quotas of generation gen may stay here as the quota's when it ends
// (Redis decides, by the room left: releaseKeepLua): the quota is still
// the one it came from, and holds less than its last grant.
func (w *withinQuotas) keepable(ch *fairshare.Chain, gen uint64) bool {
	leaf := leafOf(ch)
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.by[ch.Slots[leaf]]
	return gen == w.gen && q != nil && q.granted && q.spare < q.grant && q.leaf == leaf && sameLevels(q.ch, ch, leaf)
}

// kept adds a place Redis kept as the quota's (or gives it back when the
// quota is gone meanwhile).
func (w *withinQuotas) kept(ch *fairshare.Chain, gen uint64) {
	leaf := leafOf(ch)
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.by[ch.Slots[leaf]]; gen == w.gen && q != nil && q.leaf == leaf && sameLevels(q.ch, ch, leaf) {
		q.spare++
		return
	}
	w.giveBack(ch, leaf, 1)
}

// drop forgets every quota: the caller replaces this replica's part in
// Redis by its tally (a rebuild), which does not count them.
func (w *withinQuotas) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	clear(w.by)
}

// idle gives back the quotas no request used since the last call.
func (w *withinQuotas) idle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, q := range w.by {
		if !q.used && !q.asking {
			w.giveBack(q.ch, q.leaf, q.spare)
			delete(w.by, s)
		}
		q.used = false
	}
}

// leaseCall returns the within quota scripts' keys and arguments for n
// places of ch's leaf (negative: given back).
func (c *Counters) leaseCall(ch *fairshare.Chain, leaf int, n int64) ([]string, []any) {
	args := make([]any, 0, 4+2*(leaf+1))
	args = append(args, n, max(c.replicas.Load(), 1), ch.Res[leaf], c.pathKey(ch.Slots[leaf]))
	for i := 0; i < leaf; i++ {
		if ch.Level[i] {
			args = append(args, c.pathKey(ch.Slots[i]))
		}
	}
	return []string{c.key, c.mine}, args
}

// withinTakeScript takes places within a leaf's reservation. KEYS:
// totals, this replica's part. ARGV: places wanted, live replicas n, the
// leaf's reservation, the leaf's path key, then the path keys of the
// accounts with a level above it. It grants at most 1/(4n) of the leaf's
// room, counted within at the leaf and above as Place counts a request
// where the leaf has room, and nothing while that room is below 8n (the
// reservation is near full: its requests are placed in Redis). It returns {registered, granted} (nothing
// granted when this replica's part is missing).
var withinTakeScript = redis.NewScript(`
local h, r = KEYS[1], KEYS[2]
if redis.call('HEXISTS', r, 'live') == 0 then return {0, 0} end
local want, n, res = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local room = res - tonumber(redis.call('HGET', h, 'w:' .. ARGV[4]) or '0')
if room < 8 * n then return {1, 0} end
local g = math.min(want, math.floor(room / (4 * n)))
if g <= 0 then return {1, 0} end
for i = 4, #ARGV do
  redis.call('HINCRBY', h, 'w:' .. ARGV[i], g)
  redis.call('HINCRBY', r, 'w:' .. ARGV[i], g)
end
return {1, g}
`)

// withinGiveScript gives places back: ARGV as withinTakeScript's, the
// first negative. Nothing when this replica's part is missing (then it
// does not count them); nothing goes below 0.
var withinGiveScript = redis.NewScript(`
local h, r = KEYS[1], KEYS[2]
if redis.call('HEXISTS', r, 'live') == 0 then return 0 end
local d = tonumber(ARGV[1])
for i = 4, #ARGV do
  local f = 'w:' .. ARGV[i]
  if redis.call('HINCRBY', h, f, d) < 0 then redis.call('HSET', h, f, 0) end
  if redis.call('HINCRBY', r, f, d) < 0 then redis.call('HSET', r, f, 0) end
end
return 1
`)

// countScript counts a request placed from a quota in flight (its within
// counts are the quota's). KEYS: totals, this replica's part. ARGV: the
// chain's path keys. It returns 0, counting nothing, when this replica's
// part is missing (the rebuild that asks for counts it).
var countScript = redis.NewScript(directLua + ctrCountLua + "return ctr_count(KEYS, ARGV)\n")

// ctrCountLua defines ctr_count(KEYS, ARGV, m), countScript's body: m
// (nil: 1) requests counted (a fold, fold.go).
const ctrCountLua = `
local function ctr_count(KEYS, ARGV, m)
m = m or 1
local h, r = KEYS[1], KEYS[2]
if not hexists(r, 'live') then return 0 end
hincr(h, 'inflight', m)
hincr(r, 'inflight', m)
for i = 1, #ARGV do
  hincr(h, 'i:' .. ARGV[i], m)
  hincr(r, 'i:' .. ARGV[i], m)
end
return 1
end
`

// admitLeased counts a request of ch placed at p from a quota (take):
// here and, in flight, in Redis through the pipe. c.gate is held
// (shared).
func (c *Counters) admitLeased(ch *fairshare.Chain, p fairshare.Placement, gen uint64) (fairshare.Placement, uint64) {
	c.count(ch, p, 1)
	args := make([]any, ch.N)
	for i := 0; i < ch.N; i++ {
		args[i] = c.pathKey(ch.Slots[i])
	}
	c.p.send(countScript, []string{c.key, c.mine}, args, c.timeout, func(cmd *redis.Cmd) {
		reg, err := cmd.Int64()
		if err != nil {
			c.fail(fmt.Errorf("redis count: %w", err))
			return
		}
		if reg == 0 {
			c.dirty.Store(true)
			c.poke()
		}
	})
	return p, gen
}

// releaseLeasedCall is the release of a request placed at p from the
// quotas of generation gen (ctrReleaseKeepLua's keys and arguments): its
// place stays here as the quota's when the quota may keep it and Redis
// finds room enough; ok false when Redis is away (the rebuild uncounts
// it). Its usage is charged at the next beat (chargeLater), with the
// other ends of the beat. c.gate is held (shared).
func (c *Counters) releaseLeasedCall(ch *fairshare.Chain, p fairshare.Placement, gen uint64, gpuHours float64, now time.Time) (keys []string, args []any, ok bool) {
	c.count(ch, p, -1)
	c.chargeLater(ch, gpuHours, now) // by the next beat, for all such ends at once
	if c.down.Load() {
		return nil, nil, false
	}
	keys, args = c.releaseCall(ch, p, 0, now)
	leafKey, res, thr := "", int64(0), int64(0)
	if c.wq.keepable(ch, gen) {
		leaf := leafOf(ch)
		leafKey, res, thr = c.pathKey(ch.Slots[leaf]), ch.Res[leaf], 8*max(c.replicas.Load(), 1)
	}
	return keys, append([]any{leafKey, res, thr}, args...), true
}

// ctrReleaseKeepLua defines ctr_release_keep(KEYS, ARGV, m): ctr_release
// (ctrReleaseLua, before it) with three arguments first: the leaf's path
// key (empty: do not keep), its reservation, and the room below which its
// place goes back. While the leaf has that room, the request's within
// counts stay (the place is the replica's quota's again). It returns
// ctr_release's answer + 2 when kept. With m (a fold of m such ends
// charging no usage, fold.go) it returns the m answers, as m calls one
// after the other would: each keep is decided on the leaf's count the
// ends before it left, and the counts are taken off once.
const ctrReleaseKeepLua = `
local function ctr_release_keep(KEYS, ARGV, m)
local leaf, res, thr = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local rest = {}
for i = 4, #ARGV do rest[#rest + 1] = ARGV[i] end
if m == nil then
  local kept = 0
  if leaf ~= '' and hexists(KEYS[2], 'live') and
     res - tonumber(hget(KEYS[1], 'w:' .. leaf) or '0') >= thr then
    rest[2] = string.rep('0', #rest[2])
    kept = 2
  end
  return ctr_release(KEYS, rest) + kept
end
local h, r = KEYS[1], KEYS[2]
local n, within, top = tonumber(rest[1]), rest[2], rest[3] == '1'
local out = {}
if not hexists(r, 'live') then
  for j = 1, m do out[j] = 0 end
  return out
end
local li = 0
for i = 1, n do
  if leaf ~= '' and rest[6 + i] == leaf then li = i end
end
local leafWithin = li > 0 and string.sub(within, li, li) == '1'
local w = 0
if leaf ~= '' then w = tonumber(hget(h, 'w:' .. leaf) or '0') end
local given = 0
for j = 1, m do
  if leaf ~= '' and res - w >= thr then
    out[j] = 3
  else
    out[j] = 1
    given = given + 1
    if leafWithin and w > 0 then w = w - 1 end
  end
end
local function dec(f, d)
  if d == 0 then return end
  if hincr(h, f, -d) < 0 then hset(h, f, 0) end
  if hincr(r, f, -d) < 0 then hset(r, f, 0) end
end
dec('inflight', m)
if not top then dec('borrowing', m) end
for i = 1, n do
  local k = rest[6 + i]
  dec('i:' .. k, m)
  if string.sub(within, i, i) == '1' then dec('w:' .. k, given) end
end
return out
end
`

// releaseKeepScript is ctr_release_keep alone.
var releaseKeepScript = redis.NewScript(directLua + chargeLua + ctrReleaseLua + ctrReleaseKeepLua + "return ctr_release_keep(KEYS, ARGV)\n")
