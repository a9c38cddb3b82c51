package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/autocap"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/internal/gatewaytest"
	"github.com/go-llmflow/llmflow/vllmsim"
)

// The convergence figures of issue 22: a vllmsim engine (vLLM V1's
// scheduler, KV blocks, recompute preemption) driven at exactly C
// requests in flight, as a saturated gateway pool sends it, its /metrics
// scraped over loopback into the controller every tick. C* is the largest
// C at which the engine does not preempt under that load (found by
// bisection at fixed C); then the controller starts at C*/2 and at 2·C*.
//
//	go test -run '^$' -bench BenchmarkConvergence -benchtime 1x ./gateway/
//
// "controller" steps the controller directly against the engine; "gateway"
// runs the whole gateway (capacity loop, queue) in front of it.
//
// Time is scaled: 2 ms engine steps (vLLM's default simRig here is 20 ms),
// answers of 128–384 tokens, hold 1.5 s, a scrape every 250 ms.
const (
	simStep     = 2 * time.Millisecond
	simBlocks   = 1024
	promptToks  = 256
	minAnswer   = 128
	maxAnswer   = 384
	scrapeEvery = 250 * time.Millisecond
)

var convergeParams = autocap.Params{Min: 2, Max: 400, KVTarget: autocap.DefaultKVTarget, Hold: 1500 * time.Millisecond,
	Stale: time.Second, CeilingTTL: time.Hour}

// simRig is one vllmsim behind a loopback listener and a closed-loop load
// that keeps target requests in flight.
type simRig struct {
	tb     testing.TB
	sim    *vllmsim.Server
	srv    *httptest.Server
	client *http.Client

	mu       sync.Mutex
	target   int
	inflight int
	errs     int
	wake     chan struct{}
	rng      *rand.Rand
}

func newSimRig(tb testing.TB) *simRig {
	sim := vllmsim.New(vllmsim.Config{StepInterval: simStep, Sched: vllmsim.SchedConfig{MaxNumSeqs: 512, KVBlocks: simBlocks}})
	srv := httptest.NewServer(sim)
	tb.Cleanup(func() { srv.Close(); sim.Close() })
	return &simRig{tb: tb, sim: sim, srv: srv, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}},
		wake: make(chan struct{}, 1), rng: rand.New(rand.NewPCG(22, 2))}
}

