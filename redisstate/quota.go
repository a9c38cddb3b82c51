package redisstate

import (
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/budgets"
)

// Quotas: leases of budgets and key limits held by a replica.
//
// A replica that pipes its scripts (Shared with Pipeline) takes, next to
// the requests it admits in Redis, quotas of what they need: a key's
// places in flight, its requests and tokens of the current second, and
// units of each budget. A quota is taken in Redis exactly as a request's
// hold is, under the replica's name ('i:<bucket>:<replica>' and
// 'h:<bucket>:<replica>', 'r:<second>' and 't:<second>'), so every other
// replica counts it as used; then the requests it covers are admitted in
// this process with no round trip, and their settlement is handed to the
// pipe, not waited for. So:
//
//   - nothing is ever granted beyond a limit: the quotas and holds of all
//     replicas together never exceed it (a quota is at most 1/(2n) of
//     what is left when taken, n the live replicas);
//   - the error is the other way: a request may be refused (or borrow,
//     for the fair share) while other replicas hold unused quotas: at
//     most what each took, given back after one beat unused, or at once
//     when the last quota it was granted was none (the limit is near);
//   - a replica killed holds its quotas no longer than its lease (3 s):
//     its fields are dropped like its requests' holds; only the requests
//     of a second's quota it did not use stay in that second of the
//     key's window (counted, never missing: a refusal, never an excess).
//
// When Redis fails the quotas are dropped here (what they held is given
// back when it answers again, before the fallback ends).
type quotas struct {
	l *Ledger

	mu    sync.Mutex
	gen   uint64 // of the quotas held; bumped when every quota is dropped
	keys  map[string]*keyQuota
	slots map[string]*slotQuota
	// bySlot finds a slot's quota without making its key
	bySlot map[*budgets.Slot]*slotQuota
}

type keyQuota struct {
	ik, wk string
	// places in flight held in bucket ifB
	ifB, places int64
	// requests and tokens counted at second sec, not used yet
	sec, reqs, toks int64
	granted         bool // the last quota taken granted something
	used, asking    bool
	quiet           time.Time // asks for nothing before: the last grant was none
	taken           int64     // requests served since the last ask
}

type slotQuota struct {
	key     string
	exp     int64
	start   int64 // of the budget's period (unix s)
	limit   int64 // the limit it was taken under
	b       int64 // bucket of its hold
	units   int64
	granted bool
	used    bool
	asking  bool
	quiet   time.Time
	taken   int64 // requests served since the last ask
}

// quotaQuiet is how long a replica does not ask again for a quota after
// a grant of none (the limit is near: its requests go to Redis).
const quotaQuiet = 100 * time.Millisecond

func newQuotas(l *Ledger) *quotas {
	return &quotas{l: l, gen: 1, keys: map[string]*keyQuota{}, slots: map[string]*slotQuota{}, bySlot: map[*budgets.Slot]*slotQuota{}}
}

// What a replica asks for at once, in requests: twice what it served
// since it last asked, within these bounds.
const (
	quotaPlaces   = 16
	quotaRequests = 64
	quotaMost     = 4096
)

// want is what to ask for after taken requests served.
func want(taken, least int64) int64 { return min(max(2*taken, least), quotaMost) }

func (q *quotas) bucket(sec int64) int64 { return sec / int64(q.l.ifTTL/time.Second) }

// holdOf is what Reserve holds for r with its whole output.
func holdOf(r *budgets.Request) int64 {
	if len(r.Slots) == 0 {
		return 0
	}
	return budgets.Units(r.PromptCost + r.OutputCost*float64(r.WantOutput))
}

