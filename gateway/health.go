package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

// healthChecker probes every backend's health path on an interval, each
// backend on its own schedule: a probe that hangs (up to cfg.Timeout)
// delays the next probe of its own backend only.
type healthChecker struct {
	userAgent string
	backends  []*backend
	client    func(b *backend) http.RoundTripper
	cfg       config.Health
	now       func() time.Time
	onChange  func(b *backend, healthy bool)
}

// run probes until ctx ends, one goroutine per backend, and returns once
// every probe has stopped. A failed probe marks the engine down for the
// cooldown; a successful one clears a mark left by passive failures.
func (h *healthChecker) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range h.backends {
		wg.Go(func() { h.loop(ctx, b) })
	}
	wg.Wait()
}

// loop probes b at once, then every interval until ctx ends. Ticks that
// fall while a probe is running are skipped, not queued.
func (h *healthChecker) loop(ctx context.Context, b *backend) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		h.probe(ctx, b)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *healthChecker) probe(ctx context.Context, b *backend) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+h.cfg.Path, nil)
	if err != nil {
		return
	}
	req.Header.Set("User-Agent", h.userAgent)
	resp, err := h.client(b).RoundTrip(req)
	ok := err == nil && resp.StatusCode == http.StatusOK
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return // shutting down
	}
	now := h.now()
	was := b.up(now)
	if ok {
		b.downUntil.Store(0)
	} else {
		b.markDown(now, h.cfg.Cooldown)
	}
	if h.onChange != nil && was != ok {
		h.onChange(b, ok)
	}
}
