// Package gateway is llmflow's HTTP server: the OpenAI-compatible client
// routes (auth, body rewrite, priority, routing, streaming, accounting) and
// the admin API. It declares the small store interfaces it uses; the
// command line wires a concrete store in.
package gateway

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/accounting"
	"github.com/go-llmflow/llmflow/admission"
	"github.com/go-llmflow/llmflow/budgets"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Pinger is a store that can report its health (Options.Pinger).
type Pinger interface {
	Ping(ctx context.Context) error
}

// ShareUsageStore keeps fair-share usage across restarts.
type ShareUsageStore interface {
	SaveShareUsage(ctx context.Context, pool string, at time.Time, usage []llmflow.ShareUsage) error
	ShareUsage(ctx context.Context, pool string) ([]llmflow.ShareUsage, time.Time, error)
}

// Options configure a Gateway. Config and Keys are required.
type Options struct {
	Config *config.Config
	// Keys looks client keys up by their hash (package admin creates,
	// lists and revokes them).
	Keys KeyLookup
	// Records receives accounting records through a bounded queue; nil
	// keeps none (tests only: serve always has a store).
	Records RecordWriter
	// Pinger is asked by /healthz whether the store answers (within 2 s):
	// when it does not, "store" is "unreachable" and the status degraded
	// (unavailable with store.fail_closed); nil = the store is not pinged.
	Pinger Pinger
	// ClampCounter counts the records the store clamped rather than
	// refused (llmflow.Record.ClampUsage), exported as
	// llmflow_accounting_clamped_total; nil = that metric is absent.
	ClampCounter ClampCounter
	// ShareUsage keeps the decayed fair-share usage across restarts; nil
	// keeps it in memory only.
	ShareUsage ShareUsageStore
	// Accounts is the organisation tree; nil = Config.Accounts().
	// SetAccounts replaces it while serving (a Slurm sync).
	Accounts llmflow.Accounts
	// Registry receives the gateway's metrics and is served at /metrics;
	// nil = a new registry.
	Registry *prometheus.Registry
	Log      *slog.Logger
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// Transport, when set, replaces every pool's transport (tests).
	Transport http.RoundTripper
	// KeyCacheSize bounds the valid-key and the miss caches; 0 = 100000.
	KeyCacheSize int
	// KeyCacheTTL is how long a cached key is trusted before it is read
	// again; 0 = 1 minute.
	KeyCacheTTL time.Duration
	// Version is reported by /healthz and in the upstream User-Agent;
	// "" = "dev".
	Version string
	// Admissions gives each pool the state its admissions share (its
	// fair-share counters and, with the gateway's budget ledger, one
	// admit and one release per request: admission.Shared) and reports
	// on it in /healthz's "shared" block (a fallback makes it
	// "degraded"). It outlives the gateway: a reload keeps the counts
	// and the usage. Several replicas share theirs through it
	// (redisstate.Shared); nil = in this process, for this gateway alone
	// (admission.NewMemSource).
	Admissions admission.Source
	// AccountChanges are the changes made through the admin API (package
	// admin) on top of Accounts, as the store keeps them: served from the
	// first view of the tree, so fair-share usage restored at start finds
	// the accounts created there. SetAccountChanges replaces them while
	// serving.
	AccountChanges []llmflow.AdminAccount
	// Recorder, when set, is the accounting queue to use instead of one
	// over Records: it outlives the gateway (serve keeps one across
	// configuration reloads), so Close does not close it; its OnWrite
	// should call AccountingWritten. Records is then not used.
	Recorder *accounting.Queue
	// KeepUsage skips loading the saved fair-share usage: Admissions
	// already hold it (a reload sharing them).
	KeepUsage bool
	// Capacities are where the pools with capacity = "auto" start, by
	// name (a reload carries the capacities the previous generation had
	// reached: Gateway.Capacities); a pool not in it starts at its min.
	Capacities map[string]int

	// Budgets keeps the budgets and their increases, and reads their
	// spend; nil = no budgets (per-key limits still hold).
	Budgets BudgetStore
	// SlurmBudgets, when set, returns the budgets that come from Slurm
	// (accounts' GrpTRESMins) at each refresh; budgets.Merge puts an
	// admin-set budget on the same scope first.
	SlurmBudgets func() []budgets.Budget
	// Alerts is told when a budget first reaches its soft limit in a
	// period; nil = nobody.
	Alerts AlertSink
	// Replicas, for replicas sharing a store without Redis, keeps their
	// heartbeats: each enforces a 1/live slice of every budget and key
	// limit (budgets.go); nil = off. Replica names this process there
	// and ReplicaBeat is how often it beats (0: 2 s; the heartbeat lasts
	// three).
	Replicas    ReplicaStore
	Replica     string
	ReplicaBeat time.Duration
}

