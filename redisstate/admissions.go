package redisstate

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Admissions is admission.Shared over Redis for one pool: the pool's
// Counters and the replica's Ledger. A request's budget reservation goes
// with its fair-share admission in one script, and its settlement with its
// release in another, so that a request costs one Redis round trip at
// admission and one at its end.
//
// The admission script checks the chain's caps, then runs the ledger's
// reservation, then places and counts the request: all or nothing, so a
// request refused by a budget, a key limit or a cap holds nothing
// anywhere. While either side falls back (Redis away), the two are done
// one after the other, each where it stands. A request without budgets or
// key limits (Admission.Budget nil) is the counters' script alone, caps
// included: one round trip too.
//
// A cancelled context does not interrupt a script: each call is bounded
// by the Counters' timeout instead, so that a client leaving never looks
// like Redis failing.
type Admissions struct {
	c *Counters
	l *Ledger
}

var _ admission.Shared = (*Admissions)(nil)

// NewAdmissions returns the admissions of the pool whose counters are c,
// with budgets and key limits in l. When l is on another Redis than c, the
// two sides are done one after the other.
func NewAdmissions(c *Counters, l *Ledger) *Admissions { return &Admissions{c: c, l: l} }

// admitWithLedgerScript: KEYS the ledger's, then the counters'; ARGV the number
// of each's keys and arguments... as: #ledger keys, #ledger arguments, the
// ledger's arguments, the counters' arguments. It returns {counters'
// answer, ledger's answer} (the ledger's empty when it did not run).
var admitWithLedgerScript = redis.NewScript(ledgerReserveLua + ctrAdmitLua + splitLua + `
local LK, LA, CK, CA = split(KEYS, ARGV)
local led = {}
local ctr = ctr_admit(CK, CA, function()
  led = ledger_reserve(LK, LA)
  return led[1] == 'ok'
end)
return {ctr, led}
`)

// releaseWithLedgerScript: keys and arguments as admitWithLedgerScript's, for
// ledger_settle and ctr_release. It returns ctr_release's answer.
var releaseWithLedgerScript = redis.NewScript(directLua + chargeLua + ledgerSettleLua + ctrReleaseLua + splitLua + `
local LK, LA, CK, CA = split(KEYS, ARGV)
local reg = ctr_release(CK, CA)
ledger_settle(LK, LA)
return reg
`)

