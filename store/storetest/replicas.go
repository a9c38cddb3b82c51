package storetest

import (
	"context"
	"testing"
	"time"
)

// ReplicaStore keeps the heartbeats of the gateways sharing a store.
type ReplicaStore interface {
	Heartbeat(ctx context.Context, replica string, now time.Time, ttl time.Duration) (int, error)
	Leave(ctx context.Context, replica string) error
}

// RunReplicas is the contract of the replicas' heartbeats: each counts
// while its heartbeat lasts, a renewed one is counted once, an expired
// one is forgotten, and a replica that leaves at once.
func RunReplicas(t *testing.T, open func(t *testing.T) ReplicaStore) {
	s := open(t)
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ttl := 10 * time.Second
	beat := func(name string, at time.Time, want int) {
		t.Helper()
		n, err := s.Heartbeat(ctx, name, at, ttl)
		if err != nil || n != want {
			t.Fatalf("heartbeat of %s at %v: %d live (%v), want %d", name, at.Sub(t0), n, err, want)
		}
	}
	beat("a", t0, 1)
	beat("b", t0.Add(time.Second), 2)
	beat("a", t0.Add(2*time.Second), 2) // renewed: counted once
	beat("c", t0.Add(3*time.Second), 3)
	beat("a", t0.Add(12*time.Second), 2) // b's (t0+11s) expired; c's lasts to t0+13s
	if err := s.Leave(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	beat("a", t0.Add(12*time.Second), 1)
	if err := s.Leave(ctx, "nobody"); err != nil {
		t.Fatalf("leave of an unknown replica: %v", err)
	}
	if _, err := s.Heartbeat(ctx, "", t0, ttl); err == nil {
		t.Error("heartbeat without a name: no error")
	}
}
