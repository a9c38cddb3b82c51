package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/slurm"
	"github.com/go-llmflow/llmflow/writeback"
)

// startWriteback runs the write-back to slurmdbd on the configured
// schedule inside serve: each run re-writes the last Lookback ended hours
// (replacing them). Failures are logged; the next run retries them.
func startWriteback(ctx context.Context, cfg *config.Config, db Store, log *slog.Logger) (stop func(), err error) {
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
