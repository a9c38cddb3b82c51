// Package gateway is llmflow's HTTP server: the OpenAI-compatible client
// routes (auth, body rewrite, priority, routing, streaming, accounting) and
// the admin API. It declares the small store interfaces it uses; the
// command line wires a concrete store in.
package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
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
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Version is reported by /healthz and in the upstream User-Agent; the
// command line sets it from build information before creating gateways.
var Version = "dev"

// KeyStore is what the gateway needs of a store for keys.
type KeyStore interface {
	KeyLookup
	CreateKey(ctx context.Context, k llmflow.Key) error
	KeyByID(ctx context.Context, id string) (llmflow.Key, error)
	ListKeys(ctx context.Context, f llmflow.KeyFilter) ([]llmflow.Key, error)
	RevokeKey(ctx context.Context, id string, at time.Time) error
}

// Pinger is implemented by stores that can report their health.
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
	Keys   KeyStore
	// Records receives accounting records through a bounded queue; nil
	// keeps none (tests only: serve always has a store).
	Records RecordWriter
	// ShareUsage keeps the decayed fair-share usage across restarts; nil
	// keeps it in memory only.
	ShareUsage ShareUsageStore
	// SyncHistory lists the Slurm import runs for GET /admin/sync; nil
	// lists none.
	SyncHistory SyncHistory
	// Spend reads accounting rollups for GET /admin/spend and
	// /admin/usage.csv; nil answers 503 there.
	Spend SpendReader
	// Accounts is the organisation tree; nil = AccountsFromConfig(Config).
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
}

