package gateway

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// shareCollector exposes the fair-share state per pool and organisation,
// read from the same report as /admin/fairshare at scrape time: nothing is
// added to the request path.
type shareCollector struct {
	g                                             *Gateway
	inflight, borrowing, fraction, reserved       *prometheus.Desc
	usage, level, queued, capacity, poolBorrowing *prometheus.Desc
}

func newShareCollector(g *Gateway) *shareCollector {
	org := []string{"pool", "org"}
	pool := []string{"pool"}
	return &shareCollector{
		g:         g,
		inflight:  prometheus.NewDesc("llmflow_inflight", "Requests in flight, per pool and organisation.", org, nil),
		borrowing: prometheus.NewDesc("llmflow_inflight_borrowing", "Requests in flight beyond the organisation's reservation (borrowed capacity).", org, nil),
		fraction:  prometheus.NewDesc("llmflow_borrowed_fraction", "Share of the organisation's requests in flight that are borrowing.", org, nil),
		reserved:  prometheus.NewDesc("llmflow_reserved", "Concurrency reserved for the organisation in the pool (Hamilton apportionment of C).", org, nil),
		usage:     prometheus.NewDesc("llmflow_fairshare_usage", "Decayed fair-share usage in GPU-hours.", org, nil),
		level:     prometheus.NewDesc("llmflow_fairshare_level", "Fair Tree level fairshare LF = S/U (+Inf when unused).", org, nil),
		queued:    prometheus.NewDesc("llmflow_queue_length", "Requests waiting in the pool's gateway-side queue.", pool, nil),
		capacity:  prometheus.NewDesc("llmflow_pool_capacity", "The pool's sustainable concurrency C.", pool, nil),
		poolBorrowing: prometheus.NewDesc("llmflow_pool_inflight_borrowing",
			"Requests in flight beyond their organisation's reservation, whole pool.", pool, nil),
	}
}

func (c *shareCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inflight, c.borrowing, c.fraction, c.reserved, c.usage, c.level, c.queued, c.capacity, c.poolBorrowing} {
		ch <- d
	}
}

func (c *shareCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.g.FairshareReport().Pools {
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(c.queued, float64(p.Queued), p.Pool)
		gauge(c.capacity, float64(p.Capacity), p.Pool)
		gauge(c.poolBorrowing, float64(p.Borrowing), p.Pool)
		for _, a := range p.Accounts {
			if a.Depth != 1 || a.User != "" { // organisations only, not root's own user associations
				continue
			}
			gauge(c.inflight, float64(a.InFlight), p.Pool, a.Account)
			gauge(c.borrowing, float64(a.Borrowing), p.Pool, a.Account)
			frac := 0.0
			if a.InFlight > 0 {
				frac = float64(a.Borrowing) / float64(a.InFlight)
			}
			gauge(c.fraction, frac, p.Pool, a.Account)
			gauge(c.reserved, float64(a.Reserved), p.Pool, a.Account)
			gauge(c.usage, a.RawUsage, p.Pool, a.Account)
			if lf := float64(a.LevelFS); !math.IsNaN(lf) {
				gauge(c.level, lf, p.Pool, a.Account)
			}
		}
	}
}