// ClampCounter is a record writer that clamps impossible usage
// (llmflow.Record.ClampUsage) rather than fail a batch
// (Options.ClampCounter).
type ClampCounter interface {
	ClampedRecords() int64
}

// Gateway serves the client routes (/v1/*, /healthz, /metrics). Create it with New, start
// its health checks with Start, stop with Close.
type Gateway struct {
	cfg *config.Config
	// proxies are limits.trusted_proxies; proxied caps the requests they
	// forward per client network (nil: no such cap), refusals limits the
	// log of refused connections (proxies.go)
	proxies    trustedProxies
	proxied    *proxiedLimit
	refusals   refusalLog
	keys       KeyLookup
	pinger     Pinger // nil: /healthz does not ping the store
	rec        *accounting.Queue
	ownRec     bool // rec was made by New: Close closes it
	usage      ShareUsageStore
	admissions admission.Source
	accts      atomic.Pointer[accountView]
	sync       *syncState
	log        *slog.Logger
	now        func() time.Time
	reg        *prometheus.Registry
	m          *metrics
	auth       *authenticator
	secretAuth *operatorAuth // operator secrets: master key, metrics token

	// state set through the control surface (control.go)
	tree       adminTree                  // base tree and admin changes
	modelLists atomic.Pointer[teamModels] // nil: no team has a model list

	routes    map[string]*route // configured models; aliases and runtime upstreams: routing
	routing   *routingState
	models    []modelCard
	pools     map[string]*pool
	poolOrder []*pool // as configured
	backends  []*backend
	saltKey   string // cache_salt derivation secret

	steps          []step // admission, in order (admission.go)
	bud            *budgetState
	health         *healthChecker
	metricsHandler http.Handler
	version        string
	userAgent      []string // "llmflow/<version>", sent upstream
	mux            *http.ServeMux
	reqSeq         atomic.Uint64
	reqPfx         string
	started        time.Time
	cancel         context.CancelFunc
	done           chan struct{}
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// New builds a gateway from a checked configuration. It reads the secret
// files the configuration names.
func New(o Options) (*Gateway, error) {
	if o.Config == nil || o.Keys == nil {
		return nil, fmt.Errorf("new gateway: Config and Keys are required")
	}
	g := &Gateway{
		cfg:     o.Config,
		keys:    o.Keys,
		pinger:  o.Pinger,
		usage:   o.ShareUsage,
		log:     cmp.Or(o.Log, slog.New(slog.DiscardHandler)),
		now:     o.Now,
		reg:     o.Registry,
		version: cmp.Or(o.Version, "dev"),
		routes:  make(map[string]*route),
		pools:   make(map[string]*pool),
	}
	if g.now == nil {
		g.now = time.Now
	}
	if lim := o.Config.Limits; len(lim.TrustedProxies) > 0 {
		g.proxies = lim.TrustedProxies
		if lim.MaxConnectionsPerNetwork > 0 {
			g.proxied = &proxiedLimit{max: lim.MaxConnectionsPerNetwork, byNet: make(map[netip.Prefix]int)}
		}
	}
	if g.admissions = o.Admissions; g.admissions == nil {
		g.admissions = admission.NewMemSource()
	}
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
	}
	g.started = g.now()
	g.userAgent = []string{"llmflow/" + g.version}
	var pfx [6]byte
	rand.Read(pfx[:])
	g.reqPfx = "req_" + hex.EncodeToString(pfx[:])

	if err := g.loadSecrets(); err != nil {
		return nil, err
	}
	g.tree.changes = slices.Clone(o.AccountChanges)
	accts := o.Accounts
	if accts == nil {
		accts = g.cfg.Accounts()
	}
	g.m = newMetrics(g.reg)
	g.sync = newSyncState(g.reg, g.cfg.Slurm != nil)
	view := g.setView(accts)
	g.auth = newAuthenticator(o, g.cfg.Limits, g.m)
	g.bud = newBudgetState(o, g.cfg, g.reg)
	if err := g.newPools(o, view); err != nil {
		return nil, err
	}
	if err := g.newRoutes(); err != nil {
		return nil, err
	}
	g.initRouting() // routing.go
	g.registerGauges()
	g.registerAccountingMetrics()
	g.initSeries()
	g.reg.MustRegister(newShareCollector(g), newBudgetCollector(g.bud))
	g.metricsHandler = promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)})
	if o.Recorder != nil {
		g.rec = o.Recorder
	} else if o.Records != nil {
		g.ownRec = true
		g.rec = accounting.New(o.Records, accounting.Options{
			QueueSize: g.cfg.Store.QueueSize, BatchSize: g.cfg.Store.BatchSize, FlushInterval: g.cfg.Store.FlushInterval,
			OnWrite: func(written, failed int) {
				g.m.acctWritten.Add(float64(written))
				g.m.acctFailed.Add(float64(failed))
			},
			Log: g.log,
		})
	}
	if c := o.ClampCounter; c != nil {
		g.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "llmflow_accounting_clamped_total",
			Help: "Accounting records whose usage the store clamped (negative, impossible or beyond its bounds).",
		}, func() float64 { return float64(c.ClampedRecords()) }))
	}
	g.health = &healthChecker{
		userAgent: g.userAgent[0],
		backends:  g.backends,
		client:    func(b *backend) http.RoundTripper { return g.pools[b.pool].transport },
		cfg:       g.cfg.Health,
		now:       g.now,
		onChange: func(b *backend, ok bool) {
			g.log.Info("upstream health changed", "pool", b.pool, "upstream", b.name, "healthy", ok)
		},
	}
	g.steps = g.admissionSteps()
	g.routesInit()
	return g, nil
}

