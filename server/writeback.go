package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/slurm"
	"github.com/go-llmflow/llmflow/writeback"
)

// writebackMetrics are the write-back's series: its runs by outcome,
// whether the last one failed and when one last succeeded (the alerts
// "write-back failing" and "stale").
type writebackMetrics struct {
	runs        *prometheus.CounterVec
	failing     prometheus.Gauge
	lastSuccess prometheus.Gauge
}

func newWritebackMetrics(reg prometheus.Registerer) *writebackMetrics {
	m := &writebackMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmflow_writeback_runs_total", Help: "Write-backs of usage to slurmdbd by outcome (ok, failed).",
		}, []string{"outcome"}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmflow_writeback_failing", Help: "1 when the last write-back to slurmdbd failed (the next run retries its hours).",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmflow_writeback_last_success_timestamp_seconds", Help: "When the last write-back to slurmdbd succeeded (unix time; 0: none since start).",
		}),
	}
	m.runs.WithLabelValues("ok")
	m.runs.WithLabelValues("failed")
	reg.MustRegister(m.runs, m.failing, m.lastSuccess)
	return m
}

func (m *writebackMetrics) record(err error, at time.Time) {
	if err != nil {
		m.runs.WithLabelValues("failed").Inc()
		m.failing.Set(1)
		return
	}
	m.runs.WithLabelValues("ok").Inc()
	m.failing.Set(0)
	m.lastSuccess.Set(float64(at.Unix()))
}

// startWriteback runs the write-back to slurmdbd on the configured
// schedule inside serve: each run re-writes the last Lookback ended hours
// (replacing them). Failures are logged and counted in reg's
// llmflow_writeback_* series; the next run retries them.
func startWriteback(ctx context.Context, cfg *config.Config, db Store, reg prometheus.Registerer, log *slog.Logger) (stop func(), err error) {
	wc := cfg.Writeback
	dsn, err := config.ReadSecret(wc.DSNFile)
	if err != nil {
		return nil, fmt.Errorf("writeback dsn_file: %w", err)
	}
	loc, err := time.LoadLocation(wc.Timezone)
	if err != nil {
		return nil, fmt.Errorf("writeback timezone: %w", err)
	}
	gpus := 0
	for _, p := range cfg.Pools {
		gpus += p.GPUs
	}
	if gpus == 0 {
		return nil, fmt.Errorf("writeback needs the pools' GPUs (pool { gpus }): they are the cluster's capacity in sreport")
	}
	var sm slurm.Sacctmgr // "sacctmgr" from PATH
	if cfg.Slurm != nil {
		sm = slurm.Sacctmgr{Path: cfg.Slurm.SacctmgrPath, Timeout: cfg.Slurm.Timeout}
	}
	w, err := writeback.Open(dsn, writeback.Config{Cluster: wc.Cluster, ServiceUser: wc.ServiceUser, GPUs: gpus, Location: loc, Sacctmgr: sm})
	if err != nil {
		return nil, err
	}
	m := newWritebackMetrics(reg)
	var mu sync.Mutex // one write-back at a time
	run := func() {
		mu.Lock()
		defer mu.Unlock()
		to := time.Now().UTC().Truncate(time.Hour)
		from := to.Add(-wc.Lookback)
		tree, err := db.Accounts(ctx)
		if err == nil && tree == nil {
			tree = cfg.Accounts().SlurmNames()
		}
		var res writeback.Result
		var since time.Time
		if err == nil {
			since, err = writeback.ServedSince(ctx, db, to)
		}
		if err == nil {
			rs, rerr := db.Rollups(ctx, from, to, llmflow.RollupFilter{GroupBy: []string{"org", "team", "project", "owner"}})
			if err = rerr; err == nil {
				w.SetSince(since)
				res, err = w.Write(ctx, from, to, tree, rs, false)
			}
		}
		if err == nil {
			err = db.SaveUnwritten(ctx, res.Cluster, res.From, res.To, res.Unwritten)
		}
		if err == nil {
			err = db.SaveAssocOrder(ctx, res.Cluster, res.AssocOrder)
		}
		m.record(err, time.Now())
		if err != nil {
			log.Error("write-back to slurmdbd failed (the next run retries these hours)", "cluster", wc.Cluster, "from", from, "to", to, "err", err)
			return
		}
		log.Info("write-back to slurmdbd", "cluster", wc.Cluster, "from", res.From, "to", res.To,
			"gpu_hours", res.GPUHours(), "association_hours", res.AssocHours)
	}
	c := cron.New()
	if _, err := c.AddFunc(wc.Schedule, run); err != nil {
		w.Close()
		return nil, fmt.Errorf("writeback schedule: %w", err)
	}
	c.Start()
	return func() {
		<-c.Stop().Done()
		mu.Lock()
		w.Close()
		mu.Unlock()
	}, nil
}
