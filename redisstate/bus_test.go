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
