// Package config decodes the gateway's HCL2 configuration file and checks
// it. Parse is pure (file name and bytes in, *Config or Diagnostics out);
// Load only reads the file. Every diagnostic carries file:line:col.
//
// The file is evaluated statically: no variables, no functions. Secrets are
// named by file path only and are never read by Parse; CheckSecrets opens
// them. Relative secret paths are resolved against the directory of the
// configuration file.
package config

import (
	"net/netip"
	"net/url"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
)

// Config is a decoded and checked configuration file. Every field holds its
// effective value: defaults are filled in by Parse.
type Config struct {
	Filename string

	MasterKeyFile string // "" = no master key: the admin API answers 401 to everyone
	// UpstreamKeyDir is where the engine keys of runtime upstreams are
	// (the admin API names a file in it, key_name); "" = none: a runtime
	// upstream gets no key of its own.
	UpstreamKeyDir   string
	MetricsTokenFile string // "" = /metrics is open
	// CacheSaltKeyFile names the secret the per-organisation cache_salt is
	// derived from; "" = derived from the master key.
	CacheSaltKeyFile string

	Orgs   []Org
	Pools  []Pool
	Models []Model

	Store     Store
	FairShare FairShare
	Limits    Limits
	Health    Health
	Tags      Tags
	Alerts    Alerts
	Slurm     *Slurm     // nil: the organisation tree comes from this file only
	Writeback *Writeback // nil: no write-back to slurmdbd inside serve
	Redis     *Redis     // nil: fair-share counters in this process only
	TLS       *TLS       // nil: plain HTTP (a proxy in front terminates TLS)
	Admin     *Admin     // nil: the admin API on the client listener
	// OIDC is single sign-on to the console (console.go); nil: the
	// console signs in with admin tokens only.
	OIDC *OIDC
	// SelfService is what researchers do for themselves in the console
	// (console.go); nil: as self_service {}.
	SelfService *SelfService

	// ranges maps Secret.What to the source range of the attribute naming
	// the secret, for Secrets. Compare Configs with
	// cmpopts.IgnoreUnexported(Config{}).
	ranges map[string]hcl.Range
}

// Org is an institution: org "<name>" { share, team "<name>" {} … }.
type Org struct {
	Name     string
	Share    float64 // fraction of every pool reserved, 0..1; the sum over orgs is ≤ 1
	Teams    []Team
	DefRange hcl.Range
}

// Team is a lab inside an organisation. Team names are global.
type Team struct {
	Name     string
	Org      string
	Share    float64 // share among the organisation's teams; 0 when HasShare is false
	HasShare bool    // false: the teams without one split what is left equally
	DefRange hcl.Range
}

// Pool is a set of engines sharing one capacity.
type Pool struct {
	Name     string
	Capacity int // C, sustainable concurrency, 1..1048576; where C starts when Auto
	// Auto, when not nil, measures C from the engines (capacity = "auto").
	Auto *AutoCapacity
	// GPUs is how many GPUs serve the pool (0 = not given): the capacity of
	// the cluster rows of `llmflow report` and of the write-back to
	// slurmdbd (Utilization's Reported = GPUs × hours).
	GPUs int
	// QueueTimeout is the longest a request waits in a "gateway" queue
	// before a 503 with Retry-After; default 30s.
	QueueTimeout time.Duration
	// QueueSize bounds the "gateway" queue; beyond it requests get a 503 at
	// once. Default 10000.
	QueueSize int
	// Engine is what the pool's engines understand, from the block's
	// scheduler and priority_via:
	//
	//   - scheduler = "priority" (the default): engines run vLLM's
	//     --scheduling-policy priority and receive the fair-share priority
	//     with each request, as priority_via says: "header"
	//     (X-Vllm-Priority), "body" (the priority member) or "both" (the
	//     default: vLLM releases before mid-2026 ignore the header);
	//   - "gateway": engines without a priority scheduler (llama-server,
	//     vLLM in FCFS mode); the gateway keeps at most Capacity requests in
	//     flight and queues the rest in (priority, arrival) order (replicas
	//     sharing Redis divide Capacity among them);
	//   - "fcfs": no priority anywhere (the control).
	Engine engine.Descriptor
	// Reclaim is how an organisation gets the slots of its reservation
	// back from borrowers at once (reclaim = "preempt", "holdback" or
	// "none"; default: the engine's, Engine.DefaultReclaim).
	Reclaim engine.Reclaim
	// Headroom is the slots borrowers leave free: all borrowers under
	// "holdback", those the gateway cannot resume under "preempt"; 0
	// under "none". Default DefaultHeadroom(Capacity).
	Headroom int
	DefRange hcl.Range
}

