package redisstate

import (
	"context"
	"testing"
	"time"
)

// nopReceiver applies nothing.
type nopReceiver struct{}

func (nopReceiver) ForgetKey([32]byte)                 {}
func (nopReceiver) AdminChanged(context.Context) error { return nil }
func (nopReceiver) TreeChanged(context.Context) error  { return nil }
func (nopReceiver) Resync(context.Context) error       { return nil }
func (nopReceiver) Reclaim(string, string, int)        {}

// TestBusListenEnds: when its context ends, Listen's subscription ends
// (done is closed) while it waits for a message, so a server that waits
// for it at shutdown exits.
func TestBusListenEnds(t *testing.T) {
	rdb, prefix := testRedis(t)
	b := NewBus(rdb, prefix+"invalidate", time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := b.Listen(ctx, nopReceiver{})
	time.Sleep(100 * time.Millisecond) // subscribed and waiting (not required: it must end either way)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Listen did not end with its context")
	}
}

func TestParseReclaim(t *testing.T) {
	for _, tc := range []struct {
		payload   string
		pool, org string
		prio      int
		ok        bool
	}{
		{"reclaim\x1fgpu\x1f0\x1fetabA", "gpu", "etabA", 0, true},
		{"reclaim\x1fgpu\x1f1\x1fan org\x1fwith a separator", "gpu", "an org\x1fwith a separator", 1, true},
		{"reclaim\x1fgpu\x1fx\x1fetabA", "", "", 0, false},
		{"reclaim\x1fgpu", "", "", 0, false},
		{"admin", "", "", 0, false},
	} {
		pool, org, prio, ok := parseReclaim(tc.payload)
		if ok != tc.ok || pool != tc.pool || org != tc.org || prio != tc.prio {
			t.Errorf("parseReclaim(%q) = %q %q %d %v", tc.payload, pool, org, prio, ok)
		}
	}
}
