package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/autocap"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
)

// autoCapacity adapts the capacity of a pool with capacity = "auto" from
// its engines' metrics (package autocap holds the law; this file reads the
// engines and applies C). With replicas sharing Redis one of them decides
// under a lease and the others follow (admission.CapacityAgreement).
type autoCapacity struct {
	cfg   config.AutoCapacity
	ctl   *autocap.Controller // stepped by the pool's capacity loop only
	agree admission.CapacityAgreement

	scrapeTimeout time.Duration // of one engine's metrics

	leads     atomic.Bool
	last      atomic.Int32 // the last autocap.Decision
	decisions [autocap.Shrink + 1]atomic.Int64
}

func newAutoCapacity(cfg config.AutoCapacity, agree admission.CapacityAgreement, scrapeTimeout time.Duration, now time.Time) *autoCapacity {
	if cfg.Interval <= 0 { // a Config built in code, not parsed
		cfg.Interval = config.DefaultCapacityInterval
	}
	if scrapeTimeout <= 0 || scrapeTimeout > cfg.Interval {
		scrapeTimeout = cfg.Interval
	}
	p := autocap.Params{Min: cfg.Min, Max: cfg.Max, KVTarget: cfg.KVTarget, Hold: cfg.Hold,
		Stale: 3*cfg.Interval + scrapeTimeout}
	a := &autoCapacity{cfg: cfg, ctl: autocap.New(p, cfg.Min, now), agree: agree, scrapeTimeout: scrapeTimeout}
	a.leads.Store(agree == nil)
	return a
}

// headroom is the headroom of the pool at capacity c: the one configured,
// or a quarter of c; none without reclaim.
func (a *autoCapacity) headroom(c int, r engine.Reclaim) int {
	switch {
	case r == engine.ReclaimNone:
		return 0
	case a.cfg.Headroom >= 0:
		return min(a.cfg.Headroom, c-1)
	default:
		return config.DefaultHeadroom(c)
	}
}

// metricsPath is where vLLM and llama-server (--metrics) expose their
// Prometheus metrics.
const metricsPath = "/metrics"

// maxMetricsBytes bounds what is read of an engine's /metrics.
const maxMetricsBytes = 4 << 20

// capacityLoop runs the capacity loop of every pool with capacity =
// "auto" until ctx ends.
func (g *Gateway) capacityLoop(ctx context.Context) {
	var wg sync.WaitGroup
	for _, pl := range g.poolOrder {
		if pl.auto != nil {
			wg.Go(func() { g.adaptCapacity(ctx, pl) })
		}
	}
	wg.Wait()
}

// adaptCapacity reads the pool's engines every interval, steps its
// controller, agrees with the other replicas and applies C.
func (g *Gateway) adaptCapacity(ctx context.Context, pl *pool) {
	t := time.NewTicker(pl.auto.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.capacityTick(ctx, pl)
	}
}

// capacityTick is one step of a pool's capacity loop.
func (g *Gateway) capacityTick(ctx context.Context, pl *pool) {
	a := pl.auto
	s := g.sampleEngines(ctx, pl, a.scrapeTimeout)
	if ctx.Err() != nil {
		return
	}
	now := g.now()
	c, why := a.ctl.Step(s, now)
	a.decisions[why].Add(1)
	a.last.Store(int32(why))
	if a.agree != nil {
		agreed, leads, err := a.agree.Agree(ctx, c, 3*a.cfg.Interval)
		if err != nil {
			g.log.Debug("capacity agreement failed: C holds", "pool", pl.name, "err", err)
			a.ctl.Set(pl.fs.Capacity(), now) // what it decided alone is not applied
			return
		}
		a.leads.Store(leads)
		if agreed != c {
			a.ctl.Set(agreed, now)
			c = a.ctl.C()
		}
	}
	g.applyCapacity(pl, c, why)
}

// Capacities are the capacities of the pools with capacity = "auto", by
// name: what the next generation starts from (Options.Capacities).
func (g *Gateway) Capacities() map[string]int {
	m := map[string]int{}
	for _, pl := range g.poolOrder {
		if pl.auto != nil {
			m[pl.name] = pl.fs.Capacity()
		}
	}
	return m
}

// carryCapacity starts an auto pool at the capacity a previous generation
// had reached, if any (clamped to the bounds).
func (g *Gateway) carryCapacity(pl *pool, capacities map[string]int) {
	if c, ok := capacities[pl.name]; ok {
		pl.auto.ctl.Set(c, g.started)
		g.applyCapacity(pl, pl.auto.ctl.C(), autocap.Steady)
	}
}