// Model is a client-facing model name routed to a pool's upstreams.
type Model struct {
	Name          string
	UpstreamModel string // sent to the engine; defaults to Name
	Pool          string
	Class         string       // "interactive" (default) or "batch"
	KeyFile       string       // default key for its upstreams; "" = none
	Cost          llmflow.Cost // GPU-hours per million tokens
	// MaxContextTokens bounds the usage an engine may report for one
	// request: at most this many prompt tokens and this many completion
	// tokens. Usage beyond it (or negative, or cached > prompt) is not
	// believed: the request is accounted with the gateway's estimate
	// (EstimateInvalidUsage). Default DefaultMaxContextTokens, at most
	// llmflow.MaxRecordTokens.
	MaxContextTokens int64
	// MaxOutputTokens is what a request that sets neither max_tokens nor
	// max_completion_tokens may generate when a budget applies to it: its
	// budget hold, and the max_tokens sent upstream. Default
	// DefaultMaxOutputTokens (at most MaxContextTokens).
	MaxOutputTokens int64
	Upstreams       []Upstream
	DefRange        hcl.Range
}

// Upstream is one engine endpoint of a model.
type Upstream struct {
	Name     string
	BaseURL  *url.URL // http or https, no credentials, query or fragment, no trailing slash in Path
	KeyFile  string   // the upstream's own key file, else the model's
	DefRange hcl.Range
}

// Store selects and tunes the accounting store.
type Store struct {
	Kind          string        // "sqlite" (default) or "postgres"
	Path          string        // sqlite: the database file, default "llmflow.db" next to the configuration file; "" for postgres
	DSNFile       string        // postgres (required): file holding the DSN; refused with sqlite
	FailClosed    bool          // default true: 503 when budgets could not be refreshed for 3 intervals
	BudgetRefresh time.Duration // budget_refresh_interval: how often budgets and their spend are read, default 10s
	QueueSize     int           // accounting queue, default 10000
	BatchSize     int           // records per write, default 500
	FlushInterval time.Duration // longest wait before a partial batch is written, default 1s
	Retention     time.Duration // raw records older than this are purged (rollups stay), default 2160h (90 days)
	// SpoolDir is the accounting spool's directory (package spool): every
	// record is appended there before the store takes it. Default: the
	// sqlite file's path + ".spool"; for postgres "llmflow.spool" next to
	// the configuration file. One gateway process per directory.
	SpoolDir string
	// SpoolSync is the spool's fsync policy: "interval" (default, every
	// 100 ms), "always" (each record) or "never".
	SpoolSync string
}

// TLS is tls { cert_file, key_file }: the gateway terminates TLS itself
// (HTTP/2 and HTTP/1.1, TLS 1.2 and later) with the certificate chain in
// CertFile (PEM) and its private key in KeyFile (PEM, a secret: mode 0600).
// Both are read at start and again at each SIGHUP, without closing the
// listener or any connection.
type TLS struct {
	CertFile string
	KeyFile  string
	DefRange hcl.Range
}

// Admin is admin { listen, allowed_origins }: the admin API (/admin/*) is
// served on a listener of its own, at Listen (host:port, e.g.
// "127.0.0.1:9090": an interface clients cannot reach), and nowhere else:
// the client listener answers /admin/* with 404. The admin listener speaks
// plain HTTP (TLS is the client listener's), and serves nothing but
// /admin/*.
//
// Browsers: an admin write (any method but GET, HEAD and OPTIONS) that
// carries an Origin header is refused (403) unless the origin is the
// admin API's own (the request's Host, scheme included) or one of
// AllowedOrigins ("https://console.example.org", exact, no path): a page
// on another site cannot make an administrator's browser change anything.
// Requests without Origin (curl, the CLI, SDKs) are not browsers' and pass.
// The check holds with or without Listen.
type Admin struct {
	Listen         string
	AllowedOrigins []string
	DefRange       hcl.Range
}

