package config

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/robfig/cron/v3"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/engine"
	"github.com/go-llmflow/llmflow/fairshare"
)

// Defaults of the values the configuration may leave out.
const (
	DefaultScheduler   = "priority"
	DefaultPriorityVia = "both"
	// DefaultQueueTimeout is how long a request may wait in a gateway-side
	// queue (scheduler = "gateway") before a 503.
	DefaultQueueTimeout = 30 * time.Second
	// DefaultQueueSize bounds a gateway-side queue.
	DefaultQueueSize = 10000
	// DefaultSlurmSchedule is how often serve imports the Slurm tree.
	DefaultSlurmSchedule = "*/10 * * * *"
	// DefaultSlurmTimeout bounds one Slurm import (slurm timeout).
	DefaultSlurmTimeout = 2 * time.Minute
	// DefaultSacctmgrPath is the command the sacctmgr source runs.
	DefaultSacctmgrPath = "sacctmgr"
	// DefaultSlurmBudgetPeriod is the period of the budgets made from
	// Slurm's GrpTRESMins (slurm budget_period).
	DefaultSlurmBudgetPeriod = "month"
	// DefaultWritebackSchedule is when serve writes the GPU-hours into
	// slurmdbd: hourly, after the hour ended. The cluster and the user of
	// keys without an owner default to llmflow.DefaultSlurmCluster and
	// llmflow.DefaultServiceUser.
	DefaultWritebackSchedule = "5 * * * *"
	// DefaultWritebackLookback is how many hours each write-back re-writes.
	DefaultWritebackLookback = 24 * time.Hour
	// DefaultWritebackTimezone is slurmdbd's time zone (its day and month
	// rows).
	DefaultWritebackTimezone = "UTC"
	// DefaultRedisKeyPrefix starts every Redis key of a redis block.
	DefaultRedisKeyPrefix = "llmflow:"
	// DefaultRedisTimeout bounds each Redis call on a request's path
	// (redis timeout); package redisstate defaults to it too.
	DefaultRedisTimeout = 250 * time.Millisecond
	DefaultClass        = "interactive"
	DefaultStoreKind    = "sqlite"
	DefaultStorePath    = "llmflow.db"
	DefaultHealthPath   = "/health"

	// DefaultMaxContextTokens is a model's max_context_tokens when the
	// block does not set it: generous (1 Mi tokens), so that only nonsense
	// is refused.
	DefaultMaxContextTokens = 1 << 20
	// DefaultMaxOutputTokens is a model's max_output_tokens when the block
	// does not set it: what a request without max_tokens holds of a
	// budget, and the output limit it gets when a budget applies.
	DefaultMaxOutputTokens = 4096
	// DefaultBudgetRefresh is store.budget_refresh_interval when not set.
	DefaultBudgetRefresh = 10 * time.Second
	// MaxRequestTags bounds the tags of one request's header.
	MaxRequestTags = 8
	// DefaultStreamIdleTimeout is limits.stream_idle_timeout when not set.
	DefaultStreamIdleTimeout = 2 * time.Minute

	// MaxCapacity is the largest pool capacity accepted.
	MaxCapacity = 1 << 20
)

// shareEpsilon absorbs binary rounding when shares written in decimal are
// summed: 0.7 + 0.2 + 0.1 is accepted as 1.
const shareEpsilon = 1e-9

// Load reads the configuration file at path and parses it with Parse.
// Relative paths in the file are resolved against the directory of path.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, src)
}

// Parse decodes and checks a configuration written in HCL2 native syntax.
// It is pure: filename is only used in diagnostics and to resolve relative
// paths (against filepath.Dir(filename)); no file is read, no secret is
// opened. The file is evaluated without variables or functions.
//
// Any non-nil error is Diagnostics, listing every problem found, each with
// its file:line:col, in file order. A syntax error stops there: the
// decoding and semantic checks only run on a file that parses.
func Parse(filename string, src []byte) (*Config, error) {
	file, hds := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if ds := fromHCL(filename, hds); len(ds) > 0 || file == nil {
		if len(ds) == 0 { // cannot happen with hclsyntax; be safe
			ds = Diagnostics{{Pos: Pos{Filename: filename}, Message: "invalid configuration"}}
		}
		return nil, ds
	}
	d := &decoder{
		filename: filename,
		dir:      filepath.Dir(filename),
		cfg:      &Config{Filename: filename, ranges: map[string]hcl.Range{}},
	}
	d.decodeRoot(file.Body)
	if len(d.diags) > 0 {
		d.diags.sort()
		return nil, d.diags
	}
	return d.cfg, nil
}

// decoder holds the state of one Parse call.
type decoder struct {
	filename string
	dir      string
	cfg      *Config
	diags    Diagnostics
}

func (d *decoder) errorf(r hcl.Range, format string, args ...any) {
	pos := posOf(r)
	if pos.Filename == "" {
		pos.Filename = d.filename
	}
	d.diags = append(d.diags, Diagnostic{Pos: pos, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) addHCL(hds hcl.Diagnostics) {
	d.diags = append(d.diags, fromHCL(d.filename, hds)...)
}

// content decodes body against schema, reporting unknown attributes and
// blocks and missing required attributes.
func (d *decoder) content(body hcl.Body, schema *hcl.BodySchema) *hcl.BodyContent {
	c, hds := body.Content(schema)
	d.addHCL(hds)
	if c == nil {
		c = &hcl.BodyContent{Attributes: hcl.Attributes{}}
	}
	return c
}

// single returns the only block of type typ, reporting every further one.
func (d *decoder) single(blocks hcl.Blocks, typ string) *hcl.Block {
	var first *hcl.Block
	for _, b := range blocks {
		if b.Type != typ {
			continue
		}
		if first != nil {
			d.errorf(b.DefRange, "duplicate %s block; only one is allowed, the first is at %s", typ, posOf(first.DefRange))
			continue
		}
		first = b
	}
	return first
}

var rootSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "master_key_file"},
		{Name: "metrics_token_file"},
		{Name: "cache_salt_key_file"},
		{Name: "upstream_key_dir"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "org", LabelNames: []string{"name"}},
		{Type: "pool", LabelNames: []string{"name"}},
		{Type: "model", LabelNames: []string{"name"}},
		{Type: "store"},
		{Type: "fairshare"},
		{Type: "limits"},
		{Type: "health"},
		{Type: "tags"},
		{Type: "alerts"},
		{Type: "slurm"},
		{Type: "writeback"},
		{Type: "redis"},
		{Type: "tls"},
		{Type: "admin"},
		{Type: "oidc"},         // console.go
		{Type: "self_service"}, // console.go
	},
}

