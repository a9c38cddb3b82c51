package gateway

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
)

// BudgetStore is what the gateway reads of a store for budgets: the
// budgets and increases admins set (package admin writes them), and the
// spend of a scope from the hourly rollups.
type BudgetStore interface {
	ListBudgets(ctx context.Context) ([]budgets.Budget, error)
	Increases(ctx context.Context, now time.Time) ([]budgets.Increase, error)
	// BudgetSpend returns the stored GPU-hours of sc from from on: per
	// hour from recent on, as one sum before.
	BudgetSpend(ctx context.Context, sc budgets.Scope, from, recent time.Time) (budgets.StoredSpend, error)
}

// AlertSink is told when a budget first reaches its soft limit in a
// period (budgets.Crossing). The alerts package makes the delivery
// durable; the gateway calls it off the request path, at most once per
// budget and period in a process (a restart may call it again for a
// period already alerted: the sink deduplicates by budget and period).
type AlertSink interface {
	SoftLimitCrossed(ctx context.Context, c budgets.Crossing)
}

// staleAfter is how many failed refreshes in a row make the budget state
// stale: then requests are refused (store.fail_closed) and /healthz says
// why.
const staleAfter = 3

// budgetState is the gateway's side of budgets and per-key limits: the
// ledger, the refresh from the store, and the fail-closed state.
type budgetState struct {
	store BudgetStore
	slurm func() []budgets.Budget
	// mem is the gateway's ledger: the budgets in force, the keys'
	// states and this gateway's figures. Requests reserve through their
	// pool's shared admission (admission.Source), which composes it.
	mem    *budgets.Mem
	alerts AlertSink
	tags   map[string]bool // allowed header tags
	header string          // the allow-listed tag header; "" = none

	// replicas keeps the heartbeats of the replicas sharing the store
	// without Redis (nil: none): each enforces its 1/live slice
	replicas    ReplicaStore
	replica     string
	beat        time.Duration
	beatFailing atomic.Bool // logged once per run of failed heartbeats

	every     time.Duration // store.budget_refresh_interval
	refreshMu sync.Mutex    // one refresh at a time
	failures  atomic.Int32
	loaded    atomic.Bool
	stale     atomic.Bool
	lastErr   atomic.Pointer[string]
	lastOK    atomic.Int64 // unix nanos of the last good refresh

	refused   *prometheus.CounterVec // reason
	lowered   prometheus.Counter
	refreshes *prometheus.CounterVec // outcome
}

// Budget refusal reasons, in llmflow_denied_total and
// llmflow_budget_refusals_total.
const (
	reasonBudget      = "budget"
	reasonRPM         = "rpm"
	reasonTPM         = "tpm"
	reasonMaxInFlight = "max_inflight"
	reasonStale       = "budget_stale"
	reasonBadTags     = "bad_tags"
)

func newBudgetState(o Options, cfg *config.Config, reg prometheus.Registerer) *budgetState {
	b := &budgetState{store: o.Budgets, slurm: o.SlurmBudgets, alerts: o.Alerts, header: cfg.Tags.Header,
		every:    cmp.Or(cfg.Store.BudgetRefresh, config.DefaultBudgetRefresh),
		replicas: o.Replicas, replica: o.Replica, beat: cmp.Or(o.ReplicaBeat, 2*time.Second)}
	b.mem = budgets.NewMem(cfg.Limits.MaxRequestDuration)
	if len(cfg.Tags.Allowed) > 0 {
		b.tags = make(map[string]bool, len(cfg.Tags.Allowed))
		for _, t := range cfg.Tags.Allowed {
			b.tags[t] = true
		}
	}
	b.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmflow_budget_refusals_total", Help: "Requests refused by a budget or a per-key limit, by reason (budget, rpm, tpm, max_inflight, budget_stale).",
	}, []string{"reason"})
	b.lowered = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmflow_budget_output_lowered_total", Help: "Requests whose output limit was lowered to what their budgets could still pay for.",
	})
	b.refreshes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmflow_budget_refreshes_total", Help: "Reads of the budgets and their spend from the store, by outcome (ok, failed).",
	}, []string{"outcome"})
	for _, r := range []string{reasonBudget, reasonRPM, reasonTPM, reasonMaxInFlight, reasonStale} {
		b.refused.WithLabelValues(r)
	}
	b.refreshes.WithLabelValues("ok")
	b.refreshes.WithLabelValues("failed")
	reg.MustRegister(b.refused, b.lowered, b.refreshes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_budget_held_gpu_hours", Help: "GPU-hours held by requests in flight, summed over the budgets in force.",
		}, func() float64 { return b.mem.Table().Held() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_budget_stale", Help: "1 when the budgets could not be read from the store for 3 refresh intervals.",
		}, func() float64 {
			if b.stale.Load() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_budgets", Help: "Budgets in force.",
		}, func() float64 { return float64(b.mem.Table().Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_budget_slice", Help: "What budgets and key limits are divided by: the live replicas sharing the store without Redis (1: the whole).",
		}, func() float64 { return float64(b.mem.Slice()) }),
	)
	return b
}

