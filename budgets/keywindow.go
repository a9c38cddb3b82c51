package budgets

import "time"

// Window returns what the key's 60 s windows in this ledger hold at now:
// the requests and the tokens counted against its RPM and TPM limits.
// With several replicas sharing a ledger elsewhere (Redis), it is this
// ledger's part.
func (k *KeyState) Window(now time.Time) (requests, tokens int64) {
	sec := now.Unix()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reqs.advance(sec)
	k.toks.advance(sec)
	return k.reqs.total, k.toks.total
}

// StatusWhere returns the live figures of the budgets in force whose
// scope match accepts (Status, filtered before the figures are read).
func (t *Table) StatusWhere(match func(Scope) bool) []Status {
	var out []Status
	for _, b := range t.budgets {
		if !match(b.Scope) {
			continue
		}
		s := t.slots[b.Scope]
		s.mu.Lock()
		st := Status{Budget: b, PeriodStart: s.start, Increase: s.incr, EffectiveLimit: s.maxCost + s.incr}
		s.mu.Unlock()
		st.Spent, st.Held = gpuHours(s.spent.Load()), gpuHours(s.held.Load())
		out = append(out, st)
	}
	return out
}
