package redisstate

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// capacities are the pool capacities TestShareSumsToCapacity divides:
// fewer slots than replicas, and more.
var capacities = []int{1, 2, 7, 16}

// parts returns each replica's part of capacity (0 while not settled).
func parts(reps []*Counters, capacity int) []int {
	out := make([]int, len(reps))
	for i, c := range reps {
		out[i], _, _ = c.Share(capacity)
	}
	return out
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// atMost fails when the replicas' parts of some capacity sum beyond it.
func atMost(t *testing.T, step string, reps []*Counters) {
	t.Helper()
	for _, capa := range capacities {
		if p := parts(reps, capa); sum(p) > capa {
			t.Fatalf("%s: parts of %d are %v, beyond it", step, capa, p)
		}
	}
}

// TestShareSumsToCapacity: three replicas of one pool on a Redis of the
// test's own, started one after the other. At every beat the parts of
// each capacity never sum beyond it (a joiner gets 0 until the others
// have counted it); once all have beaten they sum exactly to it, by name
// order (capacity 1: only the first replica has a slot; 2: the first
// two). A replica that leaves gives its part to the others; Redis away
// keeps the last parts; a replica that never reached Redis counts as
// alone.
func TestShareSumsToCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	r := startOwnRedis(t, "")
	rdb := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	o := func(name string) Options {
		return Options{Prefix: "t:", Beat: 50 * time.Millisecond, Timeout: 100 * time.Millisecond, Replica: name}
	}
	// names out of start order: the rank is by name, not by arrival
	reps := []*Counters{New(rdb, "p", time.Hour, o("b")), New(rdb, "p", time.Hour, o("c")), New(rdb, "p", time.Hour, o("a"))}
	beat := func(c *Counters) {
		time.Sleep(3 * time.Millisecond) // beats in distinct milliseconds of Redis's clock
		c.Beat()
	}

	if part, settled, _ := reps[0].Share(4); part != 0 || settled {
		t.Fatalf("before the first beat: part %d, settled %v; want 0, not settled", part, settled)
	}
	beat(reps[0])
	if part, settled, _ := reps[0].Share(4); part != 4 || !settled {
		t.Fatalf("alone: part %d, settled %v; want 4, settled", part, settled)
	}
	_, _, changed := reps[0].Share(4)
	beat(reps[1])
	if part, settled, _ := reps[1].Share(4); part != 0 || settled {
		t.Fatalf("joiner before the others beat: part %d, settled %v; want 0, not settled", part, settled)
	}
	atMost(t, "b alone, c joined", reps)
	beat(reps[2])
	atMost(t, "a joined", reps)
	beat(reps[0])
	select {
	case <-changed:
	default:
		t.Fatal("b's part changed (2 replicas more) and its channel is still open")
	}
	atMost(t, "b beat again", reps)
	for round := range 2 {
		for _, c := range reps {
			beat(c)
			atMost(t, "round", reps)
		}
		if round == 0 {
			continue
		}
		for _, capa := range capacities {
			p := parts(reps, capa) // b, c, a
			if sum(p) != capa {
				t.Fatalf("parts of %d are %v, sum %d", capa, p, sum(p))
			}
			want := []int{shareOf(capa, 3, 1), shareOf(capa, 3, 2), shareOf(capa, 3, 0)}
			for i := range p {
				if p[i] != want[i] {
					t.Fatalf("parts of %d are %v, want %v (by name: a, b, c)", capa, p, want)
				}
			}
		}
	}
	if p := parts(reps, 1); p[2] != 1 {
		t.Fatalf("capacity 1: parts %v, want the slot at a (first by name)", p)
	}
	if p := parts(reps, 2); p[1] != 0 {
		t.Fatalf("capacity 2: parts %v, want none at c (last by name)", p)
	}

	// a leaves cleanly: b and c share everything at their next beats
	reps[2].leave()
	beat(reps[0])
	atMost(t, "after a left, b beat", reps[:2])
	beat(reps[1])
	for _, capa := range capacities {
		if p := parts(reps[:2], capa); sum(p) != capa || p[0] < p[1] {
			t.Fatalf("2 replicas: parts of %d are %v", capa, p)
		}
	}

	// Redis away: the last parts hold; a replica that never reached it
	// counts as alone, or as one of Options.Replicas
	before := parts(reps[:2], 7)
	r.kill()
	lone := New(rdb, "p", time.Hour, o("d"))
	for _, c := range append(reps[:2], lone) {
		c.Beat()
	}
	if p := parts(reps[:2], 7); p[0] != before[0] || p[1] != before[1] {
		t.Fatalf("Redis away: parts %v, want the last seen %v", p, before)
	}
	if part, settled, _ := lone.Share(7); part != 7 || !settled {
		t.Fatalf("never reached Redis: part %d, settled %v; want all 7, settled", part, settled)
	}
	// told there are 3 replicas (redis { replicas = 3 }): a third, rounded
	// down, so that three such never send more than the capacity
	o3 := o("e")
	o3.Replicas = 3
	third := New(rdb, "p", time.Hour, o3)
	third.Beat()
	if part, settled, _ := third.Share(7); part != 2 || !settled {
		t.Fatalf("never reached Redis, 3 replicas: part %d, settled %v; want 2 (7/3), settled", part, settled)
	}
}

// TestShareOf: the parts of every capacity up to 40 among up to 9
// replicas sum to it, and differ by at most one; with one replica more,
// no rank's part grows (neither at the same rank nor one further), so
// replicas whose views are one beat apart never sum beyond capacity.
func TestShareOf(t *testing.T) {
	for capa := range 41 {
		for n := 1; n <= 9; n++ {
			total, lo, hi := 0, capa, 0
			for r := range n {
				p := shareOf(capa, n, r)
				total += p
				lo, hi = min(lo, p), max(hi, p)
				if q := shareOf(capa, n+1, r); q > p {
					t.Fatalf("capacity %d: rank %d gets %d of %d replicas, %d of %d", capa, r, p, n, q, n+1)
				}
				if q := shareOf(capa, n+1, r+1); q > p {
					t.Fatalf("capacity %d: rank %d gets %d of %d replicas, rank %d %d of %d", capa, r, p, n, r+1, q, n+1)
				}
			}
			if total != capa || hi-lo > 1 {
				t.Fatalf("capacity %d among %d: sum %d, parts %d..%d", capa, n, total, lo, hi)
			}
		}
	}
}