// splitLua defines split(KEYS, ARGV), which parts KEYS and ARGV between
// the ledger and the counters.
const splitLua = `
local function split(KEYS, ARGV)
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

// joined returns keys and arguments of a script of both.
func joined(lk []string, la []any, ck []string, ca []any) ([]string, []any) {
	keys := make([]string, 0, len(lk)+len(ck))
	keys = append(append(keys, lk...), ck...)
	args := make([]any, 0, 2+len(la)+len(ca))
	args = append(append(append(args, len(lk), len(la)), la...), ca...)
	return keys, args
}

// Admit implements admission.Shared.
func (s *Admissions) Admit(_ context.Context, a *admission.Admission) error {
	c, l := s.c, s.l
	a.Capped, a.BudgetLocal, a.Leased = -1, false, 0
	c.gate.RLock()
	defer c.gate.RUnlock()
	if done, err := s.admitLeased(a); done {
		if err == nil && a.Leased>>32 != 0 && (a.Budget == nil || a.Leased&(1<<32-1) != 0) {
			c.admitsLocal.Add(1)
		} else {
			c.admitsRedis.Add(1)
		}
		return err
	}
	c.admitsRedis.Add(1)
	if a.Budget == nil {
		p, capped := c.admit(a.Chain, true)
		if capped < 0 {
			s.ask(a, p)
		}
		return placed(a, p, capped)
	}
	if l.rdb != c.rdb || l.down.Load() || c.down.Load() {
		return s.admitApart(a)
	}
	req := a.Budget
	lk, la, sec := l.reserveCall(req.Start, req)
	ck, ca := c.admitCall(a.Chain, true)
	keys, args := joined(lk, la, ck, ca)
	v, err := c.run(admitWithLedgerScript, keys, args)
	if err == nil {
		if p, capped, err, ok := c.admittedWithLedger(v, a.Chain, l, req, sec); ok {
			if err == errEpochLost { // nothing taken: the ledger's fallback
				return s.admitApart(a)
			}
			if err != nil {
				return err
			}
			if capped < 0 {
				l.admitted(req)
				s.ask(a, p)
			}
			return placed(a, p, capped)
		}
		err = fmt.Errorf("admission script answered %v", v)
	}
	// The script may have run: the counters' rebuild takes its count off;
	// a hold it took expires with its bucket (LedgerOptions.InFlightTTL).
	err = fmt.Errorf("redis admit: %w", err)
	c.fail(err)
	l.fail(err)
	return s.admitApart(a)
}

// leasable reports whether the quotas may admit now: the pipe on, Redis
// answering both sides (the ledger's only when budget), one Redis for
// both.
func (s *Admissions) leasable(budget bool) bool {
	c, l := s.c, s.l
	if c.wq == nil || c.down.Load() || c.dirty.Load() {
		return false
	}
	return !budget || l.q != nil && l.rdb == c.rdb && !l.down.Load() && l.epoch.Load() != ""
}

// admitLeased admits a from the quotas held here where it can, with no
// round trip: its place within its leaf's reservation (within.go) and,
// when it has one, its budget request whole (quota.go). The side the
// quotas cannot serve is done in Redis alone, through the pipe; when
// neither can, done is false, nothing taken, and the caller admits a in
// one script. c.gate is held (shared).
func (s *Admissions) admitLeased(a *admission.Admission) (done bool, err error) {
	c, l, r := s.c, s.l, a.Budget
	if !s.leasable(false) {
		return false, nil
	}
	p, cg := c.wq.take(a.Chain)
	var lg uint64
	if r != nil && s.leasable(true) {
		lg = l.q.take(r.Start, r)
	}
	switch {
	case cg == 0 && (r == nil || lg == 0):
		return false, nil
	case cg == 0: // the budget from the quotas, the place in Redis
		l.admitted(r)
		var capped int
		p, capped = c.admit(a.Chain, true)
		if capped >= 0 {
			l.q.settle(r.Start, r, lg, 0, 0) // as Cancel: the request stays in the key's window
			return true, placed(a, p, capped)
		}
		s.askWithin(a, p)
	case r != nil && lg == 0: // the place from the quotas, the budget in Redis
		local, err := l.Reserve(r.Start, r)
		if err != nil {
			c.wq.untake(a.Chain, cg)
			return true, err
		}
		a.BudgetLocal = local
		if !local {
			l.q.ask(r.Start, r)
		}
	default:
		if r != nil {
			l.admitted(r)
		}
	}
	if cg != 0 {
		p, _ = c.admitLeased(a.Chain, p, cg)
		c.wq.ask(a.Chain) // when running low
	}
	if lg != 0 {
		l.q.ask(r.Start, r) // when running low
	}
	a.Placement, a.Leased = p, cg<<32|lg&(1<<32-1)
	return true, nil
}

// askWithin asks for the places within a, admitted in Redis at p, would
// have needed: when its leaf had room (else there is none to lease).
func (s *Admissions) askWithin(a *admission.Admission, p fairshare.Placement) {
	if leaf := leafOf(a.Chain); leaf >= 0 && p.Within&(1<<leaf) != 0 && s.leasable(false) {
		s.c.wq.ask(a.Chain)
	}
}

// ask asks for the quotas a, admitted in Redis at p, would have needed.
func (s *Admissions) ask(a *admission.Admission, p fairshare.Placement) {
	s.askWithin(a, p)
	if a.Budget != nil && s.leasable(true) {
		s.l.q.ask(a.Budget.Start, a.Budget)
	}
}

// placed records the counters' answer on a: the placement, or the capped
// account (ErrCapped).
func placed(a *admission.Admission, p fairshare.Placement, capped int) error {
	if capped >= 0 {
		a.Capped = capped
		return admission.ErrCapped
	}
	a.Placement = p
	return nil
}

// admittedWithLedger reads admitWithLedgerScript's answer; ok false when it is not
// one.
func (c *Counters) admittedWithLedger(v []any, ch *fairshare.Chain, l *Ledger, req *budgets.Request, sec int64) (p fairshare.Placement, capped int, err error, ok bool) {
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

// admitApart reserves a's budget side and admits its chain one after the
// other (Redis away on either side, or a ledger on another Redis): each
// falls back on its own, and a request over a cap gives its reservation
// back. c.gate is held (shared).
func (s *Admissions) admitApart(a *admission.Admission) error {
	r := a.Budget
	local, err := s.l.Reserve(r.Start, r)
	if err != nil {
		return err
	}
	p, capped := s.c.admit(a.Chain, true)
	if capped >= 0 {
		s.l.Cancel(r, local)
	}
	a.BudgetLocal = local
	return placed(a, p, capped)
}

// Release implements admission.Shared.
func (s *Admissions) Release(_ context.Context, a *admission.Admission, e admission.End) {
	c, l := s.c, s.l
	c.gate.RLock()
	defer c.gate.RUnlock()
	gpuHours := finiteCost(e.GPUHours)
	if a.Leased != 0 {
		s.releaseLeased(a, e, gpuHours)
		return
	}
	if a.Budget == nil {
		if c.p != nil {
			c.releaseLater(a.Chain, a.Placement, gpuHours, e.At)
			return
		}
		c.release(a.Chain, a.Placement, gpuHours, e.At)
		return
	}
	if l.rdb != c.rdb || a.BudgetLocal || a.Placement.Room == roomLocal || c.down.Load() {
		l.Settle(e.At, a.Budget, a.BudgetLocal, e.GPUHours, e.Tokens)
		c.release(a.Chain, a.Placement, gpuHours, e.At)
		return
	}
	lk, la, ok := l.settleCall(e.At, a.Budget, e.GPUHours, e.Tokens)
	if !ok { // settled already: the ledger's side is done
		c.release(a.Chain, a.Placement, gpuHours, e.At)
		return
	}
	c.count(a.Chain, a.Placement, -1)
	ck, ca := c.releaseCall(a.Chain, a.Placement, gpuHours, e.At)
	keys, args := joined(lk, la, ck, ca)
	ch, at := a.Chain, e.At
	done := func(cmd *redis.Cmd) {
		reg, err := cmd.Int64()
		c.released(reg, err, ch, gpuHours, at)
		if err != nil {
			l.settleFailed(fmt.Errorf("redis release: %w", err), lk, la)
		}
	}
	if c.p != nil {
		// waited for, as without the pipe: admitted in Redis, the request
		// may be near a limit, and its end must free what it held for a
		// request another replica admits next (only the end of one
		// admitted from quotas is not waited for: releaseLeased)
		done(c.p.do(releaseWithLedgerScript, keys, args, c.timeout))
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	done(releaseWithLedgerScript.Run(ctx, c.rdb, keys, args...))
}

// releaseWithQuotaScript: keys and arguments as admitWithLedgerScript's,
// for quota_give and ctr_release. It returns ctr_release's answer.
var releaseWithQuotaScript = redis.NewScript(directLua + chargeLua + quotaGiveLua + ctrReleaseLua + splitLua + `
local LK, LA, CK, CA = split(KEYS, ARGV)
local reg = ctr_release(CK, CA)
quota_give(LK, LA)
return reg
`)

// releaseKeepWithQuotaScript and releaseKeepWithLedgerScript are
// releaseWithQuotaScript and releaseWithLedgerScript with
// ctr_release_keep for ctr_release (within.go).
var (
	releaseKeepWithQuotaScript = redis.NewScript(directLua + chargeLua + quotaGiveLua + ctrReleaseLua + ctrReleaseKeepLua + splitLua + `