// loadSecrets reads the master key, the metrics token and the cache_salt
// key (the master key when none is configured; random for this process
// when neither is).
func (g *Gateway) loadSecrets() error {
	secret := func(what, path string) (string, error) {
		if path == "" {
			return "", nil
		}
		s, err := config.ReadSecret(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		return s, nil
	}
	master, err := secret("master_key_file", g.cfg.MasterKeyFile)
	if err != nil {
		return err
	}
	mtok, err := secret("metrics_token_file", g.cfg.MetricsTokenFile)
	if err != nil {
		return err
	}
	g.secretAuth = &operatorAuth{
		master:  newSecretMatcher(master),
		metrics: newSecretMatcher(mtok),
		limiter: newFailureLimiter(g.cfg.Limits.AuthFailuresPerMinute, 100_000),
	}
	saltKey, err := secret("cache_salt_key_file", g.cfg.CacheSaltKeyFile)
	if err != nil {
		return err
	}
	if saltKey == "" {
		saltKey = master
	}
	if saltKey == "" {
		var b [32]byte
		rand.Read(b[:])
		saltKey = string(b[:])
		g.log.Warn("no master key or cache_salt_key_file: cache salts are random for this process")
	}
	g.saltKey = saltKey
	return nil
}

// newAuthenticator builds the client key authentication: the two bounded
// caches and the per-network failure limit.
func newAuthenticator(o Options, lim config.Limits, m *metrics) *authenticator {
	size := o.KeyCacheSize
	if size <= 0 {
		size = 100_000
	}
	ttl := o.KeyCacheTTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	return &authenticator{
		store:   o.Keys,
		hits:    newKeyCache(size, ttl),
		misses:  newMissCache(size, 30*time.Second),
		limiter: newFailureLimiter(lim.AuthFailuresPerMinute, 100_000),
		lookups: m.authLookups.Inc,
	}
}

// newPools builds each configured pool: its engine descriptor, fair-share
// state (usage restored from the store), gateway-side queue when its
// engines need one, and transport.
func (g *Gateway) newPools(o Options, view *accountView) error {
	for _, p := range g.cfg.Pools {
		pl := &pool{name: p.Name, capacity: p.Capacity, engine: p.Engine, upstreamSeconds: g.m.upstream.WithLabelValues(p.Name)}
		st := g.admissions.Pool(p.Name, g.cfg.FairShare.HalfLife, g.bud.mem)
		pl.fs = fairshare.NewPoolGPUs(p.Capacity, p.GPUs, view.tree(), st.Counters, g.started)
		pl.shared = st.Shared
		pl.reclaim, pl.victims = p.Reclaim, newReclaimer()
		if p.Engine.Scheduling == engine.GatewayQueue || p.Reclaim != engine.ReclaimNone {
			fs := pl.fs
			pl.queue = newQueue(p.Capacity, p.QueueSize, p.QueueTimeout, func(k queueKey) int {
				return fs.Peek(fairshare.Path{Org: k.org, Team: k.team, Project: k.project, User: k.owner}, k.class)
			}).withHeadroom(p.Headroom)
			pl.queue.priorities = peekAll(fs)
			pl.queue.share = st.Share // nil: the capacity is this gateway's alone
			if st.Share != nil && p.Engine.Scheduling != engine.GatewayQueue {
				pl.queue.borrowRoom = st.Room // nil: a fixed part for borrowers
				if p.Reclaim == engine.ReclaimPreempt {
					pl.queue.shed = g.shedder(pl)
				}
			}
			wait := g.m.queueWait.WithLabelValues(p.Name)
			pl.queue.waitSeconds = func(d time.Duration) { wait.Observe(d.Seconds()) }
		}
		if p.Auto != nil {
			pl.auto = newAutoCapacity(*p.Auto, st.Capacity, g.cfg.Health.Timeout, g.started)
			g.carryCapacity(pl, o.Capacities) // autocap.go
		}
		if !o.KeepUsage { // else the shared counters hold it
			if err := g.restoreUsage(pl); err != nil {
				return err
			}
		}
		pl.transport = o.Transport
		if pl.transport == nil {
			pl.transport = newTransport(max(p.Capacity, autoMax(p.Auto)), g.cfg.Limits)
		}
		g.pools[p.Name] = pl
		g.poolOrder = append(g.poolOrder, pl)
	}
	return nil
}

// newRoutes builds each configured model's route and its upstreams; engines
// shared by several models (one base URL) share one backend state.
func (g *Gateway) newRoutes() error {
	backends := make(map[string]*backend)
	for _, mc := range g.cfg.Models {
		pl := g.pools[mc.Pool]
		if pl == nil {
			return fmt.Errorf("model %q: unknown pool %q", mc.Name, mc.Pool)
		}
		rt := &route{name: mc.Name, upstreamModel: mc.UpstreamModel, pool: pl, cost: mc.Cost, maxTokens: mc.MaxContextTokens}
		if rt.maxTokens <= 0 { // a Config built in code, not parsed
			rt.maxTokens = config.DefaultMaxContextTokens
		}
		rt.maxOutput = mc.MaxOutputTokens
		if rt.maxOutput <= 0 {
			rt.maxOutput = min(config.DefaultMaxOutputTokens, rt.maxTokens)
		}
		if mc.Class == "batch" {
			rt.class = 1
		}
		for _, uc := range mc.Upstreams {
			keyFile := cmp.Or(uc.KeyFile, mc.KeyFile)
			var key string
			if keyFile != "" {
				var err error
				if key, err = config.ReadSecret(keyFile); err != nil {
					return fmt.Errorf("model %q upstream %q key_file: %w", mc.Name, uc.Name, err)
				}
			}
			base := uc.BaseURL.String()
			b := backends[base]
			if b == nil {
				b = &backend{base: base, pool: pl.name, name: uc.Name}
				backends[base] = b
				g.backends = append(g.backends, b)
			}
			u := &upstream{name: uc.Name, b: b}
			for ep := range engine.NumEndpoints {
				var err error
				if u.urls[ep], err = url.Parse(base + ep.Path()); err != nil {
					return fmt.Errorf("model %q upstream %q: %w", mc.Name, uc.Name, err)
				}
			}
			if key != "" {
				u.authHdr = []string{"Bearer " + key}
			}
			rt.configured = append(rt.configured, u)
		}
		if mc.KeyFile != "" { // runtime upstreams get the model's key (routing.go)
			key, err := config.ReadSecret(mc.KeyFile)
			if err != nil {
				return fmt.Errorf("model %q key_file: %w", mc.Name, err)
			}
			rt.authHdr = []string{"Bearer " + key}
		}
		rt.ups.Store(&upstreamSet{list: rt.configured})
		if len(rt.configured) == 0 {
			return fmt.Errorf("model %q has no upstream", mc.Name)
		}
		g.routes[mc.Name] = rt
		g.models = append(g.models, modelCard{ID: mc.Name, Object: "model", Created: g.started.Unix(), OwnedBy: "llmflow"})
	}
	return nil
}

// cacheSalt derives an organisation's vLLM cache_salt from the secret:
// 43 base64url characters (256 bits), so institutions never share prefix
// cache blocks and nobody can guess another's salt.
func cacheSalt(secret, org string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("llmflow cache_salt v1\x00"))
	m.Write([]byte(org))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (g *Gateway) registerGauges() {
	g.reg.MustRegister(newBackendCollector(g), newCapacityCollector(g))
	g.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "llmflow_accounting_queue_length", Help: "Accounting records waiting to be written.",
	}, func() float64 {
		if g.rec == nil {
			return 0
		}
		return float64(g.rec.Len())
	}))
	g.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "llmflow_accounting_dropped_total", Help: "Accounting records dropped because the queue was full.",
	}, func() float64 {
		if g.rec == nil {
			return 0
		}
		_, _, d := g.rec.Counts()
		return float64(d)
	}))
}

