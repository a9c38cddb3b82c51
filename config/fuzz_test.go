package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/config"
)

// FuzzParse treats the configuration as untrusted input: Parse must never
// panic, must return either a configuration or Diagnostics, and a
// configuration it accepts must satisfy the documented invariants. Seeds
// are every fixture and example, plus testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{"testdata/good/*.hcl", "testdata/bad/*.hcl", "../examples/*.hcl"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, files...)
	}
	for _, file := range seeds {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, err := config.Parse("fuzz/c.hcl", src)
		if err != nil {
			if cfg != nil {
				t.Fatal("config and error both returned")
			}
			var ds config.Diagnostics
			if !errors.As(err, &ds) || len(ds) == 0 {
				t.Fatalf("error %T is not non-empty Diagnostics", err)
			}
			for _, d := range ds {
				if d.Message == "" || strings.ContainsAny(d.Message, "\r\n") {
					t.Fatalf("diagnostic message %q is empty or not one line", d.Message)
				}
				if d.Pos.Filename == "" {
					t.Fatalf("diagnostic %q has no file name", d.Message)
				}
			}
			return
		}
		if cfg == nil {
			t.Fatal("nil config without error")
		}
		checkInvariants(t, cfg)
	})
}

// checkInvariants checks what every accepted configuration guarantees.
func checkInvariants(t *testing.T, cfg *config.Config) {
	t.Helper()
	var sum float64
	for _, o := range cfg.Orgs {
		if o.Share < 0 || o.Share > 1 {
			t.Fatalf("org %q share %v", o.Name, o.Share)
		}
		sum += o.Share
	}
	if sum > 1+1e-6 {
		t.Fatalf("org shares sum to %v", sum)
	}
	for _, p := range cfg.Pools {
		if p.Capacity < 1 || p.Capacity > 1<<20 {
			t.Fatalf("pool %q capacity %d", p.Name, p.Capacity)
		}
	}
	for _, m := range cfg.Models {
		if _, ok := cfg.Pool(m.Pool); !ok {
			t.Fatalf("model %q: unknown pool %q", m.Name, m.Pool)
		}
		if len(m.Upstreams) == 0 {
			t.Fatalf("model %q has no upstream", m.Name)
		}
		for _, u := range m.Upstreams {
			if u.BaseURL == nil || (u.BaseURL.Scheme != "http" && u.BaseURL.Scheme != "https") ||
				u.BaseURL.User != nil || u.BaseURL.RawQuery != "" || u.BaseURL.Fragment != "" {
				t.Fatalf("model %q upstream %q: bad URL %v", m.Name, u.Name, u.BaseURL)
			}
		}
	}
	l := cfg.Limits
	if l.Retries < 0 || l.AuthFailuresPerMinute < 0 || l.MaxBodyBytes < 1 || l.ReadTimeout <= 0 ||
		cfg.FairShare.HalfLife <= 0 || cfg.Store.QueueSize < 1 || !strings.HasPrefix(cfg.Health.Path, "/") {
		t.Fatalf("limits out of range: %+v", cfg)
	}
	for _, s := range cfg.Secrets() {
		if s.Path == "" {
			t.Fatalf("secret %s without path", s.What)
		}
	}
}
