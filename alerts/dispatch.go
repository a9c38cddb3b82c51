package alerts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow"
)

// Sender delivers alerts on one channel. Send must return once ctx is
// done, and its errors must not contain secrets.
type Sender interface {
	Channel() string
	Send(ctx context.Context, a Alert) error
}

// Backoff is the wait before the next attempt after a failure:
// Base·2^(attempts−1), at most Max, spread by ±Jitter (a fraction) so that
// gateways retrying the same relay do not retry in step.
type Backoff struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64 // 0..1
}

// DefaultBackoff waits 10s, 20s, 40s, … up to an hour, ±20 %.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: time.Hour, Jitter: 0.2}

// Next returns the wait after the attempts-th failed attempt (1 for the
// first), with r in [0, 1) choosing the jitter.
func (b Backoff) Next(attempts int, r float64) time.Duration {
	d := b.Base
	for i := 1; i < attempts && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	d = time.Duration(float64(d) * (1 + b.Jitter*(2*r-1)))
	return max(min(d, b.Max), time.Millisecond)
}

// Defaults of the zero fields of Options.
const (
	DefaultTimeout  = 10 * time.Second
	DefaultInterval = 5 * time.Second
	DefaultBatch    = 16
)

// Options configure a Dispatcher.
type Options struct {
	Store   Store
	Senders []Sender // one per channel
	Metrics *Metrics // nil: none
	Log     *slog.Logger
	// Now is the clock (default time.Now); Rand returns numbers in
	// [0, 1) for the jitter (default math/rand/v2).
	Now  func() time.Time
	Rand func() float64
	// Owner names this gateway in lease tokens (default host name and
	// process ID); a random suffix makes every claim's token unique.
	Owner string
	// Timeout bounds one delivery attempt (default DefaultTimeout).
	Timeout time.Duration
	// Lease is how long a claim holds its rows: a crashed gateway's rows
	// wait this long. Default 2 × Timeout + 30s; at least Timeout + 5s,
	// so that an attempt ends well before another gateway may take the
	// row.
	Lease    time.Duration
	Backoff  Backoff       // default DefaultBackoff
	Batch    int           // rows claimed per pass, sent concurrently; default DefaultBatch
	Interval time.Duration // between passes in Run; default DefaultInterval
}

// Dispatcher delivers the outbox's alerts. Create it with NewDispatcher;
// call RunOnce for one pass or Run until its context ends.
type Dispatcher struct {
	o        Options
	senders  map[string]Sender
	channels []string
	wake     chan struct{}
}