func (d *decoder) decodeRoot(body hcl.Body) {
	c := d.content(body, rootSchema)
	cfg := d.cfg
	d.secretPath(c.Attributes, "master_key_file", "master_key_file", &cfg.MasterKeyFile)
	d.secretPath(c.Attributes, "metrics_token_file", "metrics_token_file", &cfg.MetricsTokenFile)
	d.secretPath(c.Attributes, "cache_salt_key_file", "cache_salt_key_file", &cfg.CacheSaltKeyFile)
	d.path(c.Attributes, "upstream_key_dir", &cfg.UpstreamKeyDir)

	d.decodeOrgs(c.Blocks)
	d.decodePools(c.Blocks)
	d.decodeModels(c.Blocks)
	d.decodeStore(d.single(c.Blocks, "store"))
	d.decodeFairShare(d.single(c.Blocks, "fairshare"))
	d.decodeLimits(d.single(c.Blocks, "limits"))
	d.decodeHealth(d.single(c.Blocks, "health"))
	d.decodeTags(d.single(c.Blocks, "tags"))
	d.decodeAlerts(d.single(c.Blocks, "alerts"))
	d.decodeSlurm(d.single(c.Blocks, "slurm"))
	d.decodeWriteback(d.single(c.Blocks, "writeback"))
	d.decodeRedis(d.single(c.Blocks, "redis"))
	d.decodeTLS(d.single(c.Blocks, "tls"))
	d.decodeAdmin(d.single(c.Blocks, "admin"))
	d.decodeOIDC(d.single(c.Blocks, "oidc"))
	d.decodeSelfService(d.single(c.Blocks, "self_service"))
}

var adminSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "listen"},
		{Name: "allowed_origins"},
	},
}

// decodeAdmin decodes admin { listen, allowed_origins }.
func (d *decoder) decodeAdmin(b *hcl.Block) {
	if b == nil {
		return
	}
	a := &Admin{DefRange: b.DefRange}
	c := d.content(b.Body, adminSchema)
	if at := d.str(c.Attributes, "listen", &a.Listen); at != nil {
		if err := checkHostPort(a.Listen); err != nil {
			d.errorf(at.Expr.Range(), "listen %q: %v", a.Listen, err)
		}
	}
	if at := d.strList(c.Attributes, "allowed_origins", &a.AllowedOrigins); at != nil {
		for _, o := range a.AllowedOrigins {
			if err := checkOrigin(o); err != nil {
				d.errorf(at.Expr.Range(), "allowed_origins: %q: %v", o, err)
			}
		}
	}
	d.cfg.Admin = a
}

// checkOrigin checks a browser origin: scheme://host[:port], nothing
// more (what browsers send in Origin).
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("want http:// or https://")
	case u.Host == "" || u.User != nil || u.Path != "" || strings.ContainsAny(o, "?#"):
		return fmt.Errorf("an origin is scheme://host[:port], without user, path, query or fragment")
	case strings.ToLower(o) != o:
		return fmt.Errorf("write it in lower case, as browsers send it")
	}
	return nil
}

var tlsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "cert_file", Required: true},
		{Name: "key_file", Required: true},
	},
}

// decodeTLS decodes tls { cert_file, key_file }.
func (d *decoder) decodeTLS(b *hcl.Block) {
	if b == nil {
		return
	}
	t := &TLS{DefRange: b.DefRange}
	c := d.content(b.Body, tlsSchema)
	d.path(c.Attributes, "cert_file", &t.CertFile)
	d.secretPath(c.Attributes, "key_file", "tls key_file", &t.KeyFile)
	d.cfg.TLS = t
}

var redisSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "address", Required: true},
		{Name: "password_file"},
		{Name: "tls"},
		{Name: "key_prefix"},
		{Name: "timeout"},
		{Name: "replicas"},
	},
}

// decodeRedis decodes redis { address, password_file, tls, key_prefix,
// timeout, replicas }.
func (d *decoder) decodeRedis(b *hcl.Block) {
	if b == nil {
		return
	}
	r := &Redis{KeyPrefix: DefaultRedisKeyPrefix, Timeout: DefaultRedisTimeout, Replicas: 1, DefRange: b.DefRange}
	c := d.content(b.Body, redisSchema)
	if a := d.str(c.Attributes, "address", &r.Address); a != nil {
		i := strings.LastIndexByte(r.Address, ':')
		if port, err := strconv.Atoi(r.Address[i+1:]); i <= 0 || err != nil || port <= 0 || port > 65535 {
			d.errorf(a.Expr.Range(), "address %q is not host:port", r.Address)
		}
	}
	d.secretPath(c.Attributes, "password_file", "redis password_file", &r.PasswordFile)
	d.bool(c.Attributes, "tls", &r.TLS)
	d.str(c.Attributes, "key_prefix", &r.KeyPrefix)
	d.duration(c.Attributes, "timeout", &r.Timeout)
	intAttr(d, c.Attributes, "replicas", 1, 1000, &r.Replicas)
	d.cfg.Redis = r
}

var writebackSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "dsn_file", Required: true},
		{Name: "cluster"},
		{Name: "service_user"},
		{Name: "schedule"},
		{Name: "lookback"},
		{Name: "timezone"},
	},
}

