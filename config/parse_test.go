package config_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/engine"
)

// cmpConfig compares decoded configurations, URLs by their string form,
// ignoring source ranges.
var cmpConfig = cmp.Options{
	cmpopts.IgnoreUnexported(config.Config{}),
	cmpopts.IgnoreFields(config.Org{}, "DefRange"),
	cmpopts.IgnoreFields(config.Team{}, "DefRange"),
	cmpopts.IgnoreFields(config.Pool{}, "DefRange"),
	cmpopts.IgnoreFields(config.Model{}, "DefRange"),
	cmpopts.IgnoreFields(config.Upstream{}, "DefRange"),
	cmp.Comparer(func(a, b *url.URL) bool {
		if a == nil || b == nil {
			return a == b
		}
		return a.String() == b.String()
	}),
}

// mustParse parses src as filename and fails the test on any error.
func mustParse(tb testing.TB, filename, src string) *config.Config {
	tb.Helper()
	cfg, err := config.Parse(filename, []byte(src))
	if err != nil {
		tb.Fatalf("Parse: %v", err)
	}
	return cfg
}

func mustURL(tb testing.TB, s string) *url.URL {
	tb.Helper()
	u, err := url.Parse(s)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// defaults returns the configuration of a file holding nothing, as if it
// were in dir.
func defaults(filename string) config.Config {
	return config.Config{
		Filename: filename,
		Store: config.Store{
			Kind:          "sqlite",
			Path:          filepath.Join(filepath.Dir(filename), "llmflow.db"),
			FailClosed:    true,
			BudgetRefresh: config.DefaultBudgetRefresh,
			QueueSize:     10000,
			BatchSize:     500,
			FlushInterval: time.Second,
			Retention:     90 * 24 * time.Hour,
			SpoolDir:      filepath.Join(filepath.Dir(filename), "llmflow.db.spool"),
			SpoolSync:     "interval",
		},
		FairShare: config.FairShare{HalfLife: 168 * time.Hour},
		Limits: config.Limits{
			MaxBodyBytes:          8 << 20,
			MaxHeaderBytes:        64 << 10,
			MaxResponseBytes:      64 << 20,
			ReadHeaderTimeout:     10 * time.Second,
			ReadTimeout:           60 * time.Second,
			IdleTimeout:           120 * time.Second,
			MaxRequestDuration:    30 * time.Minute,
			ConnectTimeout:        5 * time.Second,
			StreamIdleTimeout:     2 * time.Minute,
			Retries:               2,
			AuthFailuresPerMinute: 60,

			MaxConnections:           4096,
			MaxConnectionsPerNetwork: 256,
			HTTPStack:                config.HTTPStackLlmflow,
		},
		Health: config.Health{
			Interval: 10 * time.Second,
			Timeout:  2 * time.Second,
			Cooldown: 30 * time.Second,
			Path:     "/health",
		},
	}
}

func twoOrgs() []config.Org {
	return []config.Org{
		{Name: "etabA", Share: 0.8125, Teams: []config.Team{
			{Name: "lab-nlp", Org: "etabA"},
			{Name: "lab-vision", Org: "etabA"},
		}},
		{Name: "etabB", Share: 0.1875, Teams: []config.Team{
			{Name: "lab-chem", Org: "etabB"},
		}},
	}
}

func TestLoad_Examples(t *testing.T) {
	gateway := defaults("../examples/gateway.hcl")
	gateway.MasterKeyFile = "/etc/llmflow/master.key"
	gateway.Orgs = twoOrgs()
	gateway.Pools = []config.Pool{{Name: "b300", Capacity: 256, QueueTimeout: 30 * time.Second, QueueSize: 10000, Engine: kind("vllm", engine.Options{}), Reclaim: engine.ReclaimPreempt, Headroom: 64}}
	gateway.Models = []config.Model{{
		Name:             "llama-3.3-70b",
		UpstreamModel:    "meta-llama/Llama-3.3-70B-Instruct",
		Pool:             "b300",
		Class:            "interactive",
		KeyFile:          "/etc/llmflow/vllm.key",
		Cost:             llmflow.Cost{InputPerMTok: 0.02, OutputPerMTok: 0.20, CachedPerMTok: 0.002},
		MaxContextTokens: config.DefaultMaxContextTokens,
		MaxOutputTokens:  config.DefaultMaxOutputTokens,
		Upstreams: []config.Upstream{
			{Name: "gpu01", BaseURL: mustURL(t, "http://10.0.0.11:8000"), KeyFile: "/etc/llmflow/vllm.key"},
			{Name: "gpu02", BaseURL: mustURL(t, "http://10.0.0.12:8000"), KeyFile: "/etc/llmflow/gpu02.key"},
		},
	}}

	quick := defaults("../examples/quickstart.hcl")
	quick.MasterKeyFile = filepath.Join("..", "examples", "master.key")
	quick.Orgs = twoOrgs()
	quick.Pools = []config.Pool{{Name: "sim", Capacity: 16, QueueTimeout: 30 * time.Second, QueueSize: 10000, Engine: kind("vllm", engine.Options{}), Reclaim: engine.ReclaimPreempt, Headroom: 4}}
	quick.Models = []config.Model{{
		Name:             "sim-llama",
		UpstreamModel:    "sim/llama",
		Pool:             "sim",
		Class:            "interactive",
		KeyFile:          filepath.Join("..", "examples", "vllm.key"),
		Cost:             llmflow.Cost{InputPerMTok: 0.02, OutputPerMTok: 0.20, CachedPerMTok: 0.002},
		MaxContextTokens: config.DefaultMaxContextTokens,
		MaxOutputTokens:  config.DefaultMaxOutputTokens,
		Upstreams: []config.Upstream{
			{Name: "sim0", BaseURL: mustURL(t, "http://127.0.0.1:8001"), KeyFile: filepath.Join("..", "examples", "vllm.key")},
		},
	}}

	for _, tc := range []struct {
		path string
		want config.Config
	}{
		{"../examples/gateway.hcl", gateway},
		{"../examples/quickstart.hcl", quick},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			got, err := config.Load(tc.path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(&tc.want, got, cmpConfig); diff != "" {
				t.Errorf("Load mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoad_ErrRead(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "missing.hcl"))
	if err == nil || !strings.HasPrefix(err.Error(), "read config: open ") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load error = %v, want read config: … wrapping ErrNotExist", err)
	}
	var ds config.Diagnostics
	if errors.As(err, &ds) {
		t.Errorf("a read error is not Diagnostics")
	}
}

// TestParse_Empty checks every default, and that no error is a literal nil.
func TestParse_Empty(t *testing.T) {
	cfg, err := config.Parse("/etc/llmflow/gateway.hcl", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := defaults("/etc/llmflow/gateway.hcl")
	if diff := cmp.Diff(&want, cfg, cmpConfig); diff != "" {
		t.Errorf("defaults mismatch (-want +got):\n%s", diff)
	}
	if want.Store.Path != "/etc/llmflow/llmflow.db" {
		t.Errorf("store path %q is not next to the configuration", want.Store.Path)
	}
}

// TestParse_AbsentAndZero checks that zero disables retries and the auth
// failure limit while leaving them out takes the defaults.
func TestParse_AbsentAndZero(t *testing.T) {
	for _, tc := range []struct {
		name          string
		src           string
		retries, auth int
	}{
		{"absent block", ``, 2, 60},
		{"empty block", `limits {}`, 2, 60},
		{"zero", "limits {\n retries = 0\n auth_failures_per_minute = 0\n}", 0, 0},
		{"set", "limits {\n retries = 5\n auth_failures_per_minute = 10\n}", 5, 10},
		{"zero from an expression", "limits {\n retries = 1 - 1\n}", 0, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, "c.hcl", tc.src)
			if cfg.Limits.Retries != tc.retries || cfg.Limits.AuthFailuresPerMinute != tc.auth {
				t.Errorf("retries, auth_failures_per_minute = %d, %d; want %d, %d",
					cfg.Limits.Retries, cfg.Limits.AuthFailuresPerMinute, tc.retries, tc.auth)
			}
		})
	}
}

// TestParse_Escapes checks that $${ and %%{ give a literal ${ and %{ in
// every kind of value, and that a lone $ or % needs no escape.
func TestParse_Escapes(t *testing.T) {
	cfg, err := config.Load("testdata/good/escapes.hcl")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	m, ok := cfg.Model("m-${x}")
	if !ok {
		t.Fatalf("no model named %q in %+v", "m-${x}", cfg.Models)
	}
	for _, c := range []struct{ what, got, want string }{
		{"upstream_model", m.UpstreamModel, "org/%{name}-${v}"},
		{"base_url", m.Upstreams[0].BaseURL.String(), "http://10.0.0.1:8000/$%7Bprefix%7D/100%25"},
		{"base_url path", m.Upstreams[0].BaseURL.Path, "/${prefix}/100%"},
		{"key_file", m.KeyFile, "/etc/llmflow/${weird}/%{key}"},
		{"master_key_file", cfg.MasterKeyFile, "/etc/llmflow/100%/$HOME"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
}

// TestParse_Full checks a file setting every attribute.
func TestParse_Full(t *testing.T) {
	cfg, err := config.Load("testdata/good/full.hcl")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := config.Config{
		Filename:         "testdata/good/full.hcl",
		MasterKeyFile:    "/etc/llmflow/master.key",
		MetricsTokenFile: "testdata/good/secrets/metrics.token",
		CacheSaltKeyFile: "testdata/secrets/salt.key",
		Orgs: []config.Org{
			{Name: "a", Share: 0.75, Teams: []config.Team{
				{Name: "t1", Org: "a", Share: 0.5, HasShare: true},
				{Name: "t2", Org: "a"},
			}},
			{Name: "b", Share: 0.25},
			{Name: "borrower", Share: 0},
		},
		Pools: []config.Pool{
			{Name: "p", Capacity: 1048576, QueueTimeout: 2 * time.Minute, QueueSize: 50, Engine: kind("llama-server", engine.Options{}), Reclaim: engine.ReclaimPreempt, Headroom: 262144},
			{Name: "q", Capacity: 1, QueueTimeout: 30 * time.Second, QueueSize: 10000, Engine: kind("vllm", engine.Options{PriorityVia: "body"}), Reclaim: engine.ReclaimPreempt},
		},
		Models: []config.Model{{
			Name:             "batchy",
			UpstreamModel:    "batchy",
			Pool:             "q",
			Class:            "batch",
			MaxContextTokens: 131072,
			MaxOutputTokens:  config.DefaultMaxOutputTokens,
			Upstreams: []config.Upstream{
				{Name: "u1", BaseURL: mustURL(t, "https://gpu.example.org:8443/vllm"), KeyFile: "testdata/good/u1.key"},
				{Name: "u2", BaseURL: mustURL(t, "http://[fd00::1]:8000")},
			},
		}},
		Store: config.Store{
			Kind:          "postgres",
			DSNFile:       "testdata/good/dsn",
			FailClosed:    false,
			BudgetRefresh: config.DefaultBudgetRefresh,
			QueueSize:     100,
			BatchSize:     10,
			FlushInterval: 250 * time.Millisecond,
			Retention:     720 * time.Hour,
			SpoolDir:      "testdata/good/llmflow.spool",
			SpoolSync:     "interval",
		},
		FairShare: config.FairShare{HalfLife: 24 * time.Hour},
		Limits: config.Limits{
			MaxBodyBytes:          1 << 20,
			MaxHeaderBytes:        16 << 10,
			MaxResponseBytes:      32 << 20,
			ReadHeaderTimeout:     5 * time.Second,
			ReadTimeout:           30 * time.Second,
			IdleTimeout:           90 * time.Second,
			MaxRequestDuration:    time.Hour,
			ConnectTimeout:        time.Second,
			ResponseHeaderTimeout: 15 * time.Minute,
			StreamIdleTimeout:     0, // "0": disabled
			Retries:               0,
			AuthFailuresPerMinute: 0,

			MaxConnections:           100,
			MaxConnectionsPerNetwork: 0,
			HTTPStack:                config.HTTPStackLlmflow,
		},
		Health: config.Health{
			Interval: 5 * time.Second,
			Timeout:  time.Second,
			Cooldown: time.Minute,
			Path:     "/v1/models",
		},
	}
	if diff := cmp.Diff(&want, cfg, cmpConfig); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

func TestParse_URLs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://10.0.0.1:8000", "http://10.0.0.1:8000"},
		{"http://10.0.0.1:8000/", "http://10.0.0.1:8000"},
		{"https://vllm.example.org/v1/", "https://vllm.example.org/v1"},
		{"https://vllm.example.org/v1//", "https://vllm.example.org/v1/"}, // one slash only
		{"HTTP://Example.org:80/x", "http://Example.org:80/x"},
		{"http://[::1]:8000", "http://[::1]:8000"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			src := "pool \"p\" { capacity = 1 }\nmodel \"m\" {\n pool = \"p\"\n upstream \"u\" { base_url = \"" + tc.in + "\" }\n}\n"
			cfg := mustParse(t, "c.hcl", src)
			if got := cfg.Models[0].Upstreams[0].BaseURL.String(); got != tc.want {
				t.Errorf("base_url = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParse_ErrNoSecretInMessage checks that a rejected URL's password
// does not appear in the diagnostics.
func TestParse_ErrNoSecretInMessage(t *testing.T) {
	for _, u := range []string{
		"https://vllm:hunter2@10.0.0.1",
		"http://vllm:hunter2@10.0.0.1:bad",
		"http://vllm:hunter2@10.0.0.1/?x",
		"ftp://vllm:hunter2@10.0.0.1",
	} {
		_, err := config.Parse("c.hcl", []byte(`alerts { webhook_url = "`+u+`" }`))
		if err == nil {
			t.Fatalf("%s: accepted", u)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("diagnostic leaks the password: %v", err)
		}
	}
}

func TestParse_RelativePaths(t *testing.T) {
	src := `
master_key_file = "keys/master.key"
metrics_token_file = "/abs/metrics.token"
store {
  path = "../db/llmflow.db"
}
`
	// The same with a postgres store, whose DSN file is a path too.
	pgSrc := strings.Replace(src, `path = "../db/llmflow.db"`, "kind = \"postgres\"\n  dsn_file = \"dsn\"", 1)
	for _, tc := range []struct{ filename, master, store, dsn string }{
		{"/etc/llmflow/gw.hcl", "/etc/llmflow/keys/master.key", "/etc/db/llmflow.db", "/etc/llmflow/dsn"},
		{"gw.hcl", "keys/master.key", "../db/llmflow.db", "dsn"},
		{"conf/gw.hcl", "conf/keys/master.key", "db/llmflow.db", "conf/dsn"},
	} {
		t.Run(tc.filename, func(t *testing.T) {
			cfg := mustParse(t, tc.filename, src)
			cfg.Store.DSNFile = mustParse(t, tc.filename, pgSrc).Store.DSNFile
			got := []string{cfg.MasterKeyFile, cfg.MetricsTokenFile, cfg.Store.Path, cfg.Store.DSNFile}
			want := []string{filepath.FromSlash(tc.master), "/abs/metrics.token", filepath.FromSlash(tc.store), filepath.FromSlash(tc.dsn)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParse_Constants checks that constant expressions are evaluated.
func TestParse_Constants(t *testing.T) {
	cfg := mustParse(t, "c.hcl", `
org "a" { share = 0.5 + 0.25 }
org "b" { share = 1 / 4 }
pool "p" { capacity = 2 * 8 }
fairshare { half_life = "${24 * 7}h" }
`)
	if cfg.Orgs[0].Share != 0.75 || cfg.Orgs[1].Share != 0.25 || cfg.Pools[0].Capacity != 16 || cfg.FairShare.HalfLife != 168*time.Hour {
		t.Errorf("got shares %v, %v, capacity %d, half-life %v", cfg.Orgs[0].Share, cfg.Orgs[1].Share, cfg.Pools[0].Capacity, cfg.FairShare.HalfLife)
	}
}

// TestParse_ShareSumRounding checks that decimal shares summing to 1 are
// accepted despite binary rounding.
func TestParse_ShareSumRounding(t *testing.T) {
	mustParse(t, "c.hcl", `
org "a" { share = 0.7 }
org "b" { share = 0.2 }
org "c" { share = 0.1 }
`)
}

// TestParse_Positions checks exact line and column of diagnostics that
// the fixtures cannot mark (the whole file is one value).
func TestParse_Positions(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unterminated block", "pool \"p\" {\n  capacity = 1\n", "c.hcl:1:10: Unclosed configuration block"},
		{"unknown pool", "model \"m\" {\n\tpool = \"x\"\n\tupstream \"u\" { base_url = \"http://a\" }\n}\n", `c.hcl:2:9: unknown pool "x"`},
		{"variable in heredoc", "master_key_file = <<EOT\n/etc/${dir}/key\nEOT\n", "c.hcl:2:8: Variables not allowed; Variables may not be used here."},
		{"label template", "pool \"${x}\" { capacity = 1 }\n", "c.hcl:1:7: Invalid string literal; Template sequences are not allowed in this string."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("c.hcl", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded, want %q", tc.want)
			}
			if got := err.Error(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("error =\n%s\nwant prefix\n%s", got, tc.want)
			}
		})
	}
}

func TestLookups(t *testing.T) {
	cfg, err := config.Load("../examples/gateway.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := cfg.Pool("b300"); !ok || p.Capacity != 256 {
		t.Errorf("Pool(b300) = %v, %v", p, ok)
	}
	if _, ok := cfg.Pool("nope"); ok {
		t.Error("Pool(nope) found")
	}
	if o, ok := cfg.Org("etabB"); !ok || o.Share != 0.1875 {
		t.Errorf("Org(etabB) = %v, %v", o, ok)
	}
	if _, ok := cfg.Org("lab-nlp"); ok {
		t.Error("Org(lab-nlp) found")
	}
	if tm, ok := cfg.Team("lab-chem"); !ok || tm.Org != "etabB" {
		t.Errorf("Team(lab-chem) = %v, %v", tm, ok)
	}
	if _, ok := cfg.Team("etabA"); ok {
		t.Error("Team(etabA) found")
	}
	if m, ok := cfg.Model("llama-3.3-70b"); !ok || m.Pool != "b300" {
		t.Errorf("Model(llama-3.3-70b) = %v, %v", m, ok)
	}
	// The lookups return pointers into the configuration.
	p, _ := cfg.Pool("b300")
	p.Capacity = 1
	if cfg.Pools[0].Capacity != 1 {
		t.Error("Pool does not point into Config.Pools")
	}
}

// TestParse_GoodFixtures checks that every testdata/good file is accepted.
func TestParse_GoodFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "good", "*.hcl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			if _, err := config.Load(file); err != nil {
				t.Errorf("Load:\n%v", err)
			}
		})
	}
}

// TestParse_StoreKinds checks what each store kind keeps: a postgres store
// has a DSN file and no path, and both have the default retention.
func TestParse_StoreKinds(t *testing.T) {
	pg := mustParse(t, "/etc/llmflow/gw.hcl", "store {\n  kind = \"postgres\"\n  dsn_file = \"pg.dsn\"\n}\n").Store
	if pg.Kind != "postgres" || pg.DSNFile != "/etc/llmflow/pg.dsn" || pg.Path != "" || pg.Retention != config.DefaultRetention {
		t.Errorf("postgres store: %+v", pg)
	}
	lite := mustParse(t, "/etc/llmflow/gw.hcl", "store {\n  kind = \"sqlite\"\n  retention = \"24h\"\n}\n").Store
	if lite.Kind != "sqlite" || lite.Path != "/etc/llmflow/llmflow.db" || lite.DSNFile != "" || lite.Retention != 24*time.Hour {
		t.Errorf("sqlite store: %+v", lite)
	}
	if pg.SpoolDir != "/etc/llmflow/llmflow.spool" || lite.SpoolDir != "/etc/llmflow/llmflow.db.spool" || pg.SpoolSync != "interval" {
		t.Errorf("default spools: postgres %q, sqlite %q, sync %q", pg.SpoolDir, lite.SpoolDir, pg.SpoolSync)
	}
	own := mustParse(t, "/etc/llmflow/gw.hcl", "store {\n  spool_dir = \"/var/spool/llmflow\"\n  spool_sync = \"always\"\n}\n").Store
	if own.SpoolDir != "/var/spool/llmflow" || own.SpoolSync != "always" {
		t.Errorf("configured spool: %+v", own)
	}
	r := mustParse(t, "/etc/llmflow/gw.hcl", "redis {\n  address = \"10.0.0.5:6379\"\n  password_file = \"redis.pass\"\n  tls = true\n}\n").Redis
	if r == nil || r.Address != "10.0.0.5:6379" || r.PasswordFile != "/etc/llmflow/redis.pass" || !r.TLS || r.KeyPrefix != "llmflow:" || r.Timeout != 250*time.Millisecond || r.Replicas != 1 {
		t.Errorf("redis: %+v", r)
	}
	if r := mustParse(t, "gw.hcl", "redis {\n  address = \"r:6379\"\n  replicas = 3\n}\n").Redis; r.Replicas != 3 {
		t.Errorf("redis replicas = 3: %+v", r)
	}
	if config.DefaultRetention != 2160*time.Hour {
		t.Errorf("DefaultRetention = %v, want 90 days", config.DefaultRetention)
	}
}

func TestParse_Admin(t *testing.T) {
	if a := mustParse(t, "gw.hcl", "").Admin; a != nil {
		t.Errorf("no admin block: %+v", a)
	}
	a := mustParse(t, "gw.hcl", "admin {\n  listen = \"127.0.0.1:9090\"\n  allowed_origins = [\"https://console.example.org\", \"http://[::1]:8443\"]\n}\n").Admin
	if a == nil || a.Listen != "127.0.0.1:9090" || len(a.AllowedOrigins) != 2 || a.AllowedOrigins[1] != "http://[::1]:8443" {
		t.Errorf("admin block: %+v", a)
	}
	if a := mustParse(t, "gw.hcl", "admin {\n  allowed_origins = [\"https://c.example.org\"]\n}\n").Admin; a == nil || a.Listen != "" {
		t.Errorf("admin block without listen: %+v", a)
	}
}

// kind is the descriptor engine.New gives, for expectations.
func kind(k string, o engine.Options) engine.Descriptor {
	d, err := engine.New(k, o)
	if err != nil {
		panic(err)
	}
	return d
}

func TestParse_TrustedProxies(t *testing.T) {
	l := mustParse(t, "gw.hcl", "limits {\n  trusted_proxies = [\"127.0.0.1\", \"10.1.2.3/8\", \"fd00::/8\"]\n}\n").Limits
	want := []string{"127.0.0.1/32", "10.0.0.0/8", "fd00::/8"}
	if len(l.TrustedProxies) != len(want) {
		t.Fatalf("trusted_proxies: %v", l.TrustedProxies)
	}
	for i, w := range want {
		if l.TrustedProxies[i].String() != w {
			t.Errorf("trusted_proxies[%d] = %v, want %s", i, l.TrustedProxies[i], w)
		}
	}
	if _, err := config.Parse("gw.hcl", []byte("limits {\n  trusted_proxies = [\"nginx.local\"]\n}\n")); err == nil || !strings.Contains(err.Error(), "trusted_proxies") {
		t.Errorf("a host name: %v, want an error naming trusted_proxies", err)
	}
}

func TestParse_HTTPStack(t *testing.T) {
	if l := mustParse(t, "gw.hcl", "limits {\n  http_stack = \"net/http\"\n}\n").Limits; l.HTTPStack != config.HTTPStackNetHTTP {
		t.Errorf("http_stack = %q", l.HTTPStack)
	}
	_, err := config.Parse("gw.hcl", []byte("limits {\n  http_stack = \"fasthttp\"\n}\n"))
	if err == nil || !strings.Contains(err.Error(), "gw.hcl:2:") || !strings.Contains(err.Error(), "http_stack") {
		t.Errorf("an unknown stack: %v, want gw.hcl:2:col naming http_stack", err)
	}
}
