// Package alerts delivers soft-budget alerts so that they arrive: once
// per budget and period, to a webhook (JSON POST, bearer token from a
// file) and by e-mail through an SMTP relay, retried with exponential
// backoff until delivered, across restarts and several gateways.
//
// The producer (the budgets side of the gateway) calls Outbox.Enqueue
// with an Alert whose ID names the budget and period. Enqueue writes one
// row per channel into the store's durable outbox, in one transaction;
// the row's key is (ID, channel), so a second Enqueue of the same ID, by
// this gateway after a restart or by another gateway, is a no-op. The
// outbox row is the budget's "sent" mark:
// it is written before anything is sent, so a crash cannot lose an alert
// nor send it twice from two marks.
//
// A Dispatcher per gateway claims due rows under a lease (the store makes
// claims of several gateways disjoint), sends each with a timeout well
// inside the lease, and marks it delivered under the same lease, or
// schedules the next attempt with backoff and jitter. A gateway that
// crashes holding a lease delays its rows until the lease expires, then
// another dispatcher takes them.
//
// Exactly once, precisely: a row is marked delivered once, and while its
// lease holds no other dispatcher sends it. The one window left is a
// dispatcher that sent but died (or lost the store) before recording it:
// the row is sent again after its lease expires. Receivers can drop such
// a duplicate: the webhook carries the ID in Idempotency-Key and in the
// body, and the e-mail's Message-ID is derived from the ID.
//
// Secrets (the webhook token, the SMTP password, the webhook URL's path,
// which is often a secret itself) never appear in errors, logs or the
// outbox's stored errors.
package alerts

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Alert is one soft-limit crossing to notify: a budget's spend reached its
// soft limit in a period. The fields mirror budgets.Crossing (this package
// does not import budgets), plus the idempotency ID.
type Alert struct {
	// ID makes the alert idempotent: one alert per budget, period and
	// level. Use SoftLimitID.
	ID string `json:"id"`

	BudgetID    string    `json:"budget_id"`
	ScopeKind   string    `json:"scope_kind"` // org, team, project, key, tag
	ScopeName   string    `json:"scope_name"`
	Model       string    `json:"model"`        // "" = all models
	Period      string    `json:"period"`       // day, week, month
	PeriodStart time.Time `json:"period_start"` // UTC
	Limit       float64   `json:"limit_gpu_hours"`
	Soft        float64   `json:"soft_limit_gpu_hours"`
	Spent       float64   `json:"spent_gpu_hours"` // when it crossed
	At          time.Time `json:"at"`              // when it crossed
}

// SoftLimitID is the ID of the soft-limit alert of a budget in the period
// starting at periodStart: "budget:<id>:<period start, RFC 3339 UTC>:soft".
func SoftLimitID(budgetID string, periodStart time.Time) string {
	return "budget:" + budgetID + ":" + periodStart.UTC().Format(time.RFC3339) + ":soft"
}

// maxFieldBytes bounds each text field of an alert.
const maxFieldBytes = 256

// Validate reports what makes a an alert that cannot be sent.
func (a Alert) Validate() error {
	var errs []error
	text := func(name, v string, required bool) {
		switch {
		case required && v == "":
			errs = append(errs, fmt.Errorf("%s is required", name))
		case len(v) > maxFieldBytes:
			errs = append(errs, fmt.Errorf("%s is longer than %d bytes", name, maxFieldBytes))
		case strings.ContainsFunc(v, isControl):
			errs = append(errs, fmt.Errorf("%s contains a control character", name))
		}
	}
	text("id", a.ID, true)
	text("budget id", a.BudgetID, true)
	text("scope kind", a.ScopeKind, true)
	text("scope name", a.ScopeName, true)
	text("model", a.Model, false)
	text("period", a.Period, true)
	for name, v := range map[string]float64{"limit": a.Limit, "soft limit": a.Soft, "spent": a.Spent} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			errs = append(errs, fmt.Errorf("%s must be a finite number ≥ 0", name))
		}
	}
	if a.At.IsZero() {
		errs = append(errs, errors.New("time of the crossing is required"))
	}
	if a.PeriodStart.IsZero() {
		errs = append(errs, errors.New("period start is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid alert: %w", err)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Scope names the budget's scope for people: "team lab-nlp", with the
// model when the budget is for one model.
func (a Alert) Scope() string {
	s := a.ScopeKind + " " + a.ScopeName
	if a.Model != "" {
		s += " (model " + a.Model + ")"
	}
	return s
}

// Summary is a one-line description of the alert.
func (a Alert) Summary() string {
	return fmt.Sprintf("llmflow: soft budget limit reached for %s: %s GPU-hours of %s spent this %s (soft limit %s)",
		a.Scope(), gpuh(a.Spent), gpuh(a.Limit), a.Period, gpuh(a.Soft))
}

// Text is the alert for people: the body of the e-mail, the "text" of
// the webhook (so that chat webhooks show it as is).
func (a Alert) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "The %s budget of %s has reached its soft limit.\n\n", a.Period, a.Scope())
	fmt.Fprintf(&b, "Spent:       %s GPU-hours\n", gpuh(a.Spent))
	fmt.Fprintf(&b, "Soft limit:  %s GPU-hours\n", gpuh(a.Soft))
	fmt.Fprintf(&b, "Limit:       %s GPU-hours\n", gpuh(a.Limit))
	fmt.Fprintf(&b, "Period:      %s from %s\n", a.Period, a.PeriodStart.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Crossed at:  %s\n", a.At.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Budget:      %s\n\n", a.BudgetID)
	b.WriteString("Requests are refused once the limit is spent. This is the only alert for this budget in this period.\n")
	fmt.Fprintf(&b, "Alert ID: %s\n", a.ID)
	return b.String()
}

func gpuh(v float64) string { return fmt.Sprintf("%.4g", v) }

// webhookBody is what the webhook receives.
type webhookBody struct {
	Type string `json:"type"` // "budget.soft_limit"
	Alert
	Text string `json:"text"`
}

// encode returns the alert as stored in the outbox.
func (a Alert) encode() ([]byte, error) { return json.Marshal(a) }

// decodeAlert reads an alert stored by encode.
func decodeAlert(b []byte) (Alert, error) {
	var a Alert
	if err := json.Unmarshal(b, &a); err != nil {
		return Alert{}, fmt.Errorf("stored alert: %w", err)
	}
	return a, a.Validate()
}