// enabled reports whether budgets are read from a store.
func (b *budgetState) enabled() bool { return b.store != nil }

// refresh reads the budgets, the increases and every budget's spend, and
// puts them in force. After staleAfter failures in a row the state is
// stale.
func (g *Gateway) refreshBudgets(ctx context.Context) error {
	b := g.bud
	if !b.enabled() {
		return nil
	}
	b.refreshMu.Lock()
	defer b.refreshMu.Unlock()
	err := g.readBudgets(ctx)
	if err != nil {
		b.refreshes.WithLabelValues("failed").Inc()
		msg := err.Error()
		b.lastErr.Store(&msg)
		if b.failures.Add(1) >= staleAfter && !b.stale.Swap(true) {
			g.log.Error("budgets stale: the store could not be read", "failures", staleAfter, "err", err, "fail_closed", g.cfg.Store.FailClosed)
		} else {
			g.log.Warn("budget refresh failed", "err", err)
		}
		return err
	}
	b.refreshes.WithLabelValues("ok").Inc()
	b.failures.Store(0)
	b.lastOK.Store(g.now().UnixNano())
	b.loaded.Store(true)
	if b.stale.Swap(false) {
		g.log.Info("budgets readable again")
	}
	return nil
}

func (g *Gateway) readBudgets(ctx context.Context) error {
	b := g.bud
	now := g.now()
	admin, err := b.store.ListBudgets(ctx)
	if err != nil {
		return fmt.Errorf("read budgets: %w", err)
	}
	var slurm []budgets.Budget
	if b.slurm != nil {
		slurm = b.slurm()
	}
	incs, err := b.store.Increases(ctx, now)
	if err != nil {
		return fmt.Errorf("read budget increases: %w", err)
	}
	all := budgets.Merge(admin, slurm)
	type read struct {
		sc    budgets.Scope
		start time.Time
		st    budgets.StoredSpend
	}
	reads := make([]read, 0, len(all))
	recent := b.mem.RecentFrom(now)
	for _, bu := range all {
		start := bu.Period.Start(now)
		st, err := b.store.BudgetSpend(ctx, bu.Scope, start, recent)
		if err != nil {
			return fmt.Errorf("read spend of %s: %w", bu.Scope, err)
		}
		reads = append(reads, read{bu.Scope, start, st})
	}
	b.mem.Apply(all, incs, now)
	for _, r := range reads {
		b.mem.Refresh(r.sc, r.start, r.st, now)
	}
	return nil
}

// budgetLoop refreshes the budgets every store.budget_refresh_interval,
// and beats the replica's heartbeat (replicaLoop), until ctx ends.
func (g *Gateway) budgetLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { g.replicaLoop(ctx) })
	if !g.bud.enabled() {
		return
	}
	every := g.bud.every
	t := time.NewTicker(every)
	defer t.Stop()
	// Periods end at UTC midnight: refresh then too, so a new day, week or
	// month starts from its own spend at once.
	midnight := time.NewTimer(untilMidnight(g.now()))
	defer midnight.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-midnight.C:
			midnight.Reset(untilMidnight(g.now()))
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		g.refreshBudgets(rctx)
		cancel()
	}
}

// untilMidnight is the time from now to just after the next UTC midnight.
func untilMidnight(now time.Time) time.Duration {
	return budgets.Day.End(budgets.Day.Start(now)).Sub(now) + 10*time.Millisecond
}

