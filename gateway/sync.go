package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
)

// syncState is what the gateway knows of the Slurm imports run inside
// serve: the last run and the last success, for /healthz and metrics.
type syncState struct {
	mu          sync.Mutex
	last        *llmflow.SyncRun
	lastSuccess time.Time

	runs     *prometheus.CounterVec
	success  prometheus.Gauge
	failing  prometheus.Gauge
	accounts prometheus.Gauge
}

// newSyncState registers llmflow_accounts, and the llmflow_slurm_sync_*
// series only when the configuration imports from Slurm (slurm): a
// gateway without a slurm block has no sync to report on. The run
// outcomes start at zero.
func newSyncState(reg prometheus.Registerer, slurm bool) *syncState {
	s := &syncState{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_slurm_sync_runs_total", Help: "Slurm imports by outcome (applied, unchanged, failed).",
		}, []string{"outcome"}),
		success: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmflow_slurm_sync_last_success_timestamp_seconds", Help: "When the last Slurm import succeeded (unix time).",
		}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmflow_slurm_sync_failing", Help: "1 when the last Slurm import failed: the gateway serves the last good tree.",
		}),
		accounts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmflow_accounts", Help: "Accounts (organisations, teams, projects) in the tree served, disabled ones included.",
		}),
	}
	reg.MustRegister(s.accounts)
	if slurm {
		for _, o := range []string{"applied", "unchanged", "failed"} {
			s.runs.WithLabelValues(o)
		}
		reg.MustRegister(s.runs, s.success, s.failing)
	}
	return s
}

// ReportSync tells the gateway how a Slurm import inside serve ended.
// A failed run keeps the last good tree; it shows in /healthz and in
// llmflow_slurm_sync_failing.
func (g *Gateway) ReportSync(run llmflow.SyncRun) {
	s := g.sync
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = &run
	s.runs.WithLabelValues(run.Outcome).Inc()
	if run.Outcome == "failed" {
		s.failing.Set(1)
		return
	}
	s.failing.Set(0)
	s.lastSuccess = run.Finished
	s.success.Set(float64(run.Finished.Unix()))
}

// syncHealth is the Slurm part of /healthz.
type syncHealth struct {
	Source      string    `json:"source"`
	LastRun     time.Time `json:"last_run"`
	Outcome     string    `json:"outcome"`
	Error       string    `json:"error,omitempty"`
	LastSuccess time.Time `json:"last_success,omitzero"`
}

func (s *syncState) health() *syncHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return nil
	}
	return &syncHealth{Source: s.last.Source, LastRun: s.last.Finished, Outcome: s.last.Outcome, Error: s.last.Error, LastSuccess: s.lastSuccess}
}