// Start loads the budgets, then runs the active health checks and the
// budget refresh until Close.
func (g *Gateway) Start(ctx context.Context) {
	ctx, g.cancel = context.WithCancel(ctx)
	g.done = make(chan struct{})
	g.startBudgets(ctx)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		g.budgetLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		g.health.run(ctx)
	}()
	go func() {
		defer wg.Done()
		g.shareLoop(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.runRuntimeProbes(ctx) // routing.go
	}()
	wg.Go(func() { g.capacityLoop(ctx) }) // autocap.go
	for _, pl := range g.poolOrder {
		if pl.queue != nil && pl.queue.borrowRoom != nil {
			wg.Go(func() { pl.queue.watch(ctx) })
		}
	}
	go func() {
		wg.Wait()
		close(g.done)
	}()
}

// Close stops the health checks and drains the accounting queue (bounded
// by ctx). Call it after the HTTP server has shut down.
func (g *Gateway) Close(ctx context.Context) error {
	if g.cancel != nil {
		g.cancel()
		<-g.done
	}
	var errs []error
	if err := g.saveUsage(ctx); err != nil {
		errs = append(errs, fmt.Errorf("save fair-share usage: %w", err))
	}
	if g.rec != nil && g.ownRec {
		if err := g.rec.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain accounting queue: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Recorder returns the accounting queue (nil without a record writer).
func (g *Gateway) Recorder() *accounting.Queue { return g.rec }

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	closeAfterAmbiguousFraming(w, r)
	if g.proxied != nil { // limits.trusted_proxies (proxies.go)
		done, ok := g.admitProxied(w, r)
		if !ok {
			return
		}
		if done != nil {
			defer done()
		}
	}
	g.mux.ServeHTTP(w, r)
}

// handler is the shape of every route: errors go to writeError.
type handler func(w http.ResponseWriter, r *http.Request) error

func (g *Gateway) handle(method, path string, h handler) {
	g.handleMethods(path, map[string]handler{method: h})
}

// handleMethods serves path with one handler per method; any other method
// gets 405 with Allow, in the OpenAI error shape.
func (g *Gateway) handleMethods(path string, hs map[string]handler) {
	allowed := slices.Sorted(maps.Keys(hs))
	allow := strings.Join(allowed, ", ")
	g.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		h, ok := hs[r.Method]
		if !ok {
			w.Header().Set("Allow", allow)
			writeError(w, g.log, MethodNotAllowed(r.Method, path))
			return
		}
		if err := h(w, r); err != nil {
			writeError(w, g.log, err)
		}
	})
}