// decodeWriteback decodes writeback { dsn_file, cluster, service_user,
// schedule, lookback, timezone }: the write-back of GPU-hours to slurmdbd
// inside serve.
func (d *decoder) decodeWriteback(b *hcl.Block) {
	if b == nil {
		return
	}
	w := &Writeback{Cluster: llmflow.DefaultSlurmCluster, ServiceUser: llmflow.DefaultServiceUser, Schedule: DefaultWritebackSchedule,
		Lookback: DefaultWritebackLookback, Timezone: DefaultWritebackTimezone, DefRange: b.DefRange}
	c := d.content(b.Body, writebackSchema)
	d.secretPath(c.Attributes, "dsn_file", "writeback dsn_file", &w.DSNFile)
	if a := d.str(c.Attributes, "cluster", &w.Cluster); a != nil && !llmflow.ValidClusterName(w.Cluster) {
		d.errorf(a.Expr.Range(), "cluster %q is not a Slurm cluster name (lower-case letters, digits, '-' and '_')", w.Cluster)
	}
	if a := d.str(c.Attributes, "service_user", &w.ServiceUser); a != nil && !llmflow.ValidUserName(w.ServiceUser) {
		d.errorf(a.Expr.Range(), "service_user %q is not a user name (1 to 64 letters, digits, '.', '_' or '-', not starting with '-' or '.')", w.ServiceUser)
	}
	if a := d.str(c.Attributes, "schedule", &w.Schedule); a != nil {
		if _, err := cron.ParseStandard(w.Schedule); err != nil {
			d.errorf(a.Expr.Range(), "schedule %q: %v (five cron fields such as \"5 * * * *\", or @hourly)", w.Schedule, err)
		}
	}
	if a := d.duration(c.Attributes, "lookback", &w.Lookback); a != nil && w.Lookback < time.Hour {
		d.errorf(a.Expr.Range(), "lookback must be at least one hour")
	}
	if a := d.str(c.Attributes, "timezone", &w.Timezone); a != nil {
		if _, err := time.LoadLocation(w.Timezone); err != nil {
			d.errorf(a.Expr.Range(), "timezone %q: not a time zone name (slurmdbd's TZ, such as \"UTC\" or \"Europe/Paris\")", w.Timezone)
		}
	}
	d.cfg.Writeback = w
}

var slurmSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "source", Required: true},
		{Name: "cluster", Required: true},
		{Name: "dsn_file"},
		{Name: "sacctmgr_path"},
		{Name: "schedule"},
		{Name: "timeout"},
		{Name: "budget_period"},
	},
}

// decodeSlurm decodes slurm { source, cluster, dsn_file, sacctmgr_path,
// schedule, timeout, budget_period }: where the account tree, shares and
// GPU budgets come from.
func (d *decoder) decodeSlurm(b *hcl.Block) {
	if b == nil {
		return
	}
	s := &Slurm{SacctmgrPath: DefaultSacctmgrPath, Schedule: DefaultSlurmSchedule, Timeout: DefaultSlurmTimeout, BudgetPeriod: DefaultSlurmBudgetPeriod, DefRange: b.DefRange}
	c := d.content(b.Body, slurmSchema)
	src := d.enum(c.Attributes, "source", &s.Source, "slurmdbd", "sacctmgr")
	if a := d.str(c.Attributes, "cluster", &s.Cluster); a != nil && !llmflow.ValidClusterName(s.Cluster) {
		d.errorf(a.Expr.Range(), "cluster %q is not a Slurm cluster name (lower-case letters, digits, '-' and '_')", s.Cluster)
	}
	dsn := d.secretPath(c.Attributes, "dsn_file", "slurm dsn_file", &s.DSNFile)
	d.str(c.Attributes, "sacctmgr_path", &s.SacctmgrPath)
	if a := d.str(c.Attributes, "schedule", &s.Schedule); a != nil {
		if _, err := cron.ParseStandard(s.Schedule); err != nil {
			d.errorf(a.Expr.Range(), "schedule %q: %v (five cron fields such as \"*/15 * * * *\", or @every 10m, @hourly)", s.Schedule, err)
		}
	}
	d.duration(c.Attributes, "timeout", &s.Timeout)
	d.enum(c.Attributes, "budget_period", &s.BudgetPeriod, "day", "week", "month")
	if src != nil && s.Source == "slurmdbd" && s.DSNFile == "" && dsn == nil {
		d.errorf(b.DefRange, "slurm source \"slurmdbd\" needs dsn_file (the MySQL DSN of slurmdbd's database, in a file)")
	}
	if dsn != nil && s.Source == "sacctmgr" {
		d.errorf(dsn.Expr.Range(), "dsn_file is only for source \"slurmdbd\"")
	}
	d.cfg.Slurm = s
}

// label returns a block's name, reporting an empty one or one defined
// before (seen maps names to where they were first defined).
func (d *decoder) label(b *hcl.Block, what string, seen map[string]hcl.Range) (string, bool) {
	name, r := b.Labels[0], b.LabelRanges[0]
	if strings.TrimSpace(name) == "" {
		d.errorf(r, "%s name must not be empty", what)
		return name, false
	}
	if hasControl(name) {
		d.errorf(r, "%s name %q contains a control character", what, name)
		return name, false
	}
	if prev, dup := seen[name]; dup {
		d.errorf(r, "duplicate %s %q; previously defined at %s", what, name, posOf(prev))
		return name, false
	}
	seen[name] = r
	return name, true
}

var (
	orgSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "share", Required: true}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "team", LabelNames: []string{"name"}}},
	}
	teamSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "share"}},
	}
)

func (d *decoder) decodeOrgs(blocks hcl.Blocks) {
	orgs, teams := map[string]hcl.Range{}, map[string]hcl.Range{}
	var sum float64
	var last *hcl.Attribute
	for _, b := range blocks.OfType("org") {
		name, ok := d.label(b, "org", orgs)
		c := d.content(b.Body, orgSchema)
		org := Org{Name: name, DefRange: b.DefRange}
		if a := d.float(c.Attributes, "share", 0, 1, &org.Share); a != nil {
			sum += org.Share
			last = a
		}
		d.decodeTeams(&org, c.Blocks, teams)
		if ok {
			d.cfg.Orgs = append(d.cfg.Orgs, org)
		}
	}
	if last != nil && sum > 1+shareEpsilon {
		d.errorf(last.Expr.Range(), "org shares sum to %g, more than 1", sum)
	}
}

func (d *decoder) decodeTeams(org *Org, blocks hcl.Blocks, seen map[string]hcl.Range) {
	var sum float64
	var last *hcl.Attribute
	for _, b := range blocks.OfType("team") {
		name, ok := d.label(b, "team", seen)
		c := d.content(b.Body, teamSchema)
		team := Team{Name: name, Org: org.Name, DefRange: b.DefRange}
		if a := d.float(c.Attributes, "share", 0, 1, &team.Share); a != nil {
			team.HasShare = true
			sum += team.Share
			last = a
		}
		if ok {
			org.Teams = append(org.Teams, team)
		}
	}
	if last != nil && sum > 1+shareEpsilon {
		d.errorf(last.Expr.Range(), "team shares of org %q sum to %g, more than 1", org.Name, sum)
	}
}

var poolSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "capacity", Required: true},
		{Name: "scheduler"},
		{Name: "priority_via"},
		{Name: "queue_timeout"},
		{Name: "queue_size"},
		{Name: "gpus"},
		{Name: "reclaim"},
		{Name: "headroom"},
		{Name: "engine"},
		{Name: "priority_order"},
		{Name: "min"}, {Name: "max"}, {Name: "kv_target"}, {Name: "capacity_interval"}, {Name: "capacity_hold"}, // capacity = "auto"
	},
}

func (d *decoder) decodePools(blocks hcl.Blocks) {
	seen := map[string]hcl.Range{}
	for _, b := range blocks.OfType("pool") {
		name, ok := d.label(b, "pool", seen)
		c := d.content(b.Body, poolSchema)
		p := Pool{Name: name,
			QueueTimeout: DefaultQueueTimeout, QueueSize: DefaultQueueSize, DefRange: b.DefRange}
		d.decodeCapacity(c.Attributes, &p)
		d.duration(c.Attributes, "queue_timeout", &p.QueueTimeout)
		intAttr(d, c.Attributes, "queue_size", 1, 1<<24, &p.QueueSize)
		intAttr(d, c.Attributes, "gpus", 0, 1<<24, &p.GPUs)
		d.decodeEngine(c.Attributes, b.DefRange, &p)
		d.decodeReclaim(c.Attributes, &p)
		d.decodeAutoHeadroom(c.Attributes, &p)
		if ok {
			d.cfg.Pools = append(d.cfg.Pools, p)
		}
	}
}

// decodeEngine decodes a pool's engine kind and its options (scheduler,
// priority_via, priority_order). Without a kind the scheduler names it, as
// before kinds existed: "priority" vLLM, "gateway" llama-server, "fcfs" any
// OpenAI-compatible engine.
func (d *decoder) decodeEngine(attrs hcl.Attributes, def hcl.Range, p *Pool) {
	var kind, scheduler, via, order string
	ka := d.enum(attrs, "engine", &kind, engine.Kinds...)
	sa := d.enum(attrs, "scheduler", &scheduler, "priority", "fcfs", "gateway")
	va := d.enum(attrs, "priority_via", &via, "both", "header", "body")
	oa := d.enum(attrs, "priority_order", &order, "low_first", "high_first")
	if d.failed(ka, sa, va, oa, attrs) {
		return
	}
	if kind == "" {
		if scheduler == "" {
			scheduler = DefaultScheduler
		}
		kind = map[string]string{"priority": "vllm", "gateway": "llama-server", "fcfs": "openai"}[scheduler]
		if scheduler != "priority" {
			via = "" // as before kinds: priority_via only matters to a priority scheduler
		}
	}
	e, err := engine.New(kind, engine.Options{Scheduler: scheduler, PriorityVia: via, PriorityOrder: order})
	if err != nil {
		at := def
		for _, a := range []*hcl.Attribute{oa, va, sa, ka} { // the most specific setting given
			if a != nil {
				at = a.Expr.Range()
				break
			}
		}
		d.errorf(at, "%v", err)
		return
	}
	p.Engine = e
}

// failed reports whether one of the named attributes present in attrs
// was refused (its decoded pointer is nil).
func (d *decoder) failed(ka, sa, va, oa *hcl.Attribute, attrs hcl.Attributes) bool {
	for name, a := range map[string]*hcl.Attribute{"engine": ka, "scheduler": sa, "priority_via": va, "priority_order": oa} {
		if _, given := attrs[name]; given && a == nil {
			return true
		}
	}
	return false
}

// decodeReclaim decodes a pool's reclaim and headroom (after its capacity
// and engine): reclaim defaults to the engine's (DefaultReclaim), headroom
// to DefaultHeadroom of the capacity; it must leave borrowers a slot.
func (d *decoder) decodeReclaim(attrs hcl.Attributes, p *Pool) {
	p.Reclaim = p.Engine.DefaultReclaim()
	name := p.Reclaim.String()
	if a := d.enum(attrs, "reclaim", &name, "preempt", "holdback", "none"); a != nil {
		p.Reclaim, _ = engine.ParseReclaim(name)
		if p.Reclaim == engine.ReclaimPreempt && !p.Engine.Resumes {
			d.errorf(a.Expr.Range(), "reclaim = \"preempt\" needs an engine that resumes a request from its answer so far (scheduler \"priority\" or \"gateway\"); the %s engines of this pool do not: use \"holdback\" or \"none\"", p.Engine.Name)
		}
	}
	p.Headroom = DefaultHeadroom(p.Capacity)
	if a := intAttr(d, attrs, "headroom", 0, MaxCapacity, &p.Headroom); a != nil && p.Capacity > 0 && p.Headroom >= p.Capacity {
		d.errorf(a.Expr.Range(), "headroom must be less than the pool's capacity (%d): borrowers need a slot", p.Capacity)
	}
	if p.Reclaim == engine.ReclaimNone {
		p.Headroom = 0
	}
}

// DefaultHeadroom is a pool's headroom when its configuration gives none:
// a quarter of the capacity, rounded down.
func DefaultHeadroom(capacity int) int { return capacity / 4 }

var (
	modelSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "upstream_model"},
			{Name: "pool", Required: true},
			{Name: "class"},
			{Name: "key_file"},
			{Name: "max_context_tokens"},
			{Name: "max_output_tokens"},
		},
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "cost"},
			{Type: "upstream", LabelNames: []string{"name"}},
		},
	}
	costSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "input_per_mtok"},
			{Name: "output_per_mtok"},
			{Name: "cached_per_mtok"},
		},
	}
	upstreamSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "base_url", Required: true},
			{Name: "key_file"},
		},
	}
)

// upstreamSite is where an upstream name was first given within a pool.
type upstreamSite struct {
	model, base string
	r           hcl.Range
}