// Redis is redis { address, password_file, tls, key_prefix, timeout,
// replicas }: the fair-share counters of every pool are shared through
// it, so that several gateway replicas admit against one set of counts.
type Redis struct {
	Address      string        // host:port
	PasswordFile string        // "" = no AUTH
	TLS          bool          // connect with TLS (system roots)
	KeyPrefix    string        // default DefaultRedisKeyPrefix
	Timeout      time.Duration // bound of a call on a request's path, default DefaultRedisTimeout
	// Replicas is how many replicas run (≥ 1, default 1): until Redis has
	// answered once, each replica takes reservation / Replicas (and
	// budgets and key limits / Replicas); then the live count of the
	// leases is used.
	Replicas int64
	DefRange hcl.Range
}

// FairShare tunes the fair-share usage.
type FairShare struct {
	HalfLife time.Duration // default fairshare.DefaultHalfLife (168h)
}

// Limits bound what a client can make the gateway do.
type Limits struct {
	MaxBodyBytes       int64         // request body, default 8 MiB
	MaxHeaderBytes     int           // default 64 KiB
	MaxResponseBytes   int64         // non-streaming upstream answer, default 64 MiB
	ReadHeaderTimeout  time.Duration // default 10s
	ReadTimeout        time.Duration // whole request read, default 60s
	IdleTimeout        time.Duration // keep-alive, default 120s
	MaxRequestDuration time.Duration // whole request including the upstream, default 30m
	ConnectTimeout     time.Duration // upstream dial, default 5s
	// ResponseHeaderTimeout bounds the wait for an upstream's response headers
	// (for a non-streaming request: the whole generation). 0, the default,
	// sets no separate bound: MaxRequestDuration covers it, and a timer per
	// request is saved on the hot path.
	ResponseHeaderTimeout time.Duration
	// StreamIdleTimeout is the longest an engine may send nothing in a
	// streaming answer: then the gateway cancels the engine request and
	// ends the client's stream without [DONE] (the record is incomplete,
	// EstimateIdleTimeout). Default 2m; 0 disables.
	StreamIdleTimeout     time.Duration
	Retries               int // upstream attempts after the first, before the first byte; default 2, 0 disables, at most 100
	AuthFailuresPerMinute int // per client network, default 60, 0 disables
	// MaxConnections caps the client connections open at once; past it a
	// new connection is answered 503 and closed. Default 4096, 0 disables.
	MaxConnections int
	// MaxConnectionsPerNetwork caps the connections open at once from one
	// client network (an IPv4 address, an IPv6 /64), refused the same way.
	// Default 256, 0 disables.
	MaxConnectionsPerNetwork int
	// TrustedProxies are the networks of the proxies in front of the
	// gateway (nginx, a chat front end): their connections do not count
	// per network, and the requests they forward count, per network, at
	// the client address X-Forwarded-For gives (its last address outside
	// these networks), against MaxConnectionsPerNetwork requests at once
	// and the auth failure limit. Default none.
	TrustedProxies []netip.Prefix
	// HTTPStack is the HTTP/1.1 code of the client listener and of the
	// engine connections: HTTPStackLlmflow (the default; package
	// internal/h1, one goroutine per connection end to end) or
	// HTTPStackNetHTTP (Go's net/http, as before). A listener with TLS is
	// served by net/http either way (HTTP/2); so are https engines.
	HTTPStack string
}

// The values of limits.http_stack.
const (
	HTTPStackLlmflow = "llmflow"
	HTTPStackNetHTTP = "net/http"
)

// Health configures active upstream health checks.
type Health struct {
	Interval time.Duration // default 10s
	Timeout  time.Duration // default 2s
	Cooldown time.Duration // an upstream marked down stays out this long, default 30s
	Path     string        // default "/health"
}

