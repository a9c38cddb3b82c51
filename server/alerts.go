package server

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow/alerts"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
)

// startAlerts runs the alert dispatcher inside serve when the alerts block
// is set: it delivers the store's outbox to the webhook and the SMTP relay
// until ctx ends. It returns the Outbox that soft budget limits enqueue
// into (nil without an alerts block: Enqueue on it does nothing) and a
// stop function that waits for the dispatcher to finish its pass.
func startAlerts(ctx context.Context, cfg *config.Config, st alerts.Store, reg prometheus.Registerer, log *slog.Logger) (*alerts.Outbox, func(), error) {
	if !cfg.Alerts.Enabled() {
		return nil, func() {}, nil
	}
	senders, err := alerts.SendersFromConfig(cfg.Alerts, nil)
	if err != nil {
		return nil, nil, err
	}
	m := alerts.NewMetrics(reg)
	d, err := alerts.NewDispatcher(alerts.Options{Store: st, Senders: senders, Metrics: m, Log: log.With("component", "alerts"),
		Timeout: cfg.Alerts.Timeout})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { d.Run(ctx) })
	log.Info("alerts dispatcher started", "channels", d.Channels())
	return alerts.NewOutbox(st, d.Channels(), m, d.Wake), func() { cancel(); wg.Wait() }, nil
}

// outboxSink turns the gateway's soft-limit crossings into alerts in the
// durable outbox: one per budget and period (alerts.SoftLimitID), however
// many gateways or restarts see the crossing. The gateway calls it off
// the request path.
type outboxSink struct {
	o   *alerts.Outbox
	log *slog.Logger
}

func (s outboxSink) SoftLimitCrossed(ctx context.Context, c budgets.Crossing) {
	a := alertOf(c)
	if err := s.o.Enqueue(ctx, a); err != nil {
		s.log.Error("soft-limit alert not enqueued", "budget", c.BudgetID, "period_start", c.PeriodStart, "err", err)
	}
}

// alertOf is the alert of a crossing.
func alertOf(c budgets.Crossing) alerts.Alert {
	return alerts.Alert{
		ID: alerts.SoftLimitID(c.BudgetID, c.PeriodStart), BudgetID: c.BudgetID,
		ScopeKind: string(c.Kind), ScopeName: c.Name, Model: c.Model, Period: string(c.Period),
		PeriodStart: c.PeriodStart.UTC(), Limit: c.Limit, Soft: c.SoftLimit, Spent: c.Spent, At: c.At.UTC(),
	}
}