// take admits r from the quotas held here (as Reserve would in Redis,
// with its whole output) and returns their generation, or 0 having taken
// nothing: what the quotas of r hold that cannot serve it (another
// second, bucket or limit, or too little) is then given back, so that
// Redis, which admits r instead, sees it. Then ask.
func (q *quotas) take(now time.Time, r *budgets.Request) uint64 {
	sec := now.Unix()
	b := q.bucket(sec)
	h := holdOf(r)
	if len(r.Slots) > 8 || len(r.Slots) > 0 && h <= 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	ok := true
	var kq *keyQuota
	if r.Key != nil {
		kq = q.key(r)
		if r.Limits.MaxInFlight > 0 && (kq.ifB != b || kq.places < 1) {
			ok = false
		}
		if (r.Limits.RPM > 0 || r.Limits.TPM > 0) && kq.sec != sec {
			ok = false
		}
		if r.Limits.RPM > 0 && kq.reqs < 1 || r.Limits.TPM > 0 && kq.toks < r.Tokens {
			ok = false
		}
	}
	var sqs [8]*slotQuota
	for i, s := range r.Slots {
		sq := q.slot(s)
		sqs[i] = sq
		if sq.b != b || sq.units < h || sq.limit != s.Limit() {
			ok = false
		}
	}
	if !ok {
		if kq != nil {
			q.giveKey(kq, sec, r.Limits.MaxInFlight > 0 && kq.places < 1)
		}
		for i, sq := range sqs[:len(r.Slots)] {
			q.giveSlot(sq, r.Slots[i].Limit(), b, h)
		}
		return 0
	}
	if kq != nil {
		kq.used = true
		kq.taken++
		if r.Limits.MaxInFlight > 0 {
			kq.places--
		}
		if r.Limits.RPM > 0 {
			kq.reqs--
		}
		if r.Limits.TPM > 0 {
			kq.toks -= r.Tokens
		}
	}
	for _, sq := range sqs[:len(r.Slots)] {
		sq.units -= h
		sq.used = true
		sq.taken++
	}
	r.Output, r.Lowered, r.Sec = r.WantOutput, false, sec
	r.SetHeld(h)
	return q.gen
}

// key returns r's key quota. q.mu is held.
func (q *quotas) key(r *budgets.Request) *keyQuota {
	kq := q.keys[r.Key.KeyID()]
	if kq == nil {
		ik, wk := q.l.keyKeys(r)
		kq = &keyQuota{ik: ik, wk: wk}
		q.keys[r.Key.KeyID()] = kq
	}
	return kq
}

// slot returns s's quota. q.mu is held.
func (q *quotas) slot(s *budgets.Slot) *slotQuota {
	start, _ := s.Period()
	if sq := q.bySlot[s]; sq != nil && sq.start == start.Unix() && q.slots[sq.key] == sq {
		return sq
	}
	k, exp := q.l.slotKey(s)
	sq := q.slots[k]
	if sq == nil {
		sq = &slotQuota{key: k, exp: exp, start: start.Unix()}
		q.slots[k] = sq
	}
	if len(q.bySlot) > 4096 {
		clear(q.bySlot)
	}
	q.bySlot[s] = sq
	return sq
}