// Gateway serves the client and admin routes. Create it with New, start
// its health checks with Start, stop with Close.
type Gateway struct {
	cfg        *config.Config
	keys       KeyStore
	rec        *Recorder
	usage      ShareUsageStore
	accts      atomic.Pointer[accountView]
	syncs      SyncHistory
	spend      SpendReader
	sync       *syncState
	log        *slog.Logger
	now        func() time.Time
	reg        *prometheus.Registry
	m          *metrics
	auth       *authenticator
	master     *secretMatcher
	metricsTok *secretMatcher

	routes    map[string]*route
	models    []modelCard
	pools     map[string]*pool
	poolOrder []*pool // as configured
	backends  []*backend
	saltKey   string // cache_salt derivation secret

	health         *healthChecker
	metricsHandler http.Handler
	userAgent      []string // "llmflow/<Version>", sent upstream
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
	cfg := o.Config
	g := &Gateway{
		cfg:    cfg,
		keys:   o.Keys,
		usage:  o.ShareUsage,
		syncs:  o.SyncHistory,
		spend:  o.Spend,
		log:    o.Log,
		now:    o.Now,
		reg:    o.Registry,
		routes: make(map[string]*route),
		pools:  make(map[string]*pool),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
	}
	g.started = g.now()
	g.userAgent = []string{"llmflow/" + Version}
	var pfx [6]byte
	rand.Read(pfx[:])
	g.reqPfx = "req_" + hex.EncodeToString(pfx[:])

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
	master, err := secret("master_key_file", cfg.MasterKeyFile)
	if err != nil {
		return nil, err
	}
	g.master = newSecretMatcher(master)
	mtok, err := secret("metrics_token_file", cfg.MetricsTokenFile)
	if err != nil {
		return nil, err
	}
	g.metricsTok = newSecretMatcher(mtok)
	saltKey, err := secret("cache_salt_key_file", cfg.CacheSaltKeyFile)
	if err != nil {
		return nil, err
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
	accts := o.Accounts
	if accts == nil {
		accts = AccountsFromConfig(cfg)
	}
	g.m = newMetrics(g.reg)
	g.sync = newSyncState(g.reg)
	view := g.setView(accts)

	size := o.KeyCacheSize
	if size <= 0 {
		size = 100_000
	}
	ttl := o.KeyCacheTTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	g.auth = &authenticator{
		store:   o.Keys,
		hits:    newKeyCache(size, ttl),
		misses:  newMissCache(size, 30*time.Second),
		limiter: newFailureLimiter(cfg.Limits.AuthFailuresPerMinute, 100_000),
		lookups: g.m.authLookups.Inc,
	}

	for _, p := range cfg.Pools {
		pl := &pool{name: p.Name, capacity: p.Capacity, scheduler: p.Scheduler, upstreamSeconds: g.m.upstream.WithLabelValues(p.Name)}
		pl.fs = fairshare.NewPool(p.Capacity, view.tree(), cfg.FairShare.HalfLife, g.started)
		switch p.Scheduler {
		case "priority":
			pl.prioBody = p.PriorityVia == "body" || p.PriorityVia == "both"
			pl.prioHdr = p.PriorityVia == "header" || p.PriorityVia == "both"
		case "gateway":
			fs := pl.fs
			pl.queue = newQueue(p.Capacity, p.QueueSize, p.QueueTimeout, func(k queueKey) int {
				return fs.Peek(fairshare.Path{Org: k.org, Team: k.team, Project: k.project}, k.class)
			})
			wait := g.m.queueWait.WithLabelValues(p.Name)
			pl.queue.waitSeconds = func(d time.Duration) { wait.Observe(d.Seconds()) }
		}
		if err := g.restoreUsage(pl); err != nil {
			return nil, err
		}
		pl.transport = o.Transport
		if pl.transport == nil {
			pl.transport = newTransport(p.Capacity, cfg.Limits)
		}
		g.pools[p.Name] = pl
		g.poolOrder = append(g.poolOrder, pl)
	}
	backends := make(map[string]*backend)
	for _, mc := range cfg.Models {
		pl := g.pools[mc.Pool]
		if pl == nil {
			return nil, fmt.Errorf("model %q: unknown pool %q", mc.Name, mc.Pool)
		}
		rt := &route{name: mc.Name, upstreamModel: mc.UpstreamModel, pool: pl, cost: mc.Cost}
		if mc.Class == "batch" {
			rt.class = 1
		}
		for _, uc := range mc.Upstreams {
			keyFile := uc.KeyFile
			if keyFile == "" {
				keyFile = mc.KeyFile
			}
			key, err := secret(fmt.Sprintf("model %q upstream %q key_file", mc.Name, uc.Name), keyFile)
			if err != nil {
				return nil, err
			}
			base := uc.BaseURL.String()
			b := backends[base]
			if b == nil {
				b = &backend{base: base, pool: pl.name, name: uc.Name}
				backends[base] = b
				g.backends = append(g.backends, b)
			}
			u := &upstream{name: uc.Name, b: b}
			for ep := chatCompletions; ep <= embeddings; ep++ {
				if u.urls[ep], err = url.Parse(base + ep.path()); err != nil {
					return nil, fmt.Errorf("model %q upstream %q: %w", mc.Name, uc.Name, err)
				}
			}
			if key != "" {
				u.authHdr = []string{"Bearer " + key}
			}
			rt.upstreams = append(rt.upstreams, u)
		}
		if len(rt.upstreams) == 0 {
			return nil, fmt.Errorf("model %q has no upstream", mc.Name)
		}
		g.routes[mc.Name] = rt
		g.models = append(g.models, modelCard{ID: mc.Name, Object: "model", Created: g.started.Unix(), OwnedBy: "llmflow"})
	}
	g.registerGauges()
	g.reg.MustRegister(newShareCollector(g))
	g.metricsHandler = promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)})

	if o.Records != nil {
		g.rec = NewRecorder(o.Records, cfg.Store.QueueSize, cfg.Store.BatchSize, cfg.Store.FlushInterval, g.log)
		g.rec.OnWrite = func(written, failed int) {
			g.m.acctWritten.Add(float64(written))
			g.m.acctFailed.Add(float64(failed))
		}
	}

	g.health = &healthChecker{
		userAgent: g.userAgent[0],
		backends:  g.backends,
		client:    func(b *backend) http.RoundTripper { return g.pools[b.pool].transport },
		cfg:       cfg.Health,
		now:       g.now,
		onChange: func(b *backend, ok bool) {
			g.log.Info("upstream health changed", "pool", b.pool, "upstream", b.name, "healthy", ok)
		},
	}
	g.routesInit()
	return g, nil
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
	for _, b := range g.backends {
		b := b
		labels := prometheus.Labels{"pool": b.pool, "upstream": b.name}
		g.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_upstream_healthy", Help: "1 when the upstream is in rotation.", ConstLabels: labels,
		}, func() float64 {
			if b.up(g.now()) {
				return 1
			}
			return 0
		}))
		g.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llmflow_upstream_inflight", Help: "Requests in flight to the upstream.", ConstLabels: labels,
		}, func() float64 { return float64(b.inflight.Load()) }))
	}
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