// health is what /healthz says of budgets: "ok", "off" (no store),
// "loading", or "stale: …"; detail adds the last store error (for the
// operator's view only: it may name hosts).
func (b *budgetState) health(detail bool) (string, bool) {
	switch {
	case !b.enabled():
		return "off", true
	case b.stale.Load():
		msg := "stale: the store could not be read for " + strconv.Itoa(staleAfter) + " refresh intervals"
		if e := b.lastErr.Load(); e != nil && detail {
			msg += " (" + *e + ")"
		}
		return msg, false
	case !b.loaded.Load():
		return "loading", false
	}
	return "ok", true
}

// keyChain is a key's budget chain and limit state, cached on its key
// cache entry (cachedKey.chain) for one table and organisation.
type keyChain struct {
	chain *budgets.Chain
	org   string
	ks    *budgets.KeyState
}

// budgetReq is an exchange's part of budgets and limits.
type budgetReq struct {
	req   budgets.Request
	slots [12]*budgets.Slot // backing array of req.Slots
	tags  []string          // the request's tags: the key's and the header's; nil = the key's
}

// requestTags returns x's tags: the key's, and those of the allow-listed
// header.
func (x *exchange) requestTags() []string {
	if x.bud.tags != nil {
		return x.bud.tags
	}
	if x.key != nil {
		return x.key.Tags
	}
	return nil
}

// admitTags reads the allow-listed tag header: comma-separated tags, each
// allowed, at most config.MaxRequestTags; anything else is a 400.
func (g *Gateway) admitTags(_ context.Context, x *exchange) error {
	b := g.bud
	if b.header == "" {
		return nil
	}
	vals := x.r.Header.Values(b.header)
	if len(vals) == 0 {
		return nil
	}
	tags := append(make([]string, 0, len(x.key.Tags)+config.MaxRequestTags), x.key.Tags...)
	n := 0
	for _, v := range vals {
		for t := range strings.SplitSeq(v, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			n++
			if n > config.MaxRequestTags {
				return headerError(b.header, fmt.Sprintf("at most %d tags per request", config.MaxRequestTags))
			}
			if !b.tags[t] {
				return headerError(b.header, fmt.Sprintf("tag %s is not allowed", quote(truncate(t, 100))))
			}
			dup := false
			for _, u := range tags {
				dup = dup || u == t
			}
			if !dup {
				tags = append(tags, t)
			}
		}
	}
	x.bud.tags = tags
	return nil
}

func headerError(header, msg string) error {
	e := llmflow.Errorf(llmflow.EINVALID, "%s header: %s", header, msg)
	e.Param = header
	return e
}

// budgetRefusal is a refusal by a budget or a limit: a 429 (Retry-After
// for the rate limits) whose denial reason is its own.
type budgetRefusal struct {
	err    *llmflow.Error
	reason string
}

func (e *budgetRefusal) Error() string        { return e.err.Error() }
func (e *budgetRefusal) Unwrap() error        { return e.err }
func (e *budgetRefusal) deniedReason() string { return e.reason }

var errBudgetStale = &budgetRefusal{reason: reasonStale, err: &llmflow.Error{Code: llmflow.EUNAVAILABLE,
	Message: "budgets cannot be checked: the store could not be read (fail closed); retry later"}}

var errBudgetLoading = &budgetRefusal{reason: reasonStale, err: &llmflow.Error{Code: llmflow.EUNAVAILABLE,
	Message: "budgets are not loaded yet (fail closed); retry later"}}

