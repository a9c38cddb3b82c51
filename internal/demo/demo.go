// Package demo is llmflow demo: two institutions share a simulated vLLM
// through a gateway, and the engine's running requests per institution
// are printed every second, with the gateway's fair-share priorities and
// without (the control). Everything runs in this process on loopback.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/fairshare"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/store"
	"github.com/go-llmflow/llmflow/vllmsim"
)

// Options size the fair-share demonstration.
type Options struct {
	Capacity int           // the pool's sustainable concurrency C
	Clients  int           // closed-loop clients per institution
	BAfter   time.Duration // when etabB's clients start
	Duration time.Duration // length of each run
	Step     time.Duration // the simulated engine's decode step
	Version  string        // the gateway's version
}

// demo request shape: 400 prompt tokens and 60 generated, 25 KV blocks of
// 16 tokens at admission and 29 at the end. The engine gets KV for
// capacity requests at their largest, so C is what it sustains without
// preemption (the definition of C): within-share requests are never
// preempted, and the little the engine holds beyond C is borrowed.
const (
	demoPromptBytes = 1600
	demoMaxTokens   = 60
	demoBlocks      = 29
)

// Run runs the demonstration once and prints it to out: with llmflow's
// fair-share priorities (fair), or the control run where every request
// has priority 0 (the engine in FCFS order, as without llmflow).
func Run(ctx context.Context, out io.Writer, o Options, fair bool) error {
	sim := vllmsim.New(vllmsim.Config{
		APIKey:       "demo-engine-key",
		StepInterval: o.Step,
		Sched:        vllmsim.SchedConfig{Policy: vllmsim.PolicyPriority, KVBlocks: int(float64(o.Capacity) * demoBlocks), MaxNumSeqs: 1024},
	})
	defer sim.Close()
	simURL, closeSim, err := serveLoopback(sim)
	if err != nil {
		return err
	}
	defer closeSim()

	dir, err := os.MkdirTemp("", "llmflow-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "master.key"), []byte("demo-master-key\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "engine.key"), []byte("demo-engine-key\n"), 0o600)
	scheduler := "priority"
	if !fair {
		scheduler = "fcfs"
	}
	src := fmt.Sprintf(`
master_key_file = "master.key"
org "etabA" {
  share = 0.8125
  team "lab-a" {}
}
org "etabB" {
  share = 0.1875
  team "lab-b" {}
}
pool "sim" {
  capacity  = %d
  scheduler = %q
}
model "sim" {
  upstream_model = "sim/llama"
  pool           = "sim"
  key_file       = "engine.key"
  cost {
    input_per_mtok  = 0.02
    output_per_mtok = 0.2
  }
  upstream "sim0" { base_url = %q }
}
store { path = "demo.db" }
limits { auth_failures_per_minute = 0 }
`, o.Capacity, scheduler, simURL)
	cfg, err := config.Parse(filepath.Join(dir, "demo.hcl"), []byte(src))
	if err != nil {
		return err
	}
	db, err := store.OpenSQLite(ctx, cfg.Store.Path)
	if err != nil {
		return err
	}
	defer db.Close()
	gw, err := gateway.New(gateway.Options{Config: cfg, Version: o.Version, Keys: db, Records: db, Pinger: db, ClampCounter: db, ShareUsage: db, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	gctx, stopGW := context.WithCancel(ctx)
	gw.Start(gctx)
	gwURL, closeGW, err := serveLoopback(gw)
	if err != nil {
		stopGW()
		gw.Close(context.Background())
		return err
	}
	defer func() {
		closeGW()
		stopGW()
		gw.Close(context.Background())
	}()
	key := func(team string) (string, error) {
		_, k, err := admin.CreateKey(ctx, gw, db, admin.KeyRequest{Team: team, Name: "demo"},
			admin.Principal{Name: "demo", Role: admin.RoleProxyAdmin})
		return k, err
	}
	keyA, err := key("lab-a")
	if err != nil {
		return err
	}
	keyB, err := key("lab-b")
	if err != nil {
		return err
	}
	saltOrg := map[string]string{gw.CacheSalt("etabA"): "A", gw.CacheSalt("etabB"): "B"}

	run, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * o.Clients, DialContext: (&net.Dialer{}).DialContext}}
	body := fmt.Sprintf(`{"model":"sim","prompt":%q,"max_tokens":%d}`, strings.Repeat("x", demoPromptBytes), demoMaxTokens)
	var wg sync.WaitGroup
	loop := func(key string, delay time.Duration) {
		defer wg.Done()
		select {
		case <-time.After(delay):
		case <-run.Done():
			return
		}
		for run.Err() == nil {
			req, _ := http.NewRequestWithContext(run, http.MethodPost, gwURL+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for range o.Clients {
		wg.Add(2)
		go loop(keyA, 0)
		go loop(keyB, o.BAfter)
	}

	title := "with llmflow fair-share priorities"
	if !fair {
		title = "control: every request at priority 0 (no llmflow priorities)"
	}
	fmt.Fprintf(out, "\n%s — C = %d, %d clients per institution, etabB from %s; shares A 0.8125, B 0.1875\n",
		title, o.Capacity, o.Clients, o.BAfter)
	fmt.Fprint(out, demoLegend)
	fmt.Fprintf(out, "%5s  %9s  %9s  %7s  %7s  %8s  %8s  %5s  %11s\n",
		"t", "A running", "B running", "A frac", "B frac", "A borrow", "B borrow", "KV", "preemptions")
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var sumA, sumB, samples float64
	var secA, secB, secN float64
	for run.Err() == nil {
		select {
		case <-run.Done():
		case <-tick.C:
		}
		by := sim.RunningBy(func(r *vllmsim.Received) string { s, _ := r.Body["cache_salt"].(string); return saltOrg[s] })
		a, b := float64(by["A"]), float64(by["B"])
		secA, secB, secN = secA+a, secB+b, secN+1
		el := time.Since(start)
		if el > o.BAfter+2*time.Second && a+b > 0 {
			sumA, sumB, samples = sumA+a/(a+b), sumB+b/(a+b), samples+1
		}
		if secN == 4 {
			st := sim.Stats()
			fa, fb := 0.0, 0.0
			if secA+secB > 0 {
				fa, fb = secA/(secA+secB), secB/(secA+secB)
			}
			borrow := map[string]int{}
			for _, p := range gw.FairshareReport().Pools {
				for _, a := range p.Accounts {
					if a.Depth == 1 {
						borrow[a.Account] = a.Borrowing
					}
				}
			}
			fmt.Fprintf(out, "%4.0fs  %9.1f  %9.1f  %7.3f  %7.3f  %8d  %8d  %4.0f%%  %11d\n",
				el.Seconds(), secA/secN, secB/secN, fa, fb, borrow["etabA"], borrow["etabB"], 100*st.KVUsage, st.Preemptions)
			secA, secB, secN = 0, 0, 0
		}
	}
	wg.Wait()
	if samples > 0 {
		st := sim.Stats()
		fmt.Fprintf(out, "steady state (both saturating): running fraction A %.3f, B %.3f (shares 0.8125 / 0.1875)\n",
			sumA/samples, sumB/samples)
		writePreemptions(out, st.PreemptionsByPriority, fair)
	}
	return nil
}

// demoLegend explains the columns of the demo's table.
const demoLegend = `  t            seconds since the start
  A/B running  requests the engine runs for each institution (mean over the last second)
  A/B frac     each institution's fraction of the running requests
  A/B borrow   requests admitted over the institution's reservation (borrowed capacity)
  KV           the engine's KV-cache use
  preemptions  requests the engine preempted so far (it preempts the largest priority value first)
`

// writePreemptions prints the engine's preemptions as a table, one row per
// priority, with what the priority means (fair: llmflow's priorities were
// sent; else the control run, every request at 0).
func writePreemptions(w io.Writer, by map[int]int64, fair bool) {
	fmt.Fprintf(w, "\n%8s  %11s  %s\n", "priority", "preemptions", "meaning")
	if len(by) == 0 {
		fmt.Fprintf(w, "%8s  %11d  %s\n", "-", 0, "no request was preempted")
		return
	}
	for _, p := range slices.Sorted(maps.Keys(by)) {
		meaning := "borrowing from another institution"
		switch {
		case !fair:
			meaning = "every request (control: no llmflow priorities)"
		case p <= fairshare.PriorityClassBatch:
			meaning = "within its team's share"
		case p < fairshare.PriorityBorrowBase:
			meaning = "borrowing from a sibling team"
		}
		fmt.Fprintf(w, "%8d  %11d  %s\n", p, by[p], meaning)
	}
}

// serveLoopback serves h on a free loopback port until close.
func serveLoopback(h http.Handler) (url string, close func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("demo: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}