func (d *decoder) decodeModels(blocks hcl.Blocks) {
	seen := map[string]hcl.Range{}
	// pool → upstream name → first definition: within a pool an upstream
	// name is one engine (its metrics are labelled by pool and name), so
	// two models may name the same engine alike but not two engines.
	names := map[string]map[string]upstreamSite{}
	for _, b := range blocks.OfType("model") {
		name, ok := d.label(b, "model", seen)
		c := d.content(b.Body, modelSchema)
		m := Model{Name: name, UpstreamModel: name, Class: DefaultClass, MaxContextTokens: DefaultMaxContextTokens, MaxOutputTokens: DefaultMaxOutputTokens, DefRange: b.DefRange}
		d.str(c.Attributes, "upstream_model", &m.UpstreamModel)
		if a := d.str(c.Attributes, "pool", &m.Pool); a != nil {
			if !d.poolDefined(blocks, m.Pool) {
				d.errorf(a.Expr.Range(), "unknown pool %q", m.Pool)
			}
		}
		d.enum(c.Attributes, "class", &m.Class, "interactive", "batch")
		d.secretPath(c.Attributes, "key_file", fmt.Sprintf("model %q key_file", name), &m.KeyFile)
		intAttr(d, c.Attributes, "max_context_tokens", 1, llmflow.MaxRecordTokens, &m.MaxContextTokens)
		if a := c.Attributes["max_output_tokens"]; a != nil {
			intAttr(d, c.Attributes, "max_output_tokens", 1, llmflow.MaxRecordTokens, &m.MaxOutputTokens)
		} else {
			m.MaxOutputTokens = min(m.MaxOutputTokens, m.MaxContextTokens)
		}
		if m.MaxOutputTokens > m.MaxContextTokens {
			if a := c.Attributes["max_output_tokens"]; a != nil {
				d.errorf(a.Expr.Range(), "max_output_tokens (%d) is more than max_context_tokens (%d)", m.MaxOutputTokens, m.MaxContextTokens)
			}
		}

		if cb := d.single(c.Blocks, "cost"); cb != nil {
			cc := d.content(cb.Body, costSchema)
			inf := math.Inf(1)
			d.float(cc.Attributes, "input_per_mtok", 0, inf, &m.Cost.InputPerMTok)
			d.float(cc.Attributes, "output_per_mtok", 0, inf, &m.Cost.OutputPerMTok)
			d.float(cc.Attributes, "cached_per_mtok", 0, inf, &m.Cost.CachedPerMTok)
		}

		ups := map[string]hcl.Range{}
		n := 0
		for _, ub := range c.Blocks.OfType("upstream") {
			n++
			uname, uok := d.label(ub, "upstream", ups)
			uc := d.content(ub.Body, upstreamSchema)
			u := Upstream{Name: uname, KeyFile: m.KeyFile, DefRange: ub.DefRange}
			d.url(uc.Attributes, "base_url", &u.BaseURL)
			d.secretPath(uc.Attributes, "key_file", fmt.Sprintf("model %q upstream %q key_file", name, uname), &u.KeyFile)
			if uok && u.BaseURL != nil && m.Pool != "" {
				d.checkUpstreamName(names, m.Pool, name, uname, u.BaseURL.String(), ub.LabelRanges[0])
			}
			if uok {
				m.Upstreams = append(m.Upstreams, u)
			}
		}
		if n == 0 {
			d.errorf(b.LabelRanges[0], "model %q has no upstream block", name)
		}
		if ok {
			d.cfg.Models = append(d.cfg.Models, m)
		}
	}
}

// checkUpstreamName reports an upstream named like another one of the
// same pool but with another base URL.
func (d *decoder) checkUpstreamName(names map[string]map[string]upstreamSite, pool, model, name, base string, r hcl.Range) {
	if names[pool] == nil {
		names[pool] = map[string]upstreamSite{}
	}
	prev, ok := names[pool][name]
	if !ok {
		names[pool][name] = upstreamSite{model: model, base: base, r: r}
		return
	}
	if prev.base != base {
		d.errorf(r, "upstream %q of model %q is %s, but in pool %q that name is already %s (model %q, at %s); give each engine its own upstream name",
			name, model, base, pool, prev.base, prev.model, posOf(prev.r))
	}
}

// poolDefined reports whether a pool block named name exists, even one
// that had errors (so that a broken pool does not also make every model
// using it report an unknown pool).
func (d *decoder) poolDefined(blocks hcl.Blocks, name string) bool {
	for _, b := range blocks.OfType("pool") {
		if b.Labels[0] == name {
			return true
		}
	}
	return false
}

// DefaultRetention is how long raw accounting records are kept (store
// retention); hourly rollups are kept for ever.
const DefaultRetention = 90 * 24 * time.Hour

var storeSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "kind"},
		{Name: "path"},
		{Name: "dsn_file"},
		{Name: "fail_closed"},
		{Name: "queue_size"},
		{Name: "batch_size"},
		{Name: "flush_interval"},
		{Name: "retention"},
		{Name: "spool_dir"},
		{Name: "spool_sync"},
		{Name: "budget_refresh_interval"},
	},
}

// DefaultSpoolName is the postgres store's spool directory, next to the
// configuration file; a sqlite store's is its file's path + ".spool".
const DefaultSpoolName = "llmflow.spool"

func (d *decoder) decodeStore(b *hcl.Block) {
	s := &d.cfg.Store
	*s = Store{
		Kind:          DefaultStoreKind,
		Path:          d.resolve(DefaultStorePath),
		FailClosed:    true,
		BudgetRefresh: DefaultBudgetRefresh,
		QueueSize:     10000,
		BatchSize:     500,
		FlushInterval: time.Second,
		Retention:     DefaultRetention,
		SpoolSync:     "interval",
	}
	defer func() {
		if s.SpoolDir == "" {
			s.SpoolDir = s.Path + ".spool"
			if s.Kind == "postgres" {
				s.SpoolDir = d.resolve(DefaultSpoolName)
			}
		}
	}()
	if b == nil {
		return
	}
	c := d.content(b.Body, storeSchema)
	kind := d.enum(c.Attributes, "kind", &s.Kind, "sqlite", "postgres")
	path := d.path(c.Attributes, "path", &s.Path)
	dsn := d.secretPath(c.Attributes, "dsn_file", "store dsn_file", &s.DSNFile)
	d.bool(c.Attributes, "fail_closed", &s.FailClosed)
	intAttr(d, c.Attributes, "queue_size", 1, math.MaxInt32, &s.QueueSize)
	intAttr(d, c.Attributes, "batch_size", 1, math.MaxInt32, &s.BatchSize)
	d.duration(c.Attributes, "flush_interval", &s.FlushInterval)
	d.duration(c.Attributes, "retention", &s.Retention)
	d.path(c.Attributes, "spool_dir", &s.SpoolDir)
	d.enum(c.Attributes, "spool_sync", &s.SpoolSync, "interval", "always", "never")
	d.duration(c.Attributes, "budget_refresh_interval", &s.BudgetRefresh)
	if kind == nil && c.Attributes["kind"] != nil {
		return // an invalid kind, reported already
	}
	if s.Kind == "sqlite" && dsn != nil {
		d.errorf(dsn.Expr.Range(), `dsn_file is for kind = "postgres"; a sqlite store is a file named by path`)
	}
	if s.Kind == "postgres" {
		if path != nil {
			d.errorf(path.Expr.Range(), `path is for kind = "sqlite"; a postgres store is named by dsn_file`)
		}
		if c.Attributes["dsn_file"] == nil {
			d.errorf(kind.Expr.Range(), `kind = "postgres" needs dsn_file, a file holding the DSN (postgres://user:password@host:5432/db)`)
		}
		s.Path = ""
	}
}

var fairShareSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "half_life"}},
}

func (d *decoder) decodeFairShare(b *hcl.Block) {
	d.cfg.FairShare = FairShare{HalfLife: fairshare.DefaultHalfLife}
	if b == nil {
		return
	}
	c := d.content(b.Body, fairShareSchema)
	d.duration(c.Attributes, "half_life", &d.cfg.FairShare.HalfLife)
}

var limitsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "max_body_bytes"},
		{Name: "max_header_bytes"},
		{Name: "max_response_bytes"},
		{Name: "read_header_timeout"},
		{Name: "read_timeout"},
		{Name: "idle_timeout"},
		{Name: "max_request_duration"},
		{Name: "connect_timeout"},
		{Name: "response_header_timeout"},
		{Name: "stream_idle_timeout"},
		{Name: "retries"},
		{Name: "auth_failures_per_minute"},
		{Name: "max_connections"},
		{Name: "max_connections_per_network"},
		{Name: "trusted_proxies"},
		{Name: "http_stack"},
	},
}

func (d *decoder) decodeLimits(b *hcl.Block) {
	l := &d.cfg.Limits
	*l = Limits{
		MaxBodyBytes:          8 << 20,
		MaxHeaderBytes:        64 << 10,
		MaxResponseBytes:      64 << 20,
		ReadHeaderTimeout:     10 * time.Second,
		ReadTimeout:           60 * time.Second,
		IdleTimeout:           120 * time.Second,
		MaxRequestDuration:    30 * time.Minute,
		ConnectTimeout:        5 * time.Second,
		StreamIdleTimeout:     DefaultStreamIdleTimeout,
		Retries:               2,
		AuthFailuresPerMinute: 60,

		MaxConnections:           4096,
		MaxConnectionsPerNetwork: 256,
		HTTPStack:                HTTPStackLlmflow,
	}
	if b == nil {
		return
	}
	c := d.content(b.Body, limitsSchema)
	d.enum(c.Attributes, "http_stack", &l.HTTPStack, HTTPStackLlmflow, HTTPStackNetHTTP)
	intAttr(d, c.Attributes, "max_body_bytes", 1, math.MaxInt64, &l.MaxBodyBytes)
	intAttr(d, c.Attributes, "max_header_bytes", 1, math.MaxInt32, &l.MaxHeaderBytes)
	intAttr(d, c.Attributes, "max_response_bytes", 1, math.MaxInt64, &l.MaxResponseBytes)
	d.duration(c.Attributes, "read_header_timeout", &l.ReadHeaderTimeout)
	d.duration(c.Attributes, "read_timeout", &l.ReadTimeout)
	d.duration(c.Attributes, "idle_timeout", &l.IdleTimeout)
	d.duration(c.Attributes, "max_request_duration", &l.MaxRequestDuration)
	d.duration(c.Attributes, "connect_timeout", &l.ConnectTimeout)
	d.duration(c.Attributes, "response_header_timeout", &l.ResponseHeaderTimeout)
	d.durationOrZero(c.Attributes, "stream_idle_timeout", &l.StreamIdleTimeout)
	intAttr(d, c.Attributes, "retries", 0, 100, &l.Retries)
	intAttr(d, c.Attributes, "auth_failures_per_minute", 0, math.MaxInt32, &l.AuthFailuresPerMinute)
	intAttr(d, c.Attributes, "max_connections", 0, math.MaxInt32, &l.MaxConnections)
	intAttr(d, c.Attributes, "max_connections_per_network", 0, math.MaxInt32, &l.MaxConnectionsPerNetwork)
	var proxies []string
	if at := d.strList(c.Attributes, "trusted_proxies", &proxies); at != nil {
		for _, p := range proxies {
			n, err := netip.ParsePrefix(p)
			if err != nil {
				a, aerr := netip.ParseAddr(p)
				if aerr != nil {
					d.errorf(at.Expr.Range(), "trusted_proxies: %q is neither a network (10.0.0.0/8) nor an address", p)
					continue
				}
				n = netip.PrefixFrom(a, a.BitLen())
			}
			l.TrustedProxies = append(l.TrustedProxies, n.Masked())
		}
	}
}

var healthSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "interval"},
		{Name: "timeout"},
		{Name: "cooldown"},
		{Name: "path"},
	},
}

func (d *decoder) decodeHealth(b *hcl.Block) {
	h := &d.cfg.Health
	*h = Health{
		Interval: 10 * time.Second,
		Timeout:  2 * time.Second,
		Cooldown: 30 * time.Second,
		Path:     DefaultHealthPath,
	}
	if b == nil {
		return
	}
	c := d.content(b.Body, healthSchema)
	d.duration(c.Attributes, "interval", &h.Interval)
	d.duration(c.Attributes, "timeout", &h.Timeout)
	d.duration(c.Attributes, "cooldown", &h.Cooldown)
	if a := d.str(c.Attributes, "path", &h.Path); a != nil {
		if !strings.HasPrefix(h.Path, "/") {
			d.errorf(a.Expr.Range(), "health path %q must start with \"/\"", h.Path)
		} else if strings.ContainsAny(h.Path, "?# \t") || hasControl(h.Path) {
			d.errorf(a.Expr.Range(), "health path %q must be a plain path (no query, fragment or space)", h.Path)
		}
	}
}

var tagsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "header"},
		{Name: "allowed"},
	},
}

