package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Riding: a request's budget reservation (a *budgets.Ride on this
// package's Ledger) goes with its fair-share admission in one script, and
// its settlement with its release in another, so that a request costs one
// Redis round trip at admission and one at its end.
//
// The admission script checks the chain's caps, then runs the ledger's
// reservation, then places and counts the request: all or nothing, so a
// request refused by a budget, a key limit or a cap holds nothing
// anywhere. While either side falls back (Redis away), the two are done
// one after the other, each where it stands.

var _ fairshare.RidingCounters = (*Counters)(nil)

// rideAdmitScript: KEYS the ledger's, then the counters'; ARGV the number
// of each's keys and arguments... as: #ledger keys, #ledger arguments, the
// ledger's arguments, the counters' arguments. It returns {counters'
// answer, ledger's answer} (the ledger's empty when it did not run).
var rideAdmitScript = redis.NewScript(ledgerReserveLua + ctrAdmitLua + splitLua + `
local LK, LA, CK, CA = split()
local led = {}
local ctr = ctr_admit(CK, CA, function()
  led = ledger_reserve(LK, LA)
  return led[1] == 'ok'
end)
return {ctr, led}
`)

// rideReleaseScript: keys and arguments as rideAdmitScript's, for
// ledger_settle and ctr_release. It returns ctr_release's answer.
var rideReleaseScript = redis.NewScript(chargeLua + ledgerSettleLua + ctrReleaseLua + splitLua + `
local LK, LA, CK, CA = split()
local reg = ctr_release(CK, CA)
ledger_settle(LK, LA)
return reg
`)

// splitLua defines split(), which parts KEYS and ARGV between the ledger
// and the counters.
const splitLua = `
local function split()
  local nk, na = tonumber(ARGV[1]), tonumber(ARGV[2])
  local LK, LA, CK, CA = {}, {}, {}, {}
  for i = 1, #KEYS do
    if i <= nk then LK[#LK + 1] = KEYS[i] else CK[#CK + 1] = KEYS[i] end
  end
  for i = 3, #ARGV do
    if i <= 2 + na then LA[#LA + 1] = ARGV[i] else CA[#CA + 1] = ARGV[i] end
  end
  return LK, LA, CK, CA
end
`

// joined returns keys and arguments of a riding script.
func joined(lk []string, la []any, ck []string, ca []any) ([]string, []any) {
	keys := make([]string, 0, len(lk)+len(ck))
	keys = append(append(keys, lk...), ck...)
	args := make([]any, 0, 2+len(la)+len(ca))
	args = append(append(append(args, len(lk), len(la)), la...), ca...)
	return keys, args
}

// riderOf returns the ride rider carries, and its ledger when it is a
// Ledger on the same Redis as c (nil: the ride is done on its own).
func (c *Counters) riderOf(rider any) (*budgets.Ride, *Ledger) {
	rd, _ := rider.(*budgets.Ride)
	if rd == nil || rd.Req == nil || rd.Ledger == nil {
		return nil, nil
	}
	l, _ := rd.Ledger.(*Ledger)
	if l != nil && l.rdb != c.rdb {
		l = nil
	}
	return rd, l
}

// AdmitRiding implements fairshare.RidingCounters. A rider other than a
// *budgets.Ride is ignored.
func (c *Counters) AdmitRiding(ch *fairshare.Chain, rider any) (fairshare.Placement, int, error) {
	rd, l := c.riderOf(rider)
	c.gate.RLock()
	defer c.gate.RUnlock()
	if rd == nil {
		p, capped := c.admit(ch, true)
		return p, capped, nil
	}
	if l == nil || l.down.Load() || c.down.Load() {
		return c.admitApart(ch, rd)
	}
	req := rd.Req
	lk, la, sec := l.reserveCall(req.Start, req)
	ck, ca := c.admitCall(ch, true)
	keys, args := joined(lk, la, ck, ca)
	ctx, cancel := c.ctx()
	defer cancel()
	v, err := rideAdmitScript.Run(ctx, c.rdb, keys, args...).Slice()
	if err == nil {
		if p, capped, err, ok := c.rideAdmitted(v, ch, l, req, sec); ok {
			return p, capped, err
		}
		err = fmt.Errorf("riding admit script answered %v", v)
	}
	// The script may have run: the counters' rebuild takes its count off;
	// a hold it took expires with its bucket (LedgerOptions.InFlightTTL).
	err = fmt.Errorf("redis admit: %w", err)
	c.fail(err)
	l.fail(err)
	return c.admitApart(ch, rd)
}

// rideAdmitted reads rideAdmitScript's answer; ok false when it is not
// one.
func (c *Counters) rideAdmitted(v []any, ch *fairshare.Chain, l *Ledger, req *budgets.Request, sec int64) (p fairshare.Placement, capped int, err error, ok bool) {
	if len(v) != 2 {
		return p, -1, nil, false
	}
	cv, _ := v[0].([]any)
	lv, _ := v[1].([]any)
	if len(cv) == 1 && cv[0] == "refused" {
		err, ok = l.reserved(lv, req, sec)
		if ok && err == nil { // refused, yet the ledger said yes: not an answer of ours
			ok = false
		}
		return p, -1, err, ok
	}
	if len(cv) == 0 {
		return p, -1, nil, false
	}
	if p, capped, ok = c.admitted(cv, ch); !ok || capped >= 0 {
		return p, capped, nil, ok
	}
	if err, ok = l.reserved(lv, req, sec); !ok || err != nil {
		// counted, but the ledger's answer is not an admission: undone by
		// the rebuild the caller's failure asks for
		return p, -1, nil, false
	}
	return p, -1, nil, true
}

// admitApart reserves rd and admits ch one after the other (Redis away on
// either side, or a ledger of its own): each falls back on its own, and a
// request over a cap gives its reservation back. c.gate is held (shared).
func (c *Counters) admitApart(ch *fairshare.Chain, rd *budgets.Ride) (fairshare.Placement, int, error) {
	if err := rd.Ledger.Reserve(rd.Req.Start, rd.Req); err != nil {
		return fairshare.Placement{}, -1, err
	}
	p, capped := c.admit(ch, true)
	if capped >= 0 {
		rd.Ledger.Settle(rd.Req.Start, rd.Req, 0, 0)
	}
	return p, capped, nil
}

// ReleaseRiding implements fairshare.RidingCounters.
func (c *Counters) ReleaseRiding(ch *fairshare.Chain, p fairshare.Placement, gpuHours float64, now time.Time, rider any) {
	rd, l := c.riderOf(rider)
	c.gate.RLock()
	defer c.gate.RUnlock()
	if rd == nil {
		c.release(ch, p, gpuHours, now)
		return
	}
	cost := gpuHours
	gpuHours = finiteCost(gpuHours)
	if l == nil || rd.Req.Ext.Via != viaRedis || p.Room == roomLocal || c.down.Load() {
		rd.Ledger.Settle(now, rd.Req, cost, rd.Tokens)
		c.release(ch, p, gpuHours, now)
		return
	}
	lk, la, _ := l.settleCall(now, rd.Req, cost, rd.Tokens) // Via is viaRedis: a call
	c.count(ch, p, -1)
	ck, ca := c.releaseCall(ch, p, gpuHours, now)
	keys, args := joined(lk, la, ck, ca)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	reg, err := rideReleaseScript.Run(ctx, c.rdb, keys, args...).Int64()
	c.released(reg, err, ch, gpuHours, now)
	if err != nil {
		l.settleFailed(fmt.Errorf("redis release: %w", err), lk, la)
	}
}