// Tags is the request header clients may tag requests with: a request's
// tags are its key's and, from this header, comma-separated allowed tags
// (at most MaxRequestTags; an unknown one or more is a 400).
type Tags struct {
	Header  string // "" = tags only come from keys
	Allowed []string
}

// Alerts says where soft-budget alerts go: alerts { webhook_url,
// webhook_token_file, timeout, soft_limit_percent, smtp { … } }. Without
// the block (Enabled false) no alert is sent. Alerts go through the
// store's durable outbox, retried until delivered (package alerts).
type Alerts struct {
	WebhookURL       *url.URL // nil: no webhook
	WebhookTokenFile string   // sent as Authorization: Bearer; "" = none
	// Timeout bounds one delivery attempt (a webhook POST, an SMTP
	// session). Default DefaultAlertTimeout.
	Timeout time.Duration
	// SoftLimitPercent is the soft limit, in percent of the limit, of the
	// budgets that set none (those imported from Slurm's GrpTRESMins in
	// particular). Default DefaultSoftLimitPercent; 0 = such budgets send
	// no alert.
	SoftLimitPercent float64
	SMTP             *SMTP // nil: no e-mail
	DefRange         hcl.Range
}

// Enabled reports whether alerts have somewhere to go.
func (a Alerts) Enabled() bool { return a.WebhookURL != nil || a.SMTP != nil }

// SMTP is an e-mail relay for alerts.
type SMTP struct {
	Server       string // host:port
	From         string
	To           []string
	Username     string // "" = no authentication
	PasswordFile string
	// TLS is how the connection is protected: "starttls" (the default:
	// the relay must offer STARTTLS, usually on port 587), "implicit" (TLS
	// from the first byte, port 465) or "none" (plain text: only for a
	// relay on a loopback address; credentials are refused then).
	TLS string
	// CAFile names PEM certificates to trust for the relay instead of the
	// system's ("" = the system's). Not a secret.
	CAFile string
}

// Slurm is where the account tree and shares are imported from:
// slurm { source, cluster, dsn_file, sacctmgr_path, schedule, timeout,
// budget_period }.
// When present, Slurm's shares replace this file's for the accounts both
// declare.
type Slurm struct {
	Source       string        // "slurmdbd" (its MySQL database) or "sacctmgr"
	Cluster      string        // the Slurm cluster whose associations are imported
	DSNFile      string        // slurmdbd: file holding the MySQL DSN
	SacctmgrPath string        // sacctmgr: the command, default "sacctmgr"
	Schedule     string        // cron schedule of the import inside serve, default every 10 minutes
	Timeout      time.Duration // one import, default 2m
	// BudgetPeriod is the period of the budgets an account's
	// GrpTRESMins=gres/gpu=N becomes (N/60 GPU-hours per period): "day",
	// "week" or "month" (default), Slurm's PriorityUsageResetPeriod idea.
	BudgetPeriod string
	DefRange     hcl.Range
}

// Writeback writes the GPU-hours into slurmdbd inside serve:
// writeback { dsn_file, cluster, service_user, schedule, lookback, timezone }.
// Each run re-writes the last Lookback hours (replacing them: nothing is
// counted twice).
type Writeback struct {
	DSNFile     string        // MySQL DSN of slurmdbd's database, with the grants of `go doc ./writeback`
	Cluster     string        // the Slurm cluster written, default llmflow.DefaultSlurmCluster
	ServiceUser string        // the user of keys without an owner, default llmflow.DefaultServiceUser
	Schedule    string        // cron, default DefaultWritebackSchedule (hourly, after the hour ended)
	Lookback    time.Duration // hours re-written each run, default DefaultWritebackLookback
	Timezone    string        // slurmdbd's time zone (its day and month rows), default DefaultWritebackTimezone
	DefRange    hcl.Range
}

// Secret is one secret file the configuration names, for CheckSecrets.
type Secret struct {
	What  string // "master_key_file", `model "x" key_file`, …
	Path  string // resolved path
	Range hcl.Range
}