// ask asks Redis for the quotas r would need (not waited for): after a
// request take could not serve was admitted in Redis.
func (q *quotas) ask(now time.Time, r *budgets.Request) {
	l := q.l
	sec := now.Unix()
	h := holdOf(r)
	if len(r.Slots) > 8 || len(r.Slots) > 0 && h <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var wantIf, wantR, wantT int64
	var kq *keyQuota
	if r.Key != nil && r.Limits.Any() {
		kq = q.key(r)
		if !kq.asking && now.After(kq.quiet) {
			n := want(kq.taken, quotaRequests)
			// low water: asked for before the quota runs out
			if r.Limits.MaxInFlight > 0 && kq.places < 2 {
				wantIf = want(kq.taken, quotaPlaces)
			}
			if kq.sec != sec || r.Limits.RPM > 0 && kq.reqs < 4 || r.Limits.TPM > 0 && kq.toks < 4*r.Tokens {
				if r.Limits.RPM > 0 {
					// a second's worth at most of what a minute allows
					wantR = min(n, int64(r.Limits.RPM)/60+1)
				}
				if r.Limits.TPM > 0 {
					wantT = min(n*max(r.Tokens, 1), int64(r.Limits.TPM)/60+1)
				}
			}
			if wantIf+wantR+wantT > 0 {
				kq.taken = 0
			}
		}
	}
	if wantIf+wantR+wantT == 0 {
		low := false
		for _, s := range r.Slots {
			sq := q.slot(s)
			low = low || !sq.asking && sq.units < 4*h && now.After(sq.quiet)
		}
		if !low {
			return
		}
	}
	sqs := make([]*slotQuota, len(r.Slots))
	wants := make([]int64, len(r.Slots))
	limits := make([]int64, len(r.Slots))
	asking := false
	for i, s := range r.Slots {
		sq := q.slot(s)
		sqs[i], limits[i] = sq, s.Limit()
		if !sq.asking && sq.units < 4*h && now.After(sq.quiet) {
			wants[i] = want(sq.taken, quotaRequests) * h
			sq.taken = 0
			asking = true
		}
	}
	if wantIf+wantR+wantT == 0 && !asking {
		return
	}
	ik, wk := l.keyKeys(r)
	if kq != nil {
		kq.asking = wantIf+wantR+wantT > 0
	}
	keys := make([]string, 0, 2+len(sqs))
	keys = append(keys, ik, wk)
	args := make([]any, 0, 15+4*len(sqs))
	args = append(args, wantIf, r.Limits.MaxInFlight, wantR, r.Limits.RPM, wantT, r.Limits.TPM, sec,
		int64(l.ifTTL/time.Second), max(l.replicas(), 1))
	for i, s := range r.Slots {
		keys = append(keys, sqs[i].key)
		args = append(args, limits[i], s.Spent(), sqs[i].exp, wants[i])
		if wants[i] > 0 {
			sqs[i].asking = true
		}
	}
	args = append(append(args, l.fixedArgs[:]...), l.epoch.Load(), l.proposal.Load())
	gen := q.gen
	l.p.send(quotaTakeScript, keys, args, l.timeout, func(cmd *redis.Cmd) {
		v, err := cmd.Slice()
		if err := q.granted(gen, kq, wantIf+wantR+wantT > 0, sqs, limits, wants, v, err); err != nil {
			if err == errEpochLost {
				ep, _ := v[1].(string)
				l.markLost(ep)
				return
			}
			l.fail(err)
		}
	})
}

// granted adds what Redis granted to the quotas (or gives it back when
// they were dropped meanwhile); an error says Redis failed.
func (q *quotas) granted(gen uint64, kq *keyQuota, keyAsked bool, sqs []*slotQuota, limits, wants []int64, v []any, err error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if kq != nil && keyAsked {
		kq.asking = false
	}
	for i, sq := range sqs {
		if wants[i] > 0 {
			sq.asking = false
		}
	}
	if err != nil {
		return fmt.Errorf("redis quota: %w", err)
	}
	if len(v) == 2 && v[0] == "lost" {
		return errEpochLost
	}
	if len(v) != 7 || v[0] != "ok" {
		return fmt.Errorf("quota script answered %v", v)
	}
	b, _ := v[1].(int64)
	gif, _ := v[2].(int64)
	gr, _ := v[3].(int64)
	gt, _ := v[4].(int64)
	sec, _ := v[5].(int64)
	gs, _ := v[6].([]any)
	units := make([]int64, len(sqs))
	for i := range sqs {
		if i < len(gs) {
			units[i], _ = gs[i].(int64)
		}
	}
	if gen != q.gen {
		// dropped meanwhile: all of it goes back
		q.giveBack(kq, sqs, b, gif, sec, gr, gt, units)
		return nil
	}
	if kq != nil && keyAsked {
		q.giveKey(kq, sec, false) // what another second or bucket holds
		if gif > 0 {
			kq.ifB, kq.places = b, kq.places+gif
		}
		if gr > 0 || gt > 0 {
			kq.sec, kq.reqs, kq.toks = sec, kq.reqs+gr, kq.toks+gt
		}
		kq.granted = gif > 0 || gr > 0 || gt > 0
		if !kq.granted {
			kq.quiet = time.Now().Add(quotaQuiet)
		}
	}
	for i, sq := range sqs {
		if wants[i] == 0 {
			continue
		}
		sq.granted = units[i] > 0
		if units[i] == 0 {
			sq.quiet = time.Now().Add(quotaQuiet)
			continue
		}
		if sq.b != b || sq.limit != limits[i] {
			q.giveSlot(sq, -1, -1, 0)
		}
		sq.b, sq.limit, sq.units = b, limits[i], sq.units+units[i]
	}
	return nil
}

