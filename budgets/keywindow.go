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
