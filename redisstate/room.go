package redisstate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The borrowers' room (admission.BorrowRoom): on a pool whose engines
// queue by priority and whose gateway takes borrowed slots back, a
// request within its organisation's reservation (a top request) takes a
// slot at once on whatever replica it reaches, and a borrower waits for
// one in its replica's queue. With a fixed part of the capacity per
// replica (Share), a replica whose top requests fill its part while
// another's leave room in theirs lets the other send borrowers beyond the
// capacity: the engine holds them and runs them whenever it can, and a
// slot taken back from one of them for an owner only went to the next.
// Measured with ten institutions saturating 40 slots through three
// replicas: 44.3 requests in flight on average (54 at most), 7.5 of them
// borrowers, against at most 40 through one gateway.
//
// So the borrowers of all replicas together get what the top requests of
// all replicas leave of the capacity, as one gateway's would:
// free = capacity − Σ t_j (t_j: replica j's top requests). Replica j's
// part p_j (Share) less t_j is its slack s_j = max(0, p_j − t_j); it
// wants w_j = min(s_j, b_j) for its b_j borrowers. When free ≤ Σ w_j,
// each gets free in proportion to w_j; else each gets w_j and the rest in
// proportion to s_j − w_j (largest remainders, ties to the lower rank):
// every replica computes the same division from the same counts, and the
// parts sum to free. A replica reads the other replicas' counts (in
// their replica hashes: in flight less borrowing, and borrowing) every
// roomPoll while it has borrowers, and takes its own as they are now. A
// room that shrinks below the borrowers a replica holds makes it take
// slots back from its own (the gateway's queue): after an owner's arrival
// on another replica, within roomPoll and a round trip.
//
// When the counts are older than roomStale (Redis slow, or the replica had
// no borrowers until now), while Redis is away, and for a replica not
// among the live ones, the room is the replica's part less its top
// requests: what a fixed part gives.

// roomPoll is how often a replica with borrowers reads the other replicas'
// top counts; roomStale how old they may be to be used; roomIdle how long
// after its last borrower a replica goes on reading them.
const (
	roomPoll  = 10 * time.Millisecond
	roomStale = 100 * time.Millisecond
	roomIdle  = time.Second
)

// roomState is what the last read of the top counts saw.
type roomState struct {
	me      int       // this replica's rank among the live ones (−1: not live, or never read)
	counts  []holding // per live replica, by rank (names in byte order)
	changed chan struct{}
}

// holding is what a replica holds of a pool: its top requests and its
// borrowers (holding or waiting for a slot).
type holding struct{ tops, borrowers int64 }