// giveKey gives back what kq holds for another second than sec (or
// another bucket), and its places too when all is true. q.mu is held.
func (q *quotas) giveKey(kq *keyQuota, sec int64, all bool) {
	var places, reqs, toks int64
	if kq.places > 0 && (all || sec < 0 || kq.ifB != q.bucket(sec)) {
		places = kq.places
		kq.places = 0
	}
	if kq.sec != sec && (kq.reqs > 0 || kq.toks > 0) {
		reqs, toks = max(kq.reqs, 0), max(kq.toks, 0)
		kq.reqs, kq.toks = 0, 0
	}
	if places > 0 || reqs > 0 || toks > 0 {
		q.giveBack(kq, nil, kq.ifB, places, kq.sec, reqs, toks, nil)
	}
}

// giveSlot gives back sq's units when they cannot serve a request of h
// units under limit in bucket b (limit −1: in any case). q.mu is held.
func (q *quotas) giveSlot(sq *slotQuota, limit, b, h int64) {
	if sq.units > 0 && (limit < 0 || sq.b != b || sq.limit != limit || sq.units < h) {
		q.giveBack(nil, []*slotQuota{sq}, sq.b, 0, 0, 0, 0, []int64{sq.units})
		sq.units = 0
	}
}

// giveBack hands Redis back places of kq (bucket b), requests and tokens
// counted at second sec, and units of each of sqs (bucket b), through the
// pipe. q.mu is held.
func (q *quotas) giveBack(kq *keyQuota, sqs []*slotQuota, b, places, sec, reqs, toks int64, units []int64) {
	ik, wk := q.l.prefix+"k:-", q.l.prefix+"w:-"
	if kq != nil {
		ik, wk = kq.ik, kq.wk
	}
	floors := make([]int64, len(sqs))
	keys, args := q.giveCall(ik, wk, sqs, b, places, sec, -reqs, -toks, units, floors, floors)
	q.l.sendGive(keys, args)
}

// giveCall returns quotaGiveScript's keys and arguments: places back in
// bucket b, dreqs and dtoks added at second sec, and per slot units back
// (bucket b), units charged and the floor.
func (q *quotas) giveCall(ik, wk string, sqs []*slotQuota, b, places, sec, dreqs, dtoks int64, units, charged, floors []int64) ([]string, []any) {
	keys := make([]string, 0, 2+len(sqs))
	keys = append(keys, ik, wk)
	args := make([]any, 0, 8+4*len(sqs))
	args = append(args, b, places, sec, dreqs, dtoks, time.Now().Unix(), int64(q.l.ifTTL/time.Second))
	for i, sq := range sqs {
		keys = append(keys, sq.key)
		args = append(args, units[i], charged[i], floors[i], sq.exp)
	}
	return keys, append(args, q.l.fixedArgs[0])
}

// settle ends a request take admitted from the quotas of generation gen:
// its place and hold go back to the quotas (to Redis when the quotas
// were dropped since, or the limit is near: the last quota asked for was
// none), and its cost is charged and its tokens counted in Redis, through
// the pipe.
func (q *quotas) settle(now time.Time, r *budgets.Request, gen uint64, cost float64, tokens int64) {
	if keys, args, ok := q.settleCall(now, r, gen, cost, tokens); ok {
		q.l.sendGive(keys, args)
	}
}

