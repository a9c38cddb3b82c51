package gateway

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus series. Label values are bounded by
// the configuration (models, pools, upstreams, organisations, teams) and by
// fixed sets (status codes, reasons); raw keys never appear.
type metrics struct {
	requests    *prometheus.CounterVec // model, pool, org, team, code
	tokens      *prometheus.CounterVec // model, pool, org, team, kind
	gpuHours    *prometheus.CounterVec // model, pool, org, team
	estimated   *prometheus.CounterVec // model, pool
	denied      *prometheus.CounterVec // reason
	retries     *prometheus.CounterVec // pool, upstream
	overhead    prometheus.Histogram
	upstream    *prometheus.HistogramVec // pool
	queueWait   *prometheus.HistogramVec // pool
	preemptions *prometheus.CounterVec   // pool
	resumed     *prometheus.CounterVec   // pool
	recomputed  *prometheus.CounterVec   // pool
	authLookups prometheus.Counter
	connRefused *prometheus.CounterVec // reason
	acctWritten prometheus.Counter
	acctFailed  prometheus.Counter

	// per-request children, resolved once (WithLabelValues hashes its
	// labels on every call), keyed by every label value they hold: a team
	// a Slurm sync moves to another organisation gets new children.
	mu       sync.RWMutex
	children map[childKey]*children
}

type childKey struct{ model, pool, org, team string }

type children struct {
	prompt, completion, cached, gpu prometheus.Counter
	codes                           sync.Map // int status → prometheus.Counter
	labels                          [4]string
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_requests_total", Help: "Proxied requests by model, pool, organisation, team and HTTP status.",
		}, []string{"model", "pool", "org", "team", "code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_tokens_total", Help: "Tokens by kind (prompt, completion, cached), as reported by the engine or estimated.",
		}, []string{"model", "pool", "org", "team", "kind"}),
		gpuHours: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_gpu_hours_total", Help: "GPU-hours charged by the cost formula.",
		}, []string{"model", "pool", "org", "team"}),
		estimated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_usage_estimated_total", Help: "Requests whose usage was estimated because the engine never reported it.",
		}, []string{"model", "pool"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_denied_total", Help: "Requests refused by the gateway, by reason.",
		}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_upstream_retries_total", Help: "Upstream attempts retried before the first response byte.",
		}, []string{"pool", "upstream"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "llmflow_overhead_seconds",
			Help:    "Time the gateway spends on a request outside the upstream call.",
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3},
		}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmflow_upstream_seconds",
			Help:    "Time from sending a request upstream to the end of its answer.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"pool"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmflow_queue_wait_seconds",
			Help:    "Time requests waited in a gateway-side queue before being sent.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"pool"}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_preemptions_total", Help: "Borrowers' engine requests the gateway cancelled to give their slots back to requests within their reservations (pool reclaim = \"preempt\").",
		}, []string{"pool"}),
		resumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_resumed_total", Help: "Preempted requests sent to the engine again, resuming from the text generated so far.",
		}, []string{"pool"}),
		recomputed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_recomputed_tokens_total", Help: "Prompt tokens engines prefilled again to resume preempted requests (not cached): the pool's overhead, charged to no budget.",
		}, []string{"pool"}),
		authLookups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmflow_auth_store_lookups_total", Help: "Key lookups that reached the store (cache misses).",
		}),
		connRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_connections_refused_total", Help: "Client connections refused at a connection cap (limits.max_connections, max_connections_per_network), by cap.",
		}, []string{"reason"}),
		acctWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmflow_accounting_written_total", Help: "Accounting records written to the store.",
		}),
		acctFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmflow_accounting_failed_total", Help: "Accounting records lost because a batch write failed twice.",
		}),
		children: make(map[childKey]*children),
	}
	reg.MustRegister(m.requests, m.tokens, m.gpuHours, m.estimated, m.denied, m.retries,
		m.overhead, m.upstream, m.queueWait, m.preemptions, m.resumed, m.recomputed, m.authLookups, m.acctWritten, m.acctFailed, m.connRefused)
	return m
}

// Denial reasons; a fixed set.
const (
	reasonAuth        = "auth"
	reasonAuthLimited = "auth_rate_limited"
	reasonBadRequest  = "bad_request"
	reasonTooLarge    = "too_large"
	reasonModel       = "unknown_model"
	reasonNoUpstream  = "no_upstream"
	reasonDisabled    = "disabled"
	reasonQueue       = "queue"
	reasonGrpTRES     = "grp_tres" // an account's Slurm GPU limit caps its requests in flight
)

// Denial reasons of the operator secrets (master key, metrics token),
// which have their own failure limiter (operatorAuth).
const (
	reasonAdminAuth        = "admin_auth"
	reasonAdminAuthLimited = "admin_auth_rate_limited"
	// the client left while an admission step waited (the queue)
	reasonClientGone = "client_gone"
)

func (m *metrics) child(model, pool, org, team string) *children {
	k := childKey{model, pool, org, team}
	m.mu.RLock()
	c := m.children[k]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c = m.children[k]; c != nil {
		return c
	}
	c = &children{
		prompt:     m.tokens.WithLabelValues(model, pool, org, team, "prompt"),
		completion: m.tokens.WithLabelValues(model, pool, org, team, "completion"),
		cached:     m.tokens.WithLabelValues(model, pool, org, team, "cached"),
		gpu:        m.gpuHours.WithLabelValues(model, pool, org, team),
		labels:     [4]string{model, pool, org, team},
	}
	m.children[k] = c
	return c
}

func (c *children) request(m *metrics, status int) {
	if v, ok := c.codes.Load(status); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	ctr := m.requests.WithLabelValues(c.labels[0], c.labels[1], c.labels[2], c.labels[3], strconv.Itoa(status))
	c.codes.Store(status, ctr)
	ctr.Inc()
}

// deniedReasons is every llmflow_denied_total reason.
var deniedReasons = []string{
	reasonAuth, reasonAuthLimited, reasonBadRequest, reasonTooLarge, reasonModel,
	reasonNoUpstream, reasonDisabled, reasonQueue, reasonGrpTRES, reasonAdminAuth, reasonAdminAuthLimited,
	reasonClientGone, reasonBudget, reasonRPM, reasonTPM, reasonMaxInFlight, reasonStale, reasonBadTags, reasonAccounting,
}

// initSeries creates at zero the series of fixed label sets (denial and
// connection refusal reasons; per model, pool and upstream of the
// configuration), so that alerts on them (rate, increase, absent) work
// from the start instead of waiting for the first event. Series whose
// labels come from traffic (status codes, teams) appear with it.
func (g *Gateway) initSeries() {
	for _, r := range deniedReasons {
		g.m.denied.WithLabelValues(r)
	}
	for _, r := range []string{connRefusedGlobal, connRefusedNetwork} {
		g.m.connRefused.WithLabelValues(r)
	}
	for _, rt := range g.routes {
		g.m.estimated.WithLabelValues(rt.name, rt.pool.name)
		for _, up := range rt.configured {
			g.m.retries.WithLabelValues(rt.pool.name, up.name)
		}
	}
	for _, p := range g.cfg.Pools { // 0 where nothing is reclaimed: the dashboard's panel has its series
		g.m.preemptions.WithLabelValues(p.Name)
		g.m.resumed.WithLabelValues(p.Name)
		g.m.recomputed.WithLabelValues(p.Name)
	}
}