// roomScript reads each live replica's top requests in flight and its
// borrowers (in flight or waiting for a slot). KEYS: leases. ARGV: the
// prefix of the replica hashes. It returns name, tops, borrowers triples.
var roomScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local out = {}
for _, id in ipairs(live) do
  local v = redis.call('HMGET', ARGV[1] .. id, 'inflight', 'borrowing')
  local b = tonumber(v[2] or '0')
  out[#out + 1] = id
  out[#out + 1] = tonumber(v[1] or '0') - b
  out[#out + 1] = b
end
return out
`)

// Room implements admission.BorrowRoom: this replica's part of the slots
// of capacity that the top requests of every live replica leave to
// borrowers (tops and borrowers: this replica's, counted by the caller),
// and a channel closed when it may have changed (new counts read, or this
// replica's part of the capacity changed). The other replicas' counts are
// read only while this replica has borrowers. Room reads memory only.
func (c *Counters) Room(capacity, tops, borrowers int) (room int, changed <-chan struct{}) {
	rs := c.room.Load()
	now := time.Now().UnixNano()
	busy := borrowers > 0
	if busy {
		c.roomWant.Store(now)
	}
	fresh := now-c.roomAt.Load() <= roomStale.Nanoseconds()
	if busy && !fresh {
		select {
		case c.roomWake <- struct{}{}:
		default:
		}
	}
	s := c.share.Load()
	if !s.settled {
		return 0, rs.changed
	}
	if !fresh || rs.me < 0 || c.down.Load() {
		return max(0, shareOf(capacity, s.n, s.rank)-tops), rs.changed
	}
	return roomOf(capacity, rs.counts, rs.me, holding{int64(tops), int64(borrowers)}), rs.changed
}

// roomOf is the room of the me-th of the replicas counts (mine for its
// own), of capacity: see the top of this file.
func roomOf(capacity int, counts []holding, me int, mine holding) int {
	n := len(counts)
	at := func(j int) holding {
		if j == me {
			return mine
		}
		return counts[j]
	}
	slack := func(j int) int64 { return max(int64(shareOf(capacity, n, j))-at(j).tops, 0) }
	want := func(j int) int64 { return min(slack(j), at(j).borrowers) }
	var sum, wanted, free int64 = 0, 0, int64(capacity)
	for j := range n {
		sum += slack(j)
		wanted += want(j)
		free -= at(j).tops
	}
	if free <= 0 {
		return 0
	}
	if free <= wanted {
		return int(hamilton(free, n, me, want))
	}
	return int(want(me) + hamilton(free-wanted, n, me, func(j int) int64 { return slack(j) - want(j) }))
}

// hamilton is the me-th of n parts of total in proportion to weight, by
// the largest remainder (ties to the lower index): the parts sum to total
// when the weights do not sum to 0.
func hamilton(total int64, n, me int, weight func(j int) int64) int64 {
	var sum int64
	for j := range n {
		sum += weight(j)
	}
	if sum <= 0 {
		return 0
	}
	w := weight(me)
	if w <= 0 {
		return 0
	}
	part, rem := w*total/sum, w*total%sum
	left, ahead := total, int64(0)
	for j := range n {
		wj := weight(j)
		left -= wj * total / sum
		if r := wj * total % sum; wj > 0 && j != me && (r > rem || r == rem && j < me) {
			ahead++
		}
	}
	if ahead < left {
		part++
	}
	return part
}

// pollRoom reads the live replicas' top counts every roomPoll while this
// replica has borrowers (Room says so), until ctx ends.
func (c *Counters) pollRoom(ctx context.Context) {
	t := time.NewTimer(roomPoll)
	defer t.Stop()
	for {
		if time.Now().UnixNano()-c.roomWant.Load() > roomIdle.Nanoseconds() {
			select {
			case <-ctx.Done():
				return
			case <-c.roomWake:
			}
		}
		if !c.down.Load() {
			// a failed read leaves the counts to age: past roomStale,
			// Room gives the fixed part's room (the admissions' own
			// calls find Redis away, if it is)
			_ = c.readRoom(ctx)
		}
		t.Reset(roomPoll)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readRoom reads the live replicas' top counts once, and tells Room's
// callers when they changed.
func (c *Counters) readRoom(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	prefix := c.mine[:len(c.mine)-len(c.replica)]
	v, err := roomScript.Run(ctx, c.rdb, []string{c.live}, prefix).Slice()
	if err != nil {
		return fmt.Errorf("redis room: %w", err)
	}
	type count struct {
		name string
		holding
	}
	counts := make([]count, 0, len(v)/3)
	for i := 0; i+2 < len(v); i += 3 {
		name, _ := v[i].(string)
		top, _ := v[i+1].(int64)
		b, _ := v[i+2].(int64)
		counts = append(counts, count{name, holding{max(top, 0), max(b, 0)}})
	}
	slices.SortFunc(counts, func(a, b count) int { return strings.Compare(a.name, b.name) })
	next := &roomState{me: -1, counts: make([]holding, len(counts))}
	for i, x := range counts {
		next.counts[i] = x.holding
		if x.name == c.replica {
			next.me = i
		}
	}
	c.roomMu.Lock()
	defer c.roomMu.Unlock()
	old := c.room.Load()
	stale := time.Now().UnixNano()-c.roomAt.Load() > roomStale.Nanoseconds()
	c.roomAt.Store(time.Now().UnixNano())
	if !stale && old.me == next.me && slices.Equal(old.counts, next.counts) {
		return nil
	}
	next.changed = make(chan struct{})
	c.room.Store(next)
	close(old.changed)
	return nil
}

// roomChanged wakes Room's callers: this replica's part of the capacity
// changed.
func (c *Counters) roomChanged() {
	c.roomMu.Lock()
	defer c.roomMu.Unlock()
	old := c.room.Load()
	next := *old
	next.changed = make(chan struct{})
	c.room.Store(&next)
	close(old.changed)
}
