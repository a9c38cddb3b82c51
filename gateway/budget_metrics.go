package gateway

import "github.com/prometheus/client_golang/prometheus"

// budgetCollector exposes each budget in force, its effective limit and
// what is spent of it in the current period, read from the budget table
// at scrape time (nothing on the request path): the dashboard's "budgets
// used" and an alert on a budget close to its end. The series are as many
// as the budgets.
type budgetCollector struct {
	b            *budgetState
	spent, limit *prometheus.Desc
}

func newBudgetCollector(b *budgetState) *budgetCollector {
	labels := []string{"kind", "name", "model", "period"}
	return &budgetCollector{
		b: b,
		spent: prometheus.NewDesc("llmflow_budget_spent_gpu_hours",
			"GPU-hours spent in the budget's current period (written and charged, not holds), per budget in force.", labels, nil),
		limit: prometheus.NewDesc("llmflow_budget_limit_gpu_hours",
			"The budget's effective limit in GPU-hours (max_cost plus unexpired increases), per budget in force.", labels, nil),
	}
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.spent
	ch <- c.limit
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.b.mem.Table().Status() {
		labels := []string{string(s.Kind), s.Name, s.Model, string(s.Period)}
		ch <- prometheus.MustNewConstMetric(c.spent, prometheus.GaugeValue, s.Spent, labels...)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, s.EffectiveLimit, labels...)
	}
}