// applyCapacity makes c the pool's capacity: reservations and caps
// apportioned again, the gateway queue's total and headroom.
func (g *Gateway) applyCapacity(pl *pool, c int, why autocap.Decision) {
	old := pl.fs.Capacity()
	if c == old {
		return
	}
	pl.fs.SetCapacity(c, g.now())
	if pl.queue != nil {
		pl.queue.setTotal(c, pl.auto.headroom(c, pl.reclaim))
	}
	g.log.Info("pool capacity changed", "pool", pl.name, "from", old, "to", c, "why", why.String(), "leads", pl.auto.leads.Load())
}

// metricsTarget is an engine of a pool whose metrics are read, with the
// key of one of its upstreams (llama-server guards /metrics with it).
type metricsTarget struct {
	b    *backend
	auth []string
}

// metricsTargets are the pool's engines in rotation, configured and
// runtime, each once.
func (g *Gateway) metricsTargets(pl *pool, now time.Time) []metricsTarget {
	var ts []metricsTarget
	seen := map[*backend]int{}
	for _, rt := range g.routes {
		if rt.pool != pl {
			continue
		}
		for _, u := range rt.upstreams() {
			if !u.b.up(now) {
				continue
			}
			if i, ok := seen[u.b]; ok {
				if ts[i].auth == nil {
					ts[i].auth = u.authHdr
				}
				continue
			}
			seen[u.b] = len(ts)
			ts = append(ts, metricsTarget{b: u.b, auth: u.authHdr})
		}
	}
	return ts
}

// sampleEngines reads the metrics of the pool's engines in rotation, at
// once, each within timeout. An engine that does not answer, or answers
// without the metrics, makes the sample incomplete: C holds.
func (g *Gateway) sampleEngines(ctx context.Context, pl *pool, timeout time.Duration) autocap.Sample {
	at := g.now()
	ts := g.metricsTargets(pl, at)
	engines := make([]autocap.Engine, len(ts))
	var wg sync.WaitGroup
	inflight := 0
	for i, t := range ts {
		inflight += int(t.b.inflight.Load())
		wg.Go(func() { engines[i] = g.scrapeEngine(ctx, pl, t, timeout) })
	}
	wg.Wait()
	return autocap.Pool(engines, at, inflight)
}

func (g *Gateway) scrapeEngine(ctx context.Context, pl *pool, t metricsTarget, timeout time.Duration) autocap.Engine {
	unknown := autocap.UnknownEngine()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.b.base+metricsPath, nil)
	if err != nil {
		return unknown
	}
	req.Header.Set("User-Agent", g.userAgent[0])
	if t.auth != nil {
		req.Header["Authorization"] = t.auth
	}
	resp, err := pl.transport.RoundTrip(req)
	if err != nil {
		return unknown
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return unknown
	}
	e, err := parseEngineMetrics(io.LimitReader(resp.Body, maxMetricsBytes), pl.engine.Metrics)
	if err != nil {
		return unknown
	}
	return e
}

// setTotal changes the pool's capacity and headroom (capacity = "auto"):
// this replica's part follows, and waiters are dispatched if it grew.
func (q *queue) setTotal(total, headroom int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.total, q.headroom = total, headroom
	if q.share == nil {
		q.capacity, q.part, q.room = total, total, headroom
	} else {
		q.follow()
	}
	q.dispatch()
}

// capacityCollector exports the capacity loop of every auto pool: the
// decisions taken and whether this replica leads.
type capacityCollector struct {
	g                 *Gateway
	decisions, leader *prometheus.Desc
}

func newCapacityCollector(g *Gateway) *capacityCollector {
	return &capacityCollector{g: g,
		decisions: prometheus.NewDesc("llmflow_pool_capacity_decisions_total",
			"Steps of the capacity loop of a pool with capacity = \"auto\", by decision (unknown: stale or incomplete engine metrics, C held; holding; steady; grow; shrink).",
			[]string{"pool", "decision"}, nil),
		leader: prometheus.NewDesc("llmflow_pool_capacity_leader",
			"1 when this replica decides the capacity of the auto pool (alone, or holding the Redis lease).", []string{"pool"}, nil),
	}
}

func (c *capacityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.decisions
	ch <- c.leader
}

func (c *capacityCollector) Collect(ch chan<- prometheus.Metric) {
	for _, pl := range c.g.poolOrder {
		a := pl.auto
		if a == nil {
			continue
		}
		for d := range a.decisions {
			ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(a.decisions[d].Load()), pl.name, autocap.Decision(d).String())
		}
		l := 0.0
		if a.leads.Load() {
			l = 1
		}
		ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, l, pl.name)
	}
}

// autoMax is the largest capacity of an auto pool; 0 for a fixed one.
func autoMax(a *config.AutoCapacity) int {
	if a == nil {
		return 0
	}
	return a.Max
}