// NewDispatcher checks o and fills in its defaults.
func NewDispatcher(o Options) (*Dispatcher, error) {
	if o.Store == nil {
		return nil, errors.New("alerts dispatcher: no store")
	}
	if len(o.Senders) == 0 {
		return nil, errors.New("alerts dispatcher: no sender")
	}
	d := &Dispatcher{senders: map[string]Sender{}, wake: make(chan struct{}, 1)}
	for _, s := range o.Senders {
		ch := s.Channel()
		if _, dup := d.senders[ch]; dup {
			return nil, fmt.Errorf("alerts dispatcher: two senders for channel %q", ch)
		}
		d.senders[ch] = s
		d.channels = append(d.channels, ch)
	}
	slices.Sort(d.channels)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = mrand.Float64
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Lease <= 0 {
		o.Lease = 2*o.Timeout + 30*time.Second
	}
	if o.Lease < o.Timeout+5*time.Second {
		return nil, fmt.Errorf("alerts dispatcher: lease %v must exceed the timeout %v by at least 5s", o.Lease, o.Timeout)
	}
	if o.Backoff == (Backoff{}) {
		o.Backoff = DefaultBackoff
	}
	if o.Backoff.Base <= 0 || o.Backoff.Max < o.Backoff.Base || o.Backoff.Jitter < 0 || o.Backoff.Jitter > 1 {
		return nil, fmt.Errorf("alerts dispatcher: invalid backoff %+v", o.Backoff)
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	o.Metrics.init(d.channels)
	d.o = o
	return d, nil
}

// Channels returns the channels the dispatcher delivers, sorted: the
// channels to give NewOutbox.
func (d *Dispatcher) Channels() []string { return slices.Clone(d.channels) }

// Wake makes Run start its next pass now. It never blocks.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Pass says what one RunOnce did.
type Pass struct {
	Claimed, Delivered, Failed, LeaseLost int
}

// RunOnce claims the due rows (at most Batch), sends them concurrently,
// each within Timeout, and records each outcome: delivered, or retried
// after the backoff. It then refreshes the pending gauge. Its error is
// the store's (a failed send is not an error of the pass: it is retried).
func (d *Dispatcher) RunOnce(ctx context.Context) (Pass, error) {
	var p Pass
	now := d.o.Now()
	token := d.o.Owner + "-" + randomHex()
	msgs, err := d.o.Store.ClaimOutbox(ctx, llmflow.OutboxClaim{
		Channels: d.channels, Now: now, LeaseUntil: now.Add(d.o.Lease), Token: token, Limit: d.o.Batch})
	if err != nil {
		return p, fmt.Errorf("alerts: %w", err)
	}
	p.Claimed = len(msgs)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, m := range msgs {
		wg.Go(func() {
			outcome, err := d.deliver(ctx, m, token)
			mu.Lock()
			defer mu.Unlock()
			switch outcome {
			case delivered:
				p.Delivered++
			case failed:
				p.Failed++
			case leaseLost:
				p.LeaseLost++
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	d.refreshPending(ctx)
	return p, errors.Join(errs...)
}

type outcome int

const (
	delivered outcome = iota + 1
	failed
	leaseLost
)

// deliver sends one claimed row and records the outcome under token. Its
// error is a store error recording it.
func (d *Dispatcher) deliver(ctx context.Context, m llmflow.OutboxMessage, token string) (outcome, error) {
	log := d.o.Log.With("alert", m.ID, "channel", m.Channel, "attempt", m.Attempts)
	a, err := decodeAlert(m.Payload)
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
		err = d.senders[m.Channel].Send(sctx, a)
		cancel()
	}
	// Record with a context of its own: a send cut short by ctx must
	// still be recorded if the store can be reached.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.o.Timeout)
	defer cancel()
	if err == nil {
		rerr := d.o.Store.CompleteOutbox(rctx, m.ID, m.Channel, token, d.o.Now())
		switch {
		case errors.Is(rerr, llmflow.ErrLeaseLost):
			d.count(func(mt *Metrics) { mt.leaseLost.WithLabelValues(m.Channel).Inc() })
			log.Warn("alert sent, but its lease had passed to another dispatcher: it may be sent twice (receivers can drop it by its ID)")
			return leaseLost, nil
		case rerr != nil:
			// Sent, not recorded: the row is sent again after its lease.
			log.Error("alert sent but not recorded as delivered; it will be sent again", "err", rerr)
			return delivered, fmt.Errorf("alerts: record delivery of %s: %w", m.ID, rerr)
		}
		d.count(func(mt *Metrics) { mt.delivered.WithLabelValues(m.Channel).Inc() })
		log.Info("alert delivered")
		return delivered, nil
	}
	d.count(func(mt *Metrics) { mt.failed.WithLabelValues(m.Channel).Inc() })
	wait := d.o.Backoff.Next(m.Attempts, d.o.Rand())
	log.Warn("alert delivery failed; retrying", "err", err.Error(), "retry_in", wait.String())
	rerr := d.o.Store.RetryOutbox(rctx, m.ID, m.Channel, token, d.o.Now().Add(wait), err.Error())
	switch {
	case errors.Is(rerr, llmflow.ErrLeaseLost):
		return leaseLost, nil
	case rerr != nil:
		return failed, fmt.Errorf("alerts: record failed attempt of %s: %w", m.ID, rerr)
	}
	return failed, nil
}

func (d *Dispatcher) count(f func(*Metrics)) {
	if d.o.Metrics != nil {
		f(d.o.Metrics)
	}
}

func (d *Dispatcher) refreshPending(ctx context.Context) {
	if d.o.Metrics == nil {
		return
	}
	p, err := d.o.Store.PendingOutbox(ctx)
	if err != nil {
		return
	}
	for _, ch := range d.channels {
		d.o.Metrics.pending.WithLabelValues(ch).Set(float64(p[ch]))
	}
}

// Run makes a pass every Interval, or at once after Wake, until ctx ends;
// it then returns nil. A pass that fails is logged and the next one
// tries again.
func (d *Dispatcher) Run(ctx context.Context) error {
	t := time.NewTicker(d.o.Interval)
	defer t.Stop()
	for {
		for {
			p, err := d.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				d.o.Log.Error("alerts: dispatcher pass failed", "err", err)
			}
			// A full batch may mean more are due: go on at once.
			if err != nil || p.Claimed < d.o.Batch || ctx.Err() != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.wake:
		}
	}
}

func randomHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