// Start runs the active health checks until Close.
func (g *Gateway) Start(ctx context.Context) {
	ctx, g.cancel = context.WithCancel(ctx)
	g.done = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		g.health.run(ctx)
	}()
	go func() {
		defer wg.Done()
		g.shareLoop(ctx)
	}()
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
	if err := g.saveUsage(ctx); err != nil {
		return fmt.Errorf("save fair-share usage: %w", err)
	}
	if g.rec != nil {
		if err := g.rec.Close(ctx); err != nil {
			return fmt.Errorf("drain accounting queue: %w", err)
		}
	}
	return nil
}

// Recorder returns the accounting queue (nil without a record writer).
func (g *Gateway) Recorder() *Recorder { return g.rec }

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

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
			writeError(w, g.log, llmflow.Errorf(emethod, "method %s not allowed on %s", r.Method, path))
			return
		}
		if err := h(w, r); err != nil {
			writeError(w, g.log, err)
		}
	})
}

func (g *Gateway) routesInit() {
	g.mux = http.NewServeMux()
	g.handle(http.MethodPost, "/v1/chat/completions", g.inference(chatCompletions))
	g.handle(http.MethodPost, "/v1/completions", g.inference(completions))
	g.handle(http.MethodPost, "/v1/embeddings", g.inference(embeddings))
	g.handle(http.MethodGet, "/v1/models", g.listModels)
	g.handle(http.MethodGet, "/healthz", g.healthz)
	g.handle(http.MethodGet, "/metrics", g.serveMetrics)
	g.adminRoutes()
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, g.log, llmflow.Errorf(llmflow.ENOTFOUND, "no route %s %s", r.Method, r.URL.Path))
	})
}

func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request) error {
	if _, err := g.authenticate(r); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": g.models})
}

// authenticate resolves the client key of r, counting denials.
func (g *Gateway) authenticate(r *http.Request) (*cachedKey, error) {
	ck, err := g.auth.authenticate(r.Context(), r.Header.Get("Authorization"), r.RemoteAddr, g.now())
	if err != nil {
		reason := reasonAuth
		if llmflow.ErrorCode(err) == llmflow.ERATELIMIT {
			reason = reasonAuthLimited
		}
		g.m.denied.WithLabelValues(reason).Inc()
	}
	return ck, err
}

func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) error {
	now := g.now()
	type upstreamHealth struct {
		Pool     string `json:"pool"`
		Name     string `json:"name"`
		Healthy  bool   `json:"healthy"`
		InFlight int64  `json:"in_flight"`
	}
	body := struct {
		Status    string           `json:"status"`
		Version   string           `json:"version"`
		Store     string           `json:"store"`
		Upstreams []upstreamHealth `json:"upstreams"`
		Slurm     *syncHealth      `json:"slurm_sync,omitempty"`
	}{Status: "ok", Version: Version, Store: "ok", Slurm: g.sync.health()}
	if body.Slurm != nil && body.Slurm.Outcome == "failed" {
		body.Status = "degraded" // serving the last good tree
	}
	for _, b := range g.backends {
		body.Upstreams = append(body.Upstreams, upstreamHealth{b.pool, b.name, b.up(now), b.inflight.Load()})
	}
	status := http.StatusOK
	if p, ok := g.keys.(Pinger); ok {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		err := p.Ping(ctx)
		cancel()
		if err != nil {
			g.log.Warn("store ping failed", "err", err)
			body.Store = "unreachable"
			body.Status = "degraded"
			if g.cfg.Store.FailClosed {
				body.Status = "unavailable"
				status = http.StatusServiceUnavailable
			}
		}
	}
	return writeJSON(w, status, body)
}

func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if g.metricsTok != nil {
		tok, _ := bearer(r.Header.Get("Authorization"))
		if !g.metricsTok.match(tok) {
			return llmflow.Errorf(llmflow.EUNAUTHORIZED, "metrics need Authorization: Bearer <metrics token>")
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
