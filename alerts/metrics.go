package alerts

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what the outbox and the dispatchers do, by channel.
// One Metrics is shared by a gateway's Outbox and Dispatcher.
type Metrics struct {
	enqueued  *prometheus.CounterVec
	delivered *prometheus.CounterVec
	failed    *prometheus.CounterVec
	leaseLost *prometheus.CounterVec
	pending   *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, for tests):
//
//   - llmflow_alerts_enqueued_total{channel}: alerts written to the
//     outbox (a repeated enqueue of the same alert is not counted);
//   - llmflow_alerts_delivered_total{channel}: alerts delivered;
//   - llmflow_alerts_failed_total{channel}: failed delivery attempts
//     (each is retried);
//   - llmflow_alerts_lease_lost_total{channel}: deliveries whose lease
//     another dispatcher had taken when they were recorded (a possible
//     duplicate: raise the timeout's margin if it grows);
//   - llmflow_alerts_pending{channel}: alerts not delivered yet, as of the
//     dispatcher's last pass.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_alerts_enqueued_total", Help: "Alerts written to the outbox, by channel."}, []string{"channel"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_alerts_delivered_total", Help: "Alerts delivered, by channel."}, []string{"channel"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_alerts_failed_total", Help: "Failed alert delivery attempts (retried with backoff), by channel."}, []string{"channel"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_alerts_lease_lost_total", Help: "Alert deliveries whose outbox lease had passed to another dispatcher when recorded, by channel."}, []string{"channel"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmflow_alerts_pending", Help: "Alerts in the outbox not delivered yet, by channel."}, []string{"channel"}),
	}
	if reg != nil {
		reg.MustRegister(m.enqueued, m.delivered, m.failed, m.leaseLost, m.pending)
	}
	return m
}

// init creates the series of channels at zero, so that rate() and
// absent() work before the first alert.
func (m *Metrics) init(channels []string) {
	if m == nil {
		return
	}
	for _, ch := range channels {
		m.enqueued.WithLabelValues(ch)
		m.delivered.WithLabelValues(ch)
		m.failed.WithLabelValues(ch)
		m.leaseLost.WithLabelValues(ch)
		m.pending.WithLabelValues(ch)
	}
}