// settleCall is settle's work here, and the quotaGiveScript call that
// does it in Redis; ok false when r was settled already.
func (q *quotas) settleCall(now time.Time, r *budgets.Request, gen uint64, cost float64, tokens int64) (keys []string, args []any, ok bool) {
	l := q.l
	sec := r.Sec
	if sec == 0 {
		return nil, nil, false
	}
	r.Sec = 0
	l.settled(r, sec, tokens)
	h, c := r.HeldUnits(), budgets.Units(cost)
	r.SetHeld(0)
	floors := make([]int64, len(r.Slots))
	for i, s := range r.Slots {
		floors[i] = s.Spent()
	}
	if len(r.Slots) > 0 {
		l.local.Load().Charge(now, r, cost) // this gateway's figures, after Spent was read
	}
	b := q.bucket(sec)
	q.mu.Lock()
	defer q.mu.Unlock()
	mine := gen == q.gen
	places := int64(0)
	if r.Key != nil && r.Limits.MaxInFlight > 0 {
		if kq := q.keys[r.Key.KeyID()]; mine && kq != nil && kq.granted && kq.ifB == b {
			kq.places++
		} else {
			places = 1
		}
	}
	sqs := make([]*slotQuota, len(r.Slots))
	units, charged := make([]int64, len(r.Slots)), make([]int64, len(r.Slots))
	for i, s := range r.Slots {
		k, exp := l.slotKey(s)
		sq := q.slots[k]
		charged[i] = c
		if mine && sq != nil && sq.granted && sq.b == b && sq.limit == s.Limit() {
			// the hold stays held in Redis as the quota's, less the cost
			// charged: what Redis counts used does not change
			sq.units += h - c
			units[i] = c
		} else {
			units[i] = h
		}
		if sq == nil {
			sq = &slotQuota{key: k, exp: exp}
		}
		sqs[i] = sq
	}
	dtoks := int64(0)
	if r.Key != nil && (r.Limits.TPM > 0 || r.Limits.RPM > 0) {
		dtoks = tokens - r.Tokens
	}
	ik, wk := l.keyKeys(r)
	keys, args = q.giveCall(ik, wk, sqs, b, places, sec, 0, dtoks, units, charged, floors)
	return keys, args, true
}

// drop forgets every quota: what they hold is given back through the pipe
// (kept for Probe when Redis fails). Requests admitted from them settle
// in Redis one by one.
func (q *quotas) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gen++
	for _, kq := range q.keys {
		kq.granted = false
		q.giveKey(kq, -1, true)
	}
	for _, sq := range q.slots {
		sq.granted = false
		q.giveSlot(sq, -1, -1, 0)
	}
}

// idle gives back the quotas no request used since the last call, and
// what the others hold for a second gone by.
func (q *quotas) idle(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	sec := now.Unix()
	for id, kq := range q.keys {
		switch {
		case kq.asking:
		case !kq.used:
			q.giveKey(kq, -1, true)
			delete(q.keys, id)
		default:
			q.giveKey(kq, sec, false)
		}
		kq.used = false
	}
	for k, sq := range q.slots {
		switch {
		case sq.asking:
		case !sq.used:
			q.giveSlot(sq, -1, -1, 0)
			delete(q.slots, k)
		}
		sq.used = false
	}
}

// sendGive hands a quotaGiveScript call to the pipe; one Redis does not
// take is kept for Probe.
func (l *Ledger) sendGive(keys []string, args []any) {
	l.p.send(quotaGiveScript, keys, args, l.timeout, func(cmd *redis.Cmd) {
		if err := cmd.Err(); err != nil {
			l.mu.Lock()
			l.pending = append(l.pending, pendingSettle{script: quotaGiveScript, keys: keys, args: args})
			l.mu.Unlock()
			l.fail(fmt.Errorf("redis quota: %w", err))
		}
	})
}

