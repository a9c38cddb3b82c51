package budgets

import "time"

// What a ledger other than Mem needs: one shared by several gateways
// (redisstate) keeps the holds and spend in a store of its own, but takes
// the budgets in force, their limits and the spend the store reported
// from a Mem, and records on the Request what it held (SetHeld). Nothing
// here is used on Mem's path.

// UnitsPerGPUHour is the resolution of holds and spend: a ledger counts
// in units of 1/UnitsPerGPUHour GPU-hour, rounding costs up (Units).
const UnitsPerGPUHour = unitsPerGPUHour

// Units converts GPU-hours to counter units, rounding up as Mem does.
func Units(gh float64) int64 { return units(gh) }

// ID returns the identifier of the slot's budget (kind/name/model).
func (s *Slot) ID() string { return s.id }

// Limit returns the effective limit in force (with increases), in units.
func (s *Slot) Limit() int64 { return s.limit.Load() }

// Spent returns the spend of the period this gateway knows of, in units:
// max(the store's figure at the last refresh, base + this gateway's own
// charges). A shared ledger takes it as the floor of the shared figure.
func (s *Slot) Spent() int64 { return s.spent.Load() }

// Period returns the start and end (exclusive, UTC) of the period in
// force.
func (s *Slot) Period() (start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start, s.period.End(s.start)
}

// SetShared records the budget's used (spent and held, in units) in a
// ledger shared with other replicas, as it answered a reservation: a
// slice (SetSlice) that begins while it is away counts from it, so that
// the holds of every replica in flight then count before anything new is
// admitted.
func (s *Slot) SetShared(used int64) { s.shared.Store(used) }

// SetHeld records the units another ledger held on each of r.Slots (what
// Held reports).
func (r *Request) SetHeld(u int64) { r.held = u }

// HeldUnits returns the units held on each of r.Slots.
func (r *Request) HeldUnits() int64 { return r.held }

// Charge counts cost GPU-hours on each of r.Slots as this gateway's
// charge, as Settle does but with nothing held here: another ledger held
// and charged the request in its own store, and the slots keep this
// gateway's figures (listings, the floor of Spent, soft-limit alerts).
func (m *Mem) Charge(now time.Time, r *Request, cost float64) {
	c := units(cost)
	hour := r.Start.UTC().Truncate(time.Hour).Unix()
	for _, s := range r.Slots {
		if x := s.charge(hour, c, 0, now); x != nil && m.OnCrossing != nil {
			m.OnCrossing(*x)
		}
	}
}

// AddInFlight counts d more requests of the key in flight that another
// ledger admitted (its own count is shared), so that this gateway's
// figure (Check, a fallback's max_inflight) includes them.
func (k *KeyState) AddInFlight(d int64) { k.inflight.Add(d) }

// CountWindow counts reqs requests and toks tokens at second sec in the
// key's rate windows, for a request another ledger admitted (its own
// windows are shared), so that this gateway's figures (Check, a
// fallback's slice) and what it announces again (EachWindow) include
// them. A second out of the window is not counted.
func (k *KeyState) CountWindow(sec, reqs, toks int64) {
	k.mu.Lock()
	k.reqs.advance(sec)
	k.toks.advance(sec)
	k.reqs.add(sec, reqs)
	k.toks.add(sec, toks)
	k.mu.Unlock()
}

// EachWindow calls f with the requests and tokens the key's windows count
// at each second of the minute up to now that counts any.
func (k *KeyState) EachWindow(now int64, f func(sec, reqs, toks int64)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reqs.advance(now)
	k.toks.advance(now)
	for sec := k.reqs.last - windowSecs + 1; sec <= k.reqs.last; sec++ {
		var r, t int64
		if b := &k.reqs.buckets[sec%windowSecs]; b.sec == sec {
			r = b.n
		}
		if b := &k.toks.buckets[sec%windowSecs]; b.sec == sec {
			t = b.n
		}
		if r != 0 || t != 0 {
			f(sec, r, t)
		}
	}
}

// EachKey calls f with the state of every key the ledger knows.
func (m *Mem) EachKey(f func(*KeyState)) {
	m.keys.Range(func(_, v any) bool {
		f(v.(*KeyState))
		return true
	})
}

// KeyID returns the ID the key state was made for (Mem.Key).
func (k *KeyState) KeyID() string { return k.id }
