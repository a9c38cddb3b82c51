package gatewaytest

import (
	"sync"
	"time"
)

// Clock is a clock tests move by hand (Options.Now = clock.Now).
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at a fixed instant (Unix 1 800 000 000).
func NewClock() *Clock { return &Clock{t: time.Unix(1_800_000_000, 0)} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
