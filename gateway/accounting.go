package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
)

// reasonAccounting is the llmflow_denied_total reason of a request refused
// because its record could be kept nowhere (admitAccounting).
const reasonAccounting = "accounting"

// accountingRetry is the Retry-After of that refusal: about the pause
// between two attempts at a failing store.
const accountingRetry = 5 * time.Second

var errRecordsAtRisk = &llmflow.Error{Code: llmflow.EUNAVAILABLE,
	Message: "the gateway cannot account for requests now (neither its store nor its spool takes records); retry later"}

// admitAccounting refuses a request, before anything is sent upstream,
// while neither the store nor the spool takes records
// (accounting.Queue.AtRisk): served, it would be a record dropped. With
// store { fail_closed = false } the administrator chose to serve on; the
// records then wait in memory, and beyond its size are dropped (counted).
// It reads one atomic word.
func (g *Gateway) admitAccounting(_ context.Context, _ *exchange) error {
	if g.rec == nil || !g.cfg.Store.FailClosed || !g.rec.AtRisk() {
		return nil
	}
	return withRetryAfter(errRecordsAtRisk, accountingRetry)
}

// RecordWriter is what the gateway needs of a store to keep accounting
// records: WriteRecords must be idempotent per RequestID and return once
// its context ends (see accounting.Writer).
type RecordWriter = accounting.Writer

// AccountingWritten counts records written to and given up by the store
// (llmflow_accounting_written_total, _failed_total): the OnWrite of a
// queue passed as Options.Recorder.
func (g *Gateway) AccountingWritten(written, failed int) {
	g.m.acctWritten.Add(float64(written))
	g.m.acctFailed.Add(float64(failed))
}

// SpoolBacklogRecords is the spool backlog beyond which /healthz says
// degraded even while store writes succeed: the store is slower than the
// traffic.
const SpoolBacklogRecords = 10000

// acctHealth is the accounting part of /healthz's details.
type acctHealth struct {
	// Store is "ok", or "failing" while writes to the store fail.
	Store        string     `json:"store_writes"`
	StoreError   string     `json:"store_error,omitempty"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
	// Spool is "ok", "backlog" (more than SpoolBacklogRecords waiting),
	// "refusing" (its disk is full or it holds its maximum: records are
	// held in memory), or "off" (no spool: records wait in memory only).
	Spool        string `json:"spool"`
	SpoolError   string `json:"spool_error,omitempty"`
	SpoolRecords int64  `json:"spool_records"`
	SpoolBytes   int64  `json:"spool_bytes"`
	InMemory     int    `json:"in_memory"`
	Dropped      uint64 `json:"dropped"`
	Lost         uint64 `json:"lost"`
}

// accountingHealth is the accounting queue's part of /healthz: failing
// store writes, a growing spool or a spool that refuses records make the
// status "degraded" (records are kept, but not yet where reports see
// them); with store.fail_closed, records at risk (the spool refuses them,
// or there is no spool and writes fail) make it "unavailable" (503):
// requests are refused then (admitAccounting). It
// updates status and code and returns the details (nil without a queue).
func (g *Gateway) accountingHealth(status *string, code *int) *acctHealth {
	if g.rec == nil {
		return nil
	}
	h := g.rec.Health()
	a := &acctHealth{Store: "ok", Spool: "ok", StoreError: h.StoreError, SpoolError: h.SpoolError,
		SpoolRecords: h.SpoolRecords, SpoolBytes: h.SpoolBytes, InMemory: h.InMemory, Dropped: h.Dropped, Lost: h.Failed}
	degraded, atRisk := false, false
	if h.StoreError != "" {
		a.Store = "failing"
		t := h.FailingSince.UTC()
		a.FailingSince = &t
		degraded = true
		atRisk = !h.Spool
	}
	switch {
	case !h.Spool:
		a.Spool = "off"
	case h.SpoolError != "":
		a.Spool = "refusing"
		degraded, atRisk = true, true
	case h.SpoolRecords > SpoolBacklogRecords:
		a.Spool = "backlog"
		degraded = true
	}
	if degraded && *status == "ok" {
		*status = "degraded"
	}
	if atRisk && g.cfg.Store.FailClosed {
		*status = "unavailable"
		*code = http.StatusServiceUnavailable
	}
	return a
}

// registerAccountingMetrics exports the accounting queue's state, read at
// scrape time (nothing on the request path).
func (g *Gateway) registerAccountingMetrics() {
	health := func(f func(h accounting.Health) float64) func() float64 {
		return func() float64 {
			if g.rec == nil {
				return 0
			}
			return f(g.rec.Health())
		}
	}
	g.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_accounting_spool_records", Help: "Accounting records in the on-disk spool not yet written to the store.",
		}, health(func(h accounting.Health) float64 { return float64(h.SpoolRecords) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_accounting_spool_bytes", Help: "Bytes of the on-disk spool not yet written to the store.",
		}, health(func(h accounting.Health) float64 { return float64(h.SpoolBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_accounting_spool_refusing", Help: "1 while the spool refuses records (full disk or spool): they are held in memory.",
		}, health(func(h accounting.Health) float64 { return b2f(h.SpoolError != "") })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_accounting_store_failing", Help: "1 while writes of accounting records to the store fail.",
		}, health(func(h accounting.Health) float64 { return b2f(h.StoreError != "") })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "llmflow_accounting_store_errors_total", Help: "Failed writes of accounting batches to the store (each retried).",
		}, health(func(h accounting.Health) float64 { return float64(h.StoreErrors) })),
	)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
