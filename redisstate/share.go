package redisstate

// shareState is what a beat saw of the live replicas of the pool, from
// which Share divides a capacity.
type shareState struct {
	n, rank int  // live replicas (≥ 1), this one's place among them by name (0-based)
	settled bool // every other live replica counts this one
	changed chan struct{}
}

// Share returns this replica's part of a pool capacity shared by the live
// replicas, so that the parts of all replicas sum exactly to capacity:
// with n live replicas and this one r-th among them (by name), it is
// capacity/n, plus one when r < capacity mod n. When capacity < n, the
// replicas from the capacity-th on get 0: the engine is never sent more
// than capacity, at the price of replicas that send it nothing (their
// queue refuses at once, so that a client retries elsewhere; see the
// gateway's queue) — giving each at least 1 would send the engine up to
// n − capacity requests beyond what one gateway would grant.
//
// A replica that joins (its first beat, or its lease expired and was
// reaped) gets 0, not settled, until every other live replica has beaten
// since: until then, the others still divide capacity without it. Leaving
// needs no such care: a replica that leaves (or dies) stops sending, and
// a part for n replicas is never larger than the same rank's part, or the
// next lower rank's, for n − 1, so views one beat apart never sum beyond
// capacity. Before the first beat the part is 0, not settled; when Redis
// is away, the last seen n and rank hold, and a replica that never
// reached Redis takes capacity / Options.Replicas, rounded down (as the
// fallback's slice does).
//
// changed is closed when the next beat sees other live replicas or
// another rank, or settles: a waiter re-reads its part then. Share only
// reads an atomic (the request path may call it).
func (c *Counters) Share(capacity int) (part int, settled bool, changed <-chan struct{}) {
	s := c.share.Load()
	if !s.settled {
		return 0, false, s.changed
	}
	return shareOf(capacity, s.n, s.rank), true, s.changed
}

// shareOf is the part of capacity of the rank-th of n replicas.
func shareOf(capacity, n, rank int) int {
	part := capacity / n
	if rank < capacity%n {
		part++
	}
	return part
}

// setShare replaces what Share divides by, waking the waiters when it
// changed.
func (c *Counters) setShare(s shareState) {
	c.shareMu.Lock()
	defer c.shareMu.Unlock()
	old := c.share.Load()
	if old.n == s.n && old.rank == s.rank && old.settled == s.settled {
		return
	}
	s.changed = make(chan struct{})
	c.share.Store(&s)
	close(old.changed)
	c.roomChanged()
}

// shareUnseen makes a replica that never reached Redis count as one of
// the replicas it was told there are (Options.Replicas; alone by
// default), its rank unknown: capacity / n, rounded down, so that n such
// replicas never send the engine more than capacity.
func (c *Counters) shareUnseen() {
	if c.joined.Load() == 0 {
		n := int(c.replicas.Load())
		c.setShare(shareState{n: n, rank: n, settled: true})
	}
}