// quotaTakeScript takes quotas. KEYS: the key's in-flight hash, its
// window hash, then one hash per budget slot. ARGV: places wanted, max
// in flight, requests wanted, RPM, tokens wanted, TPM, now (unix s),
// bucket width (s), live replicas n, then per slot: limit, floor
// (units), expiry (unix s), units wanted; last the replica, the leases'
// key, the lease (s), the epoch's key, the epoch known and the one to set
// when there is none. Each grant is at most 1/(2n) of what is left. It
// returns {'ok', bucket, places, requests, tokens, second, {units per
// slot}} or {'lost', epoch} (an epoch not the one known: nothing taken).
var quotaTakeScript = redis.NewScript(`
local ekey, known, fresh = ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
local ep = redis.call('GET', ekey)
if not ep then
  redis.call('SET', ekey, fresh)
  ep = fresh
end
if known == '' or ep ~= known then return {'lost', ep} end
local rep, lkey, lsecs = ARGV[#ARGV - 5], ARGV[#ARGV - 4], tonumber(ARGV[#ARGV - 3])
local wif, maxif, wr, rpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local wt, tpm, now, ifttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local n = tonumber(ARGV[9])
local function I(x) return string.format('%d', x) end
` + liveHoldsLua + `local function part(room, want)
  if room <= 0 or want <= 0 then return 0 end
  return math.max(0, math.min(want, math.floor(room / (2 * n))))
end
local gif, gr, gt = 0, 0, 0
if wif > 0 and maxif > 0 then
  gif = part(maxif - live(KEYS[1], 'i:'), wif)
  if gif > 0 then
    redis.call('HINCRBY', KEYS[1], 'i:' .. cur .. ':' .. rep, gif)
    redis.call('EXPIRE', KEYS[1], 2 * ifttl + 60)
  end
end
if (wr > 0 and rpm > 0) or (wt > 0 and tpm > 0) then
  local h = redis.call('HGETALL', KEYS[2])
  local rt, tt = 0, 0
  for i = 1, #h, 2 do
    local f = h[i]
    local sec = tonumber(string.sub(f, 3))
    if sec == nil or sec <= now - 60 then
      redis.call('HDEL', KEYS[2], f)
    elseif sec <= now then
      if string.sub(f, 1, 1) == 'r' then rt = rt + tonumber(h[i + 1]) else tt = tt + tonumber(h[i + 1]) end
    end
  end
  if rpm > 0 then gr = part(rpm - rt, wr) end
  if tpm > 0 then gt = part(tpm - tt, wt) end
  -- a request needs both when both are limited
  if rpm > 0 and tpm > 0 and (gr == 0 or gt == 0) then gr, gt = 0, 0 end
  if gr > 0 then redis.call('HINCRBY', KEYS[2], 'r:' .. now, gr) end
  if gt > 0 then redis.call('HINCRBY', KEYS[2], 't:' .. now, I(gt)) end
  if gr > 0 or gt > 0 then redis.call('EXPIRE', KEYS[2], 61) end
end
local gs = {}
for i = 1, #KEYS - 2 do
  local j = 10 + (i - 1) * 4
  local limit, floor, want = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 3])
  local g = 0
  if want > 0 then
    local h, charged = live(KEYS[i + 2], 'h:')
    g = part(limit - (h + math.max(charged or 0, floor)), want)
    if g > 0 then
      redis.call('HSETNX', KEYS[i + 2], 'charged', ARGV[j + 1])
      redis.call('HINCRBY', KEYS[i + 2], 'h:' .. cur .. ':' .. rep, I(g))
      redis.call('EXPIREAT', KEYS[i + 2], ARGV[j + 2])
    end
  end
  gs[i] = g
end
return {'ok', cur, gif, gr, gt, now, gs}
`)

// quotaGiveScript gives quotas back and settles requests admitted from
// them. KEYS as quotaTakeScript's. ARGV: bucket, places back, second,
// requests and tokens to add at that second (negative: back), now,
// bucket width, then per slot: units back, units charged, floor, expiry;
// last the replica. Nothing goes below 0, and nothing is given back to a
// field that is gone (dropped with a dead replica, or Redis lost it).
var quotaGiveScript = redis.NewScript(directLua + quotaGiveLua + "return quota_give(KEYS, ARGV)\n")

// quotaGiveLua defines quota_give(KEYS, ARGV), quotaGiveScript's body,
// also run by the release script of Admissions (releaseWithQuotaScript).
const quotaGiveLua = `local function quota_give(KEYS, ARGV)
local b, places, sec = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local dr, dt, now = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local rep = ':' .. ARGV[#ARGV]
local function I(x) return string.format('%d', x) end
local function back(key, f, n)
  if n > 0 and hexists(key, f) and hincr(key, f, I(-n)) <= 0 then
    hdel(key, f)
  end
end
local function add(key, f, d)
  if d ~= 0 and hexists(key, f) and hincr(key, f, I(d)) < 0 then
    hset(key, f, 0)
  end
end
back(KEYS[1], 'i:' .. b .. rep, places)
if sec > now - 60 then
  add(KEYS[2], 'r:' .. sec, dr)
  add(KEYS[2], 't:' .. sec, dt)
end
for i = 3, #KEYS do
  local j = 8 + (i - 3) * 4
  local u, c = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
  if exists(KEYS[i]) then
    back(KEYS[i], 'h:' .. b .. rep, u)
    if c > 0 then hincr(KEYS[i], 'charged', I(c)) end
  elseif c > 0 then
    hset(KEYS[i], 'charged', I(tonumber(ARGV[j + 2]) + c))
  end
  if c > 0 or u > 0 then expireat(KEYS[i], ARGV[j + 3]) end
end
return 1
end
`