// decodeTags decodes tags { header, allowed }: the request header clients
// may tag requests with (comma-separated, at most MaxRequestTags), and the
// only tags it may carry. A header without an allowed list is refused: a
// client could otherwise escape a tag budget or fill reports with tags.
func (d *decoder) decodeTags(b *hcl.Block) {
	if b == nil {
		return
	}
	t := &d.cfg.Tags
	if c, _ := b.Body.JustAttributes(); c["header"] != nil && c["allowed"] == nil {
		d.errorf(b.DefRange, "tags: header is set but allowed is not (list the tags clients may send)")
	}
	c := d.content(b.Body, tagsSchema)
	if a := d.str(c.Attributes, "header", &t.Header); a != nil && !isToken(t.Header) {
		d.errorf(a.Expr.Range(), "tags header %q is not a valid HTTP header name", t.Header)
	}
	if a := d.strList(c.Attributes, "allowed", &t.Allowed); a != nil {
		seen := map[string]bool{}
		for _, tag := range t.Allowed {
			switch {
			case strings.TrimSpace(tag) == "":
				d.errorf(a.Expr.Range(), "allowed tags must not be empty strings")
			case seen[tag]:
				d.errorf(a.Expr.Range(), "duplicate allowed tag %q", tag)
			}
			seen[tag] = true
		}
	}
}

// Defaults of the alerts block.
const (
	DefaultAlertTimeout     = 10 * time.Second
	DefaultSoftLimitPercent = 80
	DefaultSMTPTLS          = "starttls"
)

var (
	alertsSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "webhook_url"},
			{Name: "webhook_token_file"},
			{Name: "timeout"},
			{Name: "soft_limit_percent"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: "smtp"}},
	}
	smtpSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "server", Required: true},
			{Name: "from", Required: true},
			{Name: "to", Required: true},
			{Name: "username"},
			{Name: "password_file"},
			{Name: "tls"},
			{Name: "ca_file"},
		},
	}
)

// decodeAlerts decodes alerts { webhook_url, webhook_token_file, timeout,
// soft_limit_percent, smtp { server, from, to, username, password_file,
// tls, ca_file } }. A secret never crosses the network in clear: a
// webhook token needs https (or a loopback host), SMTP credentials need
// TLS (or a loopback relay).
func (d *decoder) decodeAlerts(b *hcl.Block) {
	if b == nil {
		return
	}
	al := &d.cfg.Alerts
	*al = Alerts{Timeout: DefaultAlertTimeout, SoftLimitPercent: DefaultSoftLimitPercent, DefRange: b.DefRange}
	c := d.content(b.Body, alertsSchema)
	d.url(c.Attributes, "webhook_url", &al.WebhookURL)
	if a := d.secretPath(c.Attributes, "webhook_token_file", "alerts webhook_token_file", &al.WebhookTokenFile); a != nil {
		switch {
		case c.Attributes["webhook_url"] == nil:
			d.errorf(a.Expr.Range(), "webhook_token_file is set but webhook_url is not")
		case al.WebhookURL != nil && al.WebhookURL.Scheme != "https" && !isLoopbackHost(al.WebhookURL.Hostname()):
			d.errorf(a.Expr.Range(), "webhook_token_file needs an https webhook_url: the token would cross the network in clear (http is only accepted for a loopback host)")
		}
	}
	d.duration(c.Attributes, "timeout", &al.Timeout)
	d.float(c.Attributes, "soft_limit_percent", 0, 100, &al.SoftLimitPercent)
	sb := d.single(c.Blocks, "smtp")
	if sb == nil {
		if c.Attributes["webhook_url"] == nil {
			d.errorf(b.DefRange, "alerts has nowhere to send: set webhook_url or an smtp block")
		}
		return
	}
	s := &SMTP{TLS: DefaultSMTPTLS}
	sc := d.content(sb.Body, smtpSchema)
	var host string
	if a := d.str(sc.Attributes, "server", &s.Server); a != nil {
		if err := checkHostPort(s.Server); err != nil {
			d.errorf(a.Expr.Range(), "smtp server %q: %v", s.Server, err)
		} else {
			host = hostOf(s.Server)
		}
	}
	if a := d.str(sc.Attributes, "from", &s.From); a != nil {
		if err := checkMailbox(s.From); err != nil {
			d.errorf(a.Expr.Range(), "smtp from: %v", err)
		}
	}
	if a := d.strList(sc.Attributes, "to", &s.To); a != nil {
		if len(s.To) == 0 {
			d.errorf(a.Expr.Range(), "smtp to must list at least one address")
		}
		for _, addr := range s.To {
			if err := checkMailbox(addr); err != nil {
				d.errorf(a.Expr.Range(), "smtp to: %v", err)
			}
		}
	}
	ua := d.str(sc.Attributes, "username", &s.Username)
	pa := d.secretPath(sc.Attributes, "password_file", "alerts smtp password_file", &s.PasswordFile)
	switch {
	case ua != nil && pa == nil && sc.Attributes["password_file"] == nil:
		d.errorf(ua.Expr.Range(), "smtp username is set but password_file is not")
	case pa != nil && ua == nil && sc.Attributes["username"] == nil:
		d.errorf(pa.Expr.Range(), "smtp password_file is set but username is not")
	}
	if ta := d.enum(sc.Attributes, "tls", &s.TLS, "starttls", "implicit", "none"); ta != nil && s.TLS == "none" {
		if ua != nil && host != "" && !isLoopbackHost(host) {
			d.errorf(ta.Expr.Range(), `smtp tls = "none" with a username would send the password in clear; use "starttls" or "implicit" (plain text is only accepted for a loopback relay)`)
		}
	}
	if a := d.path(sc.Attributes, "ca_file", &s.CAFile); a != nil && s.TLS == "none" {
		d.errorf(a.Expr.Range(), `smtp ca_file is for tls = "starttls" or "implicit"`)
	}
	al.SMTP = s
}

// value evaluates the named attribute without an evaluation context and
// converts it to ty. It returns nil when the attribute is absent or when
// its value is invalid, in which case a diagnostic is recorded.
func (d *decoder) value(attrs hcl.Attributes, name string, ty cty.Type) (cty.Value, *hcl.Attribute) {
	a := attrs[name]
	if a == nil {
		return cty.NilVal, nil
	}
	v, hds := a.Expr.Value(nil)
	if hds.HasErrors() {
		d.addHCL(hds)
		return cty.NilVal, nil
	}
	if v.IsNull() {
		d.errorf(a.Expr.Range(), "%s must not be null", name)
		return cty.NilVal, nil
	}
	if !v.IsWhollyKnown() {
		d.errorf(a.Expr.Range(), "%s must be a constant", name)
		return cty.NilVal, nil
	}
	v, err := convert.Convert(v, ty)
	if err != nil {
		d.errorf(a.Expr.Range(), "Incorrect attribute value type; Inappropriate value for attribute %q: %s.", name, err)
		return cty.NilVal, nil
	}
	return v, a
}