// admitBudget is the budgets and limits step: it refuses while the
// budgets cannot be read (fail closed) and makes the request's budget
// request (x.adm.Budget; nil when neither a budget nor a key limit
// applies): its maximum cost on every budget it falls under and its key's
// limits. The shared step reserves it with the request's fair-share
// place, in one call: a hold of that cost on every budget (lowering the
// output limit when a budget cannot pay for all of it), the key's
// in-flight slot and rate-window share.
func (g *Gateway) admitBudget(_ context.Context, x *exchange) error {
	b := g.bud
	x.adm.Budget = nil
	if b.enabled() && g.cfg.Store.FailClosed {
		if b.stale.Load() {
			b.refused.WithLabelValues(reasonStale).Inc()
			return withRetryAfter(errBudgetStale, b.every)
		}
		if !b.loaded.Load() {
			b.refused.WithLabelValues(reasonStale).Inc()
			return withRetryAfter(errBudgetLoading, b.every)
		}
	}
	k := x.key
	limits := budgets.KeyLimits{RPM: k.RPM, TPM: k.TPM, MaxInFlight: k.MaxInFlight}
	t := b.mem.Table()
	if t.Len() == 0 && !limits.Any() {
		return nil
	}
	kc := x.chain(t, b)
	r := &x.bud.req
	r.Slots = kc.chain.Select(x.rt.name, x.bud.slots[:0])
	if x.bud.tags != nil {
		for _, tag := range x.bud.tags[len(k.Tags):] {
			r.Slots = t.TagSlots(tag, x.rt.name, r.Slots)
		}
	}
	if len(r.Slots) == 0 && !limits.Any() {
		return nil
	}
	r.Key, r.Limits, r.Start = kc.ks, limits, x.start
	rq, rt := x.rq, x.rt
	if len(r.Slots) > 0 {
		if f := cmp.Or(rq.badOutput, rq.badSeqs); f != "" {
			return invalid(f, "%s must be a positive integer", f)
		}
	}
	inPrice := max(rt.cost.InputPerMTok, rt.cost.CachedPerMTok)
	r.PromptCost = float64(x.promptBound()) * inPrice / 1e6
	// The output limit bounds each sequence the engine generates (n,
	// best_of, a list of prompts): a token of it costs that many.
	r.OutputCost = rt.cost.OutputPerMTok / 1e6 * float64(rq.seqs)
	r.WantOutput = 0
	switch {
	case x.ep == engine.Embeddings:
	case rq.maxOutput > 0:
		r.WantOutput = min(rq.maxOutput, rt.maxTokens)
	case x.ep == engine.Completions:
		r.WantOutput = legacyDefaultMaxTokens
	default:
		r.WantOutput = rt.maxOutput
	}
	// The key's TPM window holds the prompt's bound and the output's, as
	// budgets do; Settle corrects it to the real count.
	r.Tokens = x.promptBound() + r.WantOutput*rq.seqs
	x.adm.Budget = r
	return nil
}

// budgetReserved records the reservation the shared admission made for x
// and bounds x's output by what was held.
func (g *Gateway) budgetReserved(x *exchange) {
	r, rq := &x.bud.req, x.rq
	if len(r.Slots) > 0 && r.WantOutput > 0 && r.Output != rq.maxOutput {
		// Bound what the engine may generate by what was held: a lowered
		// limit, a client's beyond the model's context, or none given.
		x.outputLimit = r.Output
		if r.Lowered {
			g.bud.lowered.Inc()
		}
	}
}

// legacyDefaultMaxTokens is /v1/completions' max_tokens when the client
// gives none (OpenAI's and vLLM's default).
const legacyDefaultMaxTokens = 16

// budgetRefused maps a ledger refusal (a *budgets.Refusal) to the
// client's 429.
func (g *Gateway) budgetRefused(err error) error {
	rf, ok := err.(*budgets.Refusal)
	if !ok {
		return &llmflow.Error{Code: llmflow.EUNAVAILABLE, Message: "budgets cannot be checked; retry later", Err: err}
	}
	g.bud.refused.WithLabelValues(rf.Reason).Inc()
	e := &budgetRefusal{reason: rf.Reason, err: &llmflow.Error{Code: llmflow.ERATELIMIT, Message: rf.Message}}
	if rf.Reason == reasonBudget {
		return budgetExhausted(e, rf, g.now())
	}
	return withRetryAfter(e, rf.RetryAfter)
}

// heldRetry is the Retry-After of a budget refusal while requests in
// flight hold part of the budget: one may settle for less than it holds.
const heldRetry = 5 * time.Second

// budgetExhausted says when retrying a request an exhausted budget
// refused can help: soon while requests in flight hold part of it
// (Retry-After: heldRetry), else not before its period ends (Retry-After
// until then, and, further than a minute, x-should-retry: false with
// OpenAI's insufficient_quota code: the SDKs would retry a 429 at once
// for nothing).
func budgetExhausted(e *budgetRefusal, rf *budgets.Refusal, now time.Time) error {
	e.err.Message += " (what is left does not pay for the prompt and one output token)"
	if rf.Held {
		e.err.Message += "; requests in flight hold part of it: retry shortly"
		return withRetryAfter(e, heldRetry)
	}
	reset := rf.Reset.Sub(now)
	if reset <= 0 {
		return withRetryAfter(e, time.Second)
	}
	if reset <= time.Minute {
		return withRetryAfter(e, reset)
	}
	e.err.Code = equota
	e.err.Message += "; it starts afresh at " + rf.Reset.UTC().Format(time.RFC3339) + " unless an administrator raises it"
	return &noRetry{withRetryAfter(e, reset)}
}