// run keeps r.target requests in flight until ctx ends.
func (r *simRig) run(ctx context.Context) {
	prompt := strings.Repeat("x", 4*promptToks)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		r.mu.Lock()
		for r.inflight < r.target {
			r.inflight++
			n := minAnswer + r.rng.IntN(maxAnswer-minAnswer+1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := r.complete(ctx, prompt, n)
				r.mu.Lock()
				r.inflight--
				if err != nil && ctx.Err() == nil {
					r.errs++
				}
				r.mu.Unlock()
				select {
				case r.wake <- struct{}{}:
				default:
				}
			}()
		}
		r.mu.Unlock()
		select {
		case <-r.wake:
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *simRig) complete(ctx context.Context, prompt string, n int) error {
	body, _ := json.Marshal(map[string]any{"model": "sim/llama", "prompt": prompt, "max_tokens": n})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (r *simRig) setTarget(c int) {
	r.mu.Lock()
	r.target = c
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *simRig) scrape() (autocap.Engine, error) {
	resp, err := r.client.Get(r.srv.URL + "/metrics")
	if err != nil {
		return autocap.Engine{}, err
	}
	defer resp.Body.Close()
	return parseEngineMetrics(io.LimitReader(resp.Body, 1<<20), kindMetrics(r.tb, "vllm"))
}

// preemptsAt runs the load at fixed c for d after a warm-up and reports
// the preemptions the engine made.
func preemptsAt(tb testing.TB, c int, warm, d time.Duration) int64 {
	r := newSimRig(tb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	r.setTarget(c)
	time.Sleep(warm)
	before := r.sim.Stats().Preemptions
	time.Sleep(d)
	n := r.sim.Stats().Preemptions - before
	cancel()
	<-done
	return n
}

// capTrace is C over time from one run of the controller.
type capTrace struct {
	at []time.Duration
	c  []int
}

func convergeFrom(tb testing.TB, start int, d time.Duration) (capTrace, int64) {
	r := newSimRig(tb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	begin := time.Now()
	ctl := autocap.New(convergeParams, start, begin)
	r.setTarget(ctl.C())
	tr := capTrace{at: []time.Duration{0}, c: []int{ctl.C()}}
	tick := time.NewTicker(scrapeEvery)
	defer tick.Stop()
	for now := range tick.C {
		if now.Sub(begin) > d {
			break
		}
		e, err := r.scrape()
		if err != nil {
			continue
		}
		r.mu.Lock()
		inflight := r.inflight
		r.mu.Unlock()
		c, _ := ctl.Step(autocap.Pool([]autocap.Engine{e}, now, inflight), now)
		if c != tr.c[len(tr.c)-1] {
			tr.at, tr.c = append(tr.at, now.Sub(begin)), append(tr.c, c)
			r.setTarget(c)
		}
	}
	pre := r.sim.Stats().Preemptions
	cancel()
	<-done
	return tr, pre
}

// settleOf is when C entered ±10 % of want for good, the farthest C went
// beyond want on the side opposite to where it started (overshoot, in %
// of want), and the changes of direction after settling.
func settleOf(tr capTrace, want int) (at time.Duration, overshoot float64, reversals int) {
	lo, hi := 0.9*float64(want), 1.1*float64(want)
	at = -1
	for i := range tr.c {
		if in := float64(tr.c[i]) >= lo && float64(tr.c[i]) <= hi; in && at < 0 {
			at = tr.at[i]
		} else if !in {
			at = -1
		}
	}
	up := tr.c[0] < want
	for _, c := range tr.c {
		if up {
			overshoot = math.Max(overshoot, float64(c-want)/float64(want)*100)
		} else {
			overshoot = math.Max(overshoot, float64(want-c)/float64(want)*100)
		}
	}
	dir := 0
	for i := 1; i < len(tr.c); i++ {
		if at < 0 || tr.at[i] <= at {
			continue
		}
		d := 1
		if tr.c[i] < tr.c[i-1] {
			d = -1
		}
		if dir != 0 && d != dir {
			reversals++
		}
		dir = d
	}
	return at, overshoot, reversals
}

// convergeGateway runs a gateway with an auto pool (scheduler "gateway":
// at most C in flight) in front of vllmsim, its capacity loop reading the
// engine's /metrics, under 150 closed-loop clients, from C = start.
func convergeGateway(b *testing.B, start int, d time.Duration) (capTrace, int64) {
	sim := vllmsim.New(vllmsim.Config{APIKey: gatewaytest.UpstreamKey, StepInterval: simStep,
		Sched: vllmsim.SchedConfig{MaxNumSeqs: 512, KVBlocks: simBlocks}})
	hs := httptest.NewServer(sim)
	defer func() { hs.CloseClientConnections(); sim.Close(); hs.Close() }()
	e := newEnv(b, []string{hs.URL}, "", func(o *Options) {
		p := &o.Config.Pools[0]
		p.Engine, _ = engine.New("vllm", engine.Options{Scheduler: "gateway"})
		p.Reclaim, p.Headroom, p.QueueTimeout = engine.ReclaimNone, 0, time.Minute
		p.Auto = &config.AutoCapacity{Min: 2, Max: 400, KVTarget: autocap.DefaultKVTarget, Interval: scrapeEvery,
			Hold: convergeParams.Hold, Headroom: -1}
		p.Capacity = start
		o.Capacities = map[string]int{"p": start}
	})
	ctx, cancel := context.WithCancel(context.Background())
	e.gw.Start(ctx)
	pl := e.gw.pools["p"]
	prompt := strings.Repeat("x", 4*promptToks)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var wg sync.WaitGroup
	for i := range 150 {
		rng := rand.New(rand.NewPCG(22, uint64(i)))
		wg.Go(func() {
			for ctx.Err() == nil {
				body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": minAnswer + rng.IntN(maxAnswer-minAnswer+1)})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+e.key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	begin := time.Now()
	tr := capTrace{at: []time.Duration{0}, c: []int{pl.fs.Capacity()}}
	tick := time.NewTicker(scrapeEvery / 5)
	for now := range tick.C {
		if now.Sub(begin) > d {
			break
		}
		if c := pl.fs.Capacity(); c != tr.c[len(tr.c)-1] {
			tr.at, tr.c = append(tr.at, now.Sub(begin)), append(tr.c, c)
		}
	}
	tick.Stop()
	pre := sim.Stats().Preemptions
	cancel()
	wg.Wait()
	return tr, pre
}

func BenchmarkConvergence(b *testing.B) {
	for range b.N {
		// C*: the largest C without preemption, by bisection.
		lo, hi := 8, 128
		var probes []string
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			n := preemptsAt(b, mid, 1500*time.Millisecond, 3*time.Second)
			if n == 0 {
				lo = mid
			} else {
				hi = mid
			}
			probes = append(probes, fmt.Sprintf("C %d: %d preemptions", mid, n))
		}
		cstar := lo
		b.Logf("C* = %d (%s)", cstar, strings.Join(probes, ", "))
		b.ReportMetric(float64(cstar), "C*")
		for _, mode := range []string{"controller", "gateway"} {
			for _, st := range []struct {
				name  string
				start int
			}{{"half", cstar / 2}, {"twice", 2 * cstar}} {
				var tr capTrace
				var pre int64
				if mode == "controller" {
					tr, pre = convergeFrom(b, st.start, 30*time.Second)
				} else {
					tr, pre = convergeGateway(b, st.start, 30*time.Second)
				}
				at, over, rev := settleOf(tr, cstar)
				b.Logf("%s from %s (%d): C over time %v %v; within 10 %% at %v, overshoot %.1f %%, reversals after %d, final %d, preemptions %d",
					mode, st.name, st.start, tr.at, tr.c, at, over, rev, tr.c[len(tr.c)-1], pre)
				b.ReportMetric(at.Seconds(), mode+"_settle_s_"+st.name)
				b.ReportMetric(over, mode+"_overshoot_%_"+st.name)
				b.ReportMetric(float64(tr.c[len(tr.c)-1]), mode+"_final_"+st.name)
			}
		}
	}
}