func (g *Gateway) routesInit() {
	g.mux = http.NewServeMux()
	for ep := range engine.NumEndpoints {
		g.handle(http.MethodPost, ep.Path(), g.inference(ep))
	}
	g.handle(http.MethodGet, "/v1/models", g.listModels)
	g.handle(http.MethodGet, "/v1/models/{id...}", g.getModel)
	g.handle(http.MethodGet, "/v1/me", g.me) // me.go
	g.handle(http.MethodGet, "/healthz", g.healthz)
	g.handle(http.MethodGet, "/metrics", g.serveMetrics)
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, g.log, NotFound(r))
	})
}

func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request) error {
	ck, err := g.authenticate(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": g.keyModels(&ck.key)})
}

// getModel answers GET /v1/models/{id}: the model's card, or 404 in the
// OpenAI error shape. Model names may contain slashes.
func (g *Gateway) getModel(w http.ResponseWriter, r *http.Request) error {
	ck, err := g.authenticate(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	for _, m := range g.routing.aliases.Load().cards {
		if m.ID == id && !g.modelLists.Load().hidden(ck.key.Team, g.routeOf(id)) && ck.key.AllowsModel(g.routeOf(id).name) {
			return writeJSON(w, http.StatusOK, m)
		}
	}
	e := llmflow.Errorf(llmflow.ENOTFOUND, "the model %q does not exist", id)
	e.Param = "model" // as OpenAI's, and the gateway's other unknown-model errors
	return e
}

// authenticate resolves the client key of r, counting denials.
func (g *Gateway) authenticate(r *http.Request) (*cachedKey, error) {
	ck, err := g.auth.authenticate(r.Context(), r.Header.Get("Authorization"), g.clientAddr(r), g.now())
	if err != nil {
		g.m.denied.WithLabelValues(deniedReason(err, reasonAuth, authByCode)).Inc()
	}
	return ck, err
}

// healthz answers the gateway's health: the status alone ({"status":"ok"},
// "degraded" or "unavailable", and the HTTP status) to anyone, so load
// balancers need no secret; the details (version, store, models, upstreams,
// Slurm import) only with the metrics token or the master key as Bearer. A
// wrong token is an operator-secret failure (counted, throttled) and still
// gets the status.
//
// The answer is 503 when the store is down and store.fail_closed, and when
// a model has no healthy upstream: "degraded" while other models are still
// served, "unavailable" when none is.
func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) error {
	now := g.now()
	type upstreamHealth struct {
		Pool     string `json:"pool"`
		Name     string `json:"name"`
		Healthy  bool   `json:"healthy"`
		InFlight int64  `json:"in_flight"`
	}
	type modelHealth struct {
		Name      string `json:"name"`
		Status    string `json:"status"` // "ok" or "unavailable"
		Healthy   int    `json:"healthy_upstreams"`
		Upstreams int    `json:"upstreams"`
	}
	type details struct {
		Status    string            `json:"status"`
		Version   string            `json:"version"`
		Store     string            `json:"store"`
		Models    []modelHealth     `json:"models"`
		Upstreams []upstreamHealth  `json:"upstreams"`
		Slurm     *syncHealth       `json:"slurm_sync,omitempty"`
		Acct      *acctHealth       `json:"accounting,omitempty"`
		Shared    *admission.Health `json:"shared,omitempty"`
		Budgets   string            `json:"budgets"`
	}
	body := details{Status: "ok", Version: g.version, Store: "ok", Slurm: g.sync.health()}
	if body.Slurm != nil && body.Slurm.Outcome == "failed" {
		body.Status = "degraded" // serving the last good tree
	}
	status := http.StatusOK
	body.Models = make([]modelHealth, 0, len(g.models))
	down := 0
	for _, mc := range g.models {
		rt := g.routes[mc.ID]
		ups := rt.upstreams()
		mh := modelHealth{Name: mc.ID, Status: "ok", Upstreams: len(ups)}
		for _, u := range ups {
			if u.b.up(now) {
				mh.Healthy++
			}
		}
		if mh.Healthy == 0 {
			mh.Status = "unavailable"
			down++
		}
		body.Models = append(body.Models, mh)
	}
	if down > 0 {
		status = http.StatusServiceUnavailable
		body.Status = "degraded"
		if down == len(g.models) {
			body.Status = "unavailable"
		}
	}
	if p := g.pinger; p != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		err := p.Ping(ctx)
		cancel()
		if err != nil {
			g.log.Warn("store ping failed", "err", err)
			body.Store = "unreachable"
			if body.Status == "ok" {
				body.Status = "degraded"
			}
			// Requests are served on (keys cached, records in the spool):
			// unavailable only when there is no spool to take the records.
			if g.cfg.Store.FailClosed && (g.rec == nil || !g.rec.Health().Spool) {
				body.Status = "unavailable"
				status = http.StatusServiceUnavailable
			}
		}
	}
	if body.Acct = g.accountingHealth(&body.Status, &status); body.Acct != nil && body.Acct.Store == "failing" && body.Store == "ok" {
		body.Store = "write_failing"
	}
	if sh := g.admissions.Health(); sh != nil {
		body.Shared = sh
		if sh.Status != "ok" && body.Status == "ok" {
			body.Status = "degraded" // serving on this replica's slice
		}
	}
	summary, budgetsOK := g.bud.health(false)
	body.Budgets, _ = g.bud.health(true)
	if !budgetsOK && g.cfg.Store.FailClosed {
		// requests are refused (admitBudget): say so, and why
		body.Status = "unavailable"
		status = http.StatusServiceUnavailable
	}
	if hdr := r.Header.Get("Authorization"); hdr != "" {
		if _, err := g.secretAuth.check(hdr, g.clientAddr(r), now, secretMaster|secretMetrics, errOperatorAuth); err != nil {
			g.operatorDenied(err)
		} else {
			for _, b := range g.allBackends() {
				body.Upstreams = append(body.Upstreams, upstreamHealth{b.pool, b.name, b.up(now), b.inflight.Load()})
			}
			return writeJSON(w, status, body)
		}
	}
	out := struct {
		Status  string `json:"status"`
		Budgets string `json:"budgets,omitempty"`
	}{Status: body.Status}
	if !budgetsOK {
		out.Budgets = summary // why requests are refused
	}
	return writeJSON(w, status, out)
}

var errMetricsAuth = &llmflow.Error{Code: llmflow.EUNAUTHORIZED, Message: "metrics need Authorization: Bearer <metrics token>"}

// serveMetrics serves /metrics; with a metrics token configured, a request
// without it is refused and counted as an operator-secret failure.
func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if g.secretAuth.metrics != nil {
		_, err := g.secretAuth.check(r.Header.Get("Authorization"), g.clientAddr(r), g.now(), secretMetrics, errMetricsAuth)
		if err != nil {
			g.operatorDenied(err)
			return err
		}
	}
	g.metricsHandler.ServeHTTP(w, r)
	return nil
}

// requestID returns a unique request id: a random per-process prefix and
// a counter.
func (g *Gateway) requestID() string {
	return g.reqPfx + strconv.FormatUint(g.reqSeq.Add(1), 36)
}
