package redisstate

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/fairshare"
)

// TestRoomOf: the borrowers' room of each replica, from every replica's
// top requests and borrowers.
func TestRoomOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		counts   []holding
		want     []int
	}{
		{"alone", 40, []holding{{30, 20}}, []int{10}},
		{"alone, full", 40, []holding{{41, 20}}, []int{0}},
		{"top requests fill the capacity, unevenly", 40, []holding{{16, 9}, {12, 9}, {12, 9}}, []int{0, 0, 0}},
		{"one over its part: the others make up for it", 40, []holding{{16, 9}, {10, 9}, {10, 9}}, []int{0, 2, 2}},
		{"even", 40, []holding{{10, 5}, {10, 5}, {10, 5}}, []int{4, 3, 3}},
		{"the room goes where borrowers wait", 8, []holding{{6, 0}, {0, 2}, {0, 0}}, []int{0, 2, 0}},
		{"what no borrower wants, in proportion to the slack", 10, []holding{{0, 1}, {0, 0}}, []int{5, 5}},
		{"an owner's slot comes from the other replica's borrower", 4, []holding{{3, 2}, {1, 1}}, []int{0, 0}},
		{"before the owner came", 4, []holding{{0, 2}, {1, 1}}, []int{2, 1}},
		{"ties to the lower rank", 8, []holding{{1, 9}, {1, 9}, {1, 9}, {3, 9}}, []int{1, 1, 0, 0}},
		{"nobody waits", 6, []holding{{1, 0}, {1, 0}, {1, 0}}, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for me := range tc.counts {
				if got := roomOf(tc.capacity, tc.counts, me, tc.counts[me]); got != tc.want[me] {
					t.Errorf("replica %d: room %d, want %d", me, got, tc.want[me])
				}
			}
		})
	}
}

// TestRoomOfSums: on random counts, the rooms of all replicas sum to what
// the top requests leave of the capacity, none beyond its slack, and each
// replica gets what its borrowers want of its slack while the room allows.
func TestRoomOfSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for run := range 5000 {
		n := 1 + rng.IntN(6)
		capacity := rng.IntN(50)
		counts := make([]holding, n)
		free, wanted := int64(capacity), int64(0)
		for j := range counts {
			counts[j] = holding{int64(rng.IntN(capacity/n + 4)), int64(rng.IntN(12))}
			free -= counts[j].tops
		}
		slack := func(j int) int64 { return max(int64(shareOf(capacity, n, j))-counts[j].tops, 0) }
		for j := range counts {
			wanted += min(slack(j), counts[j].borrowers)
		}
		sum := int64(0)
		for j := range counts {
			r := int64(roomOf(capacity, counts, j, counts[j]))
			if r < 0 || r > slack(j) {
				t.Fatalf("run %d: capacity %d, counts %v: replica %d has room %d, slack %d", run, capacity, counts, j, r, slack(j))
			}
			if free >= wanted && r < min(slack(j), counts[j].borrowers) {
				t.Fatalf("run %d: capacity %d, counts %v: replica %d has room %d, less than its borrowers want", run, capacity, counts, j, r)
			}
			sum += r
		}
		if sum != max(free, 0) {
			t.Fatalf("run %d: capacity %d, counts %v: rooms sum to %d, want %d", run, capacity, counts, sum, max(free, 0))
		}
	}
}

// TestRoomFollowsOtherReplicas: a replica with borrowers reads the other
// replica's top requests within a few polls, and its room shrinks (its
// channel closed) when an owner arrives there.
func TestRoomFollowsOtherReplicas(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx, cancel := context.WithCancel(context.Background())
	a := New(rdb, "gpu", time.Hour, Options{Prefix: prefix, Replica: "a"})
	b := New(rdb, "gpu", time.Hour, Options{Prefix: prefix, Replica: "b"})
	done := make(chan struct{}, 2)
	for _, c := range []*Counters{a, b} {
		go func() { c.Run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	owner := fairshare.Chain{N: 1, Slots: []fairshare.Slot{a.Bind("x")}, Res: []int64{10}, Level: []bool{true}}
	waitUntil(t, "both replicas settled, parts 2 and 2 of 4", func() bool {
		pa, sa, _ := a.Share(4)
		pb, sb, _ := b.Share(4)
		return sa && sb && pa == 2 && pb == 2
	})
	if room, _ := b.Room(4, 0, 1); room != 2 {
		t.Fatalf("no counts read yet: room %d, want the part 2", room)
	}
	var held []fairshare.Placement
	for range 3 {
		p := a.Admit(&owner)
		if !p.Top {
			t.Fatalf("owner placed %+v", p)
		}
		held = append(held, p)
	}
	waitUntil(t, "b sees a's 3 top requests: room 1", func() bool { r, _ := b.Room(4, 0, 1); return r == 1 })
	_, changed := b.Room(4, 0, 1)
	held = append(held, a.Admit(&owner))
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("b's room did not change when a's owner arrived")
	}
	waitUntil(t, "b sees a's 4 top requests: room 0", func() bool { r, _ := b.Room(4, 0, 1); return r == 0 })
	for _, p := range held {
		a.Release(&owner, p, 0, time.Now())
	}
	waitUntil(t, "b sees a's owners gone: its slack, 2", func() bool { r, _ := b.Room(4, 0, 3); return r == 2 })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