// str decodes a non-empty string attribute into dst.
func (d *decoder) str(attrs hcl.Attributes, name string, dst *string) *hcl.Attribute {
	v, a := d.value(attrs, name, cty.String)
	if a == nil {
		return nil
	}
	s := v.AsString()
	if strings.TrimSpace(s) == "" {
		d.errorf(a.Expr.Range(), "%s must not be empty", name)
		return nil
	}
	*dst = s
	return a
}

// strList decodes a list of non-null strings into dst.
func (d *decoder) strList(attrs hcl.Attributes, name string, dst *[]string) *hcl.Attribute {
	v, a := d.value(attrs, name, cty.List(cty.String))
	if a == nil {
		return nil
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() {
			d.errorf(a.Expr.Range(), "%s must not contain null", name)
			return nil
		}
		out = append(out, e.AsString())
	}
	*dst = out
	return a
}

func (d *decoder) bool(attrs hcl.Attributes, name string, dst *bool) *hcl.Attribute {
	v, a := d.value(attrs, name, cty.Bool)
	if a == nil {
		return nil
	}
	*dst = v.True()
	return a
}

// float decodes a number in [lo, hi] into dst.
func (d *decoder) float(attrs hcl.Attributes, name string, lo, hi float64, dst *float64) *hcl.Attribute {
	v, a := d.value(attrs, name, cty.Number)
	if a == nil {
		return nil
	}
	f, _ := v.AsBigFloat().Float64()
	if math.IsNaN(f) || math.IsInf(f, 0) || f < lo || f > hi {
		if math.IsInf(hi, 1) {
			d.errorf(a.Expr.Range(), "%s must be a finite number ≥ %g", name, lo)
		} else {
			d.errorf(a.Expr.Range(), "%s must be between %g and %g", name, lo, hi)
		}
		return nil
	}
	*dst = f
	return a
}

// intAttr decodes a whole number in [lo, hi] into dst.
func intAttr[T int | int64](d *decoder, attrs hcl.Attributes, name string, lo, hi int64, dst *T) *hcl.Attribute {
	v, a := d.value(attrs, name, cty.Number)
	if a == nil {
		return nil
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() {
		d.errorf(a.Expr.Range(), "%s must be a whole number", name)
		return nil
	}
	below, above := bf.Cmp(new(big.Float).SetInt64(lo)) < 0, bf.Cmp(new(big.Float).SetInt64(hi)) > 0
	switch {
	case (below || above) && hi < math.MaxInt32:
		d.errorf(a.Expr.Range(), "%s must be between %d and %d", name, lo, hi)
		return nil
	case below:
		d.errorf(a.Expr.Range(), "%s must be at least %d", name, lo)
		return nil
	case above:
		d.errorf(a.Expr.Range(), "%s must be at most %d", name, hi)
		return nil
	}
	n, _ := bf.Int64()
	*dst = T(n)
	return a
}

// duration decodes a positive Go duration string ("30s", "168h") into dst.
func (d *decoder) duration(attrs hcl.Attributes, name string, dst *time.Duration) *hcl.Attribute {
	return d.durationAttr(attrs, name, dst, false)
}

// durationOrZero is duration for an attribute where "0" (or "0s") is
// allowed, meaning "disabled".
func (d *decoder) durationOrZero(attrs hcl.Attributes, name string, dst *time.Duration) *hcl.Attribute {
	return d.durationAttr(attrs, name, dst, true)
}

// durationAttr decodes a Go duration string into dst: positive, or with
// zero also when zero is allowed ("disabled").
func (d *decoder) durationAttr(attrs hcl.Attributes, name string, dst *time.Duration, zero bool) *hcl.Attribute {
	v, a := d.value(attrs, name, cty.String)
	if a == nil {
		return nil
	}
	dur, err := time.ParseDuration(v.AsString())
	switch {
	case err != nil && zero:
		d.errorf(a.Expr.Range(), "%s: invalid duration %q (use Go syntax such as \"30s\" or \"2m\"; \"0\" disables)", name, v.AsString())
		return nil
	case err != nil:
		d.errorf(a.Expr.Range(), "%s: invalid duration %q (use Go syntax such as \"30s\" or \"168h\")", name, v.AsString())
		return nil
	case dur < 0 && zero:
		d.errorf(a.Expr.Range(), "%s must not be negative, got %q", name, v.AsString())
		return nil
	case dur <= 0 && !zero:
		d.errorf(a.Expr.Range(), "%s must be a positive duration, got %q", name, v.AsString())
		return nil
	}
	*dst = dur
	return a
}

// enum decodes a string that must be one of allowed into dst.
func (d *decoder) enum(attrs hcl.Attributes, name string, dst *string, allowed ...string) *hcl.Attribute {
	var s string
	a := d.str(attrs, name, &s)
	if a == nil {
		return nil
	}
	for _, ok := range allowed {
		if s == ok {
			*dst = s
			return a
		}
	}
	quoted := make([]string, len(allowed))
	for i, s := range allowed {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	d.errorf(a.Expr.Range(), "%s must be one of %s, got %q", name, strings.Join(quoted, ", "), s)
	return nil
}

// url decodes an absolute http or https URL into dst. The URL itself is
// never repeated in a diagnostic: it could hold credentials.
func (d *decoder) url(attrs hcl.Attributes, name string, dst **url.URL) *hcl.Attribute {
	var s string
	a := d.str(attrs, name, &s)
	if a == nil {
		return nil
	}
	u, err := parseUpstreamURL(s)
	if err != nil {
		d.errorf(a.Expr.Range(), "%s: %v", name, err)
		return nil
	}
	*dst = u
	return a
}

// path decodes a file path, resolved against the configuration's directory.
func (d *decoder) path(attrs hcl.Attributes, name string, dst *string) *hcl.Attribute {
	var s string
	a := d.str(attrs, name, &s)
	if a == nil {
		return nil
	}
	if hasControl(s) {
		d.errorf(a.Expr.Range(), "%s contains a control character", name)
		return nil
	}
	*dst = d.resolve(s)
	return a
}

// secretPath is path for a secret file, recording its range under what for
// Config.Secrets.
func (d *decoder) secretPath(attrs hcl.Attributes, name, what string, dst *string) *hcl.Attribute {
	a := d.path(attrs, name, dst)
	if a != nil {
		d.cfg.ranges[what] = a.Expr.Range()
	}
	return a
}

func (d *decoder) resolve(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(d.dir, p)
}