local LK, LA, CK, CA = split(KEYS, ARGV)
local reg = ctr_release_keep(CK, CA)
quota_give(LK, LA)
return reg
`)
	releaseKeepWithLedgerScript = redis.NewScript(directLua + chargeLua + ledgerSettleLua + ctrReleaseLua + ctrReleaseKeepLua + splitLua + `
local LK, LA, CK, CA = split(KEYS, ARGV)
local reg = ctr_release_keep(CK, CA)
ledger_settle(LK, LA)
return reg
`)
)

// releaseLeased releases a request admitted (in part) from the quotas,
// in one script through the pipe: the counters' side and the ledger's,
// each from its quotas or in Redis as admitted; not waited for when both
// came from quotas. c.gate is held (shared).
func (s *Admissions) releaseLeased(a *admission.Admission, e admission.End, gpuHours float64) {
	c, l := s.c, s.l
	cg, lg := a.Leased>>32, a.Leased&(1<<32-1)
	a.Leased = 0
	var ck []string
	var ca []any
	counted, keep := true, false
	if cg != 0 {
		ck, ca, counted = c.releaseLeasedCall(a.Chain, a.Placement, cg, gpuHours, e.At)
		keep = true
		gpuHours = 0 // charged at the next beat: not again if the script fails
	} else if c.releaseLocal(a.Chain, a.Placement, gpuHours, e.At) {
		counted = false
	} else {
		ck, ca = c.releaseCall(a.Chain, a.Placement, gpuHours, e.At)
	}
	var lk []string
	var la []any
	script, alone := releaseScript, (*redis.Script)(nil)
	if keep {
		script = releaseKeepScript
	}
	switch r := a.Budget; {
	case r == nil:
	case lg != 0:
		var ok bool
		if lk, la, ok = l.q.settleCall(e.At, r, lg, e.GPUHours, e.Tokens); ok {
			script, alone = releaseWithQuotaScript, quotaGiveScript
			if keep {
				script = releaseKeepWithQuotaScript
			}
		}
	case a.BudgetLocal:
		l.Settle(e.At, r, true, e.GPUHours, e.Tokens)
	default:
		var ok bool
		if lk, la, ok = l.settleCall(e.At, r, e.GPUHours, e.Tokens); ok {
			script, alone = releaseWithLedgerScript, settleScript
			if keep {
				script = releaseKeepWithLedgerScript
			}
		}
	}
	// Waited for unless both sides came from quotas: far from every
	// limit, a request another replica admits meanwhile finds room
	// without what this one frees.
	wait := cg == 0 || alone != nil && lg == 0
	ledgerFailed := func(err error) {
		l.mu.Lock()
		l.pending = append(l.pending, pendingSettle{script: alone, keys: lk, args: la})
		l.mu.Unlock()
		l.fail(fmt.Errorf("redis release: %w", err))
	}
	switch {
	case !counted && alone == nil:
	case !counted: // the ledger's side alone
		l.p.call(alone, lk, la, l.timeout, wait, func(cmd *redis.Cmd) {
			if err := cmd.Err(); err != nil {
				ledgerFailed(err)
			}
		})
	default:
		keys, args := ck, ca
		if alone != nil {
			keys, args = joined(lk, la, ck, ca)
		}
		ch, at := a.Chain, e.At
		c.p.call(script, keys, args, c.timeout, wait, func(cmd *redis.Cmd) {
			reg, err := cmd.Int64()
			if err == nil && reg >= 2 {
				c.wq.kept(ch, cg)
				reg -= 2
			}
			c.released(reg, err, ch, gpuHours, at)
			if err != nil && alone != nil {
				ledgerFailed(err)
			}
		})
	}
}