// endTime is when x's settlement counts: the end finish set, else (a later
// admission step refused it) now.
func (g *Gateway) endTime(x *exchange) time.Time {
	if x.end.IsZero() {
		return g.now()
	}
	return x.end
}

// chain returns the key's budget chain for table t, computing it once per
// key, table and organisation.
func (x *exchange) chain(t *budgets.Table, b *budgetState) *keyChain {
	if x.ck != nil {
		if kc := x.ck.chain.Load(); kc != nil && kc.chain.Gen == t.Gen() && kc.org == x.org {
			return kc
		}
	}
	k := x.key
	kc := &keyChain{chain: t.Chain(x.org, k.Team, k.Project, k.ID, k.Owner, k.Tags), org: x.org, ks: b.mem.Key(k.ID)}
	if x.ck != nil {
		x.ck.chain.Store(kc)
	}
	return kc
}

// outputHeader says, on an answer whose output limit a budget lowered,
// the limit the engine was given.
const outputHeader = "X-LLMflow-Budget-Max-Tokens"

func (g *Gateway) setBudgetHeaders(w http.ResponseWriter, x *exchange) {
	if x.admitted && x.adm.Budget != nil && x.bud.req.Lowered { // the shared admission holds req
		w.Header()[outputHeader] = []string{strconv.FormatInt(x.bud.req.Output, 10)}
	}
}

// ReplicaStore keeps the heartbeats of the replicas sharing a store
// without Redis (store.Heartbeat).
type ReplicaStore interface {
	// Heartbeat renews replica's heartbeat until now + ttl and returns
	// how many replicas are live, this one included.
	Heartbeat(ctx context.Context, replica string, now time.Time, ttl time.Duration) (int, error)
}

// replicaLoop beats the replica's heartbeat every beat until ctx ends.
func (g *Gateway) replicaLoop(ctx context.Context) {
	if g.bud.replicas == nil {
		return
	}
	t := time.NewTicker(g.bud.beat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.heartbeat(ctx)
		}
	}
}

// heartbeat renews the replica's heartbeat (three beats long) and slices
// budgets and key limits among the live replicas: with n of them sharing
// the store without Redis, each may spend 1/n of what is left of a
// budget and admit 1/n of a key's rate and concurrency (budgets.Mem
// SetSlice), so that together they hold what one gateway would. A store
// that does not answer keeps the last slice.
func (g *Gateway) heartbeat(ctx context.Context) {
	b := g.bud
	ctx, cancel := context.WithTimeout(ctx, b.beat)
	defer cancel()
	n, err := b.replicas.Heartbeat(ctx, b.replica, g.now(), 3*b.beat)
	if err != nil {
		if !b.beatFailing.Swap(true) {
			g.log.Warn("replica heartbeat failed: budgets and key limits keep their slice", "slice", b.mem.Slice(), "err", err)
		}
		return
	}
	if b.beatFailing.Swap(false) {
		g.log.Info("replica heartbeat works again", "replicas", n)
	}
	if was := b.mem.Slice(); int64(n) != was {
		g.log.Info("replicas sharing the store without redis: budgets and key limits sliced", "replicas", n, "was", was)
		b.mem.SetSlice(int64(n))
	}
}

// startBudgets loads the budgets once before serving, so they hold from
// the first request (sliced among the replicas sharing the store), and
// wires soft-limit crossings to the alert sink.
func (g *Gateway) startBudgets(ctx context.Context) {
	b := g.bud
	b.mem.OnCrossing = func(c budgets.Crossing) {
		g.log.Warn("budget soft limit reached", "budget", c.BudgetID, "period", c.Period, "period_start", c.PeriodStart,
			"spent", c.Spent, "soft_limit", c.SoftLimit, "limit", c.Limit)
		if b.alerts != nil {
			go b.alerts.SoftLimitCrossed(context.WithoutCancel(ctx), c)
		}
	}
	if b.replicas != nil {
		g.heartbeat(ctx)
	}
	if !b.enabled() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, max(b.every, 5*time.Second))
	defer cancel()
	g.refreshBudgets(rctx)
}
