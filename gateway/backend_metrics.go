package gateway

import "github.com/prometheus/client_golang/prometheus"

// backendCollector exports the gauges of every upstream in use,
// configured and runtime (allBackends), read at each scrape: a runtime
// upstream appears when it is added and disappears when it is removed,
// with nothing to register or unregister.
type backendCollector struct {
	g                 *Gateway
	healthy, inflight *prometheus.Desc
}

func newBackendCollector(g *Gateway) *backendCollector {
	labels := []string{"pool", "upstream"}
	return &backendCollector{
		g:        g,
		healthy:  prometheus.NewDesc("llmflow_upstream_healthy", "1 when the upstream is in rotation.", labels, nil),
		inflight: prometheus.NewDesc("llmflow_upstream_inflight", "Requests in flight to the upstream.", labels, nil),
	}
}

func (c *backendCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.healthy
	ch <- c.inflight
}

func (c *backendCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.g.now()
	type label struct{ pool, name string }
	seen := map[label]bool{}
	for _, b := range c.g.allBackends() {
		l := label{b.pool, b.name}
		if seen[l] {
			continue // one engine per name in a pool (checkRuntimeUpstream); never a duplicate series
		}
		seen[l] = true
		up := 0.0
		if b.up(now) {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, up, b.pool, b.name)
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(b.inflight.Load()), b.pool, b.name)
	}
}
