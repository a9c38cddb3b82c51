package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/server"
)

// TestServeEveryAcceptedConfig starts serve on every configuration that
// check-config accepts (config/testdata/good and examples), so that what
// check-config accepts, serve runs: no panic, no start-up error. Secret
// files are provided in a temporary directory (0600, 64 hex digits), and
// a PostgreSQL store is replaced by SQLite there: the store is not what is
// being tested.
func TestServeEveryAcceptedConfig(t *testing.T) {
	var files []string
	for _, pat := range []string{"../../config/testdata/good/*.hcl", "../../examples/*.hcl"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %d configuration files", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(filepath.Dir(file))+"/"+filepath.Base(file), func(t *testing.T) {
			cfg, err := config.Load(file)
			if err != nil {
				t.Fatalf("check-config refuses it: %v", err)
			}
			if cfg.Slurm != nil || cfg.Writeback != nil {
				t.Skip("a slurm or writeback block needs slurmdbd's database")
			}
			provideSecrets(t, cfg)
			if err := config.CheckSecrets(cfg); err != nil {
				t.Fatalf("CheckSecrets with the provided secrets: %v", err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			status := make(chan int, 1)
			// ready runs before serve accepts connections: ask from
			// another goroutine, then stop serve.
			err = serve(ctx, cfg, "127.0.0.1:0", log, func(addr string, gw *gateway.Gateway, adm *admin.Handler) {
				go func() {
					defer cancel()
					c := &http.Client{Timeout: 10 * time.Second}
					resp, err := c.Get("http://" + addr + "/healthz")
					if err != nil {
						t.Errorf("GET /healthz: %v", err)
						status <- 0
						return
					}
					resp.Body.Close()
					status <- resp.StatusCode
				}()
			})
			if err != nil {
				t.Fatalf("serve: %v", err)
			}
			select {
			case code := <-status:
				if code == 0 {
					t.Fatal("serve did not answer")
				}
			default:
				t.Fatal("serve returned without ever answering")
			}
		})
	}
	// Nothing written into the repository (a spool beside an example's store once was).
	if spools, _ := filepath.Glob("../../examples/*.spool"); len(spools) > 0 {
		t.Errorf("serving the examples left %v in the repository", spools)
	}
}

// provideSecrets points every secret file of cfg at a fresh file of its
// own in a temporary directory, and its SQLite store there too.
func provideSecrets(t *testing.T, cfg *config.Config) {
	t.Helper()
	dir := t.TempDir()
	n := 0
	secret := func(path *string) {
		if *path == "" {
			return
		}
		n++
		var b [32]byte
		rand.Read(b[:])
		p := filepath.Join(dir, "secret"+string(rune('a'+n)))
		if err := os.WriteFile(p, []byte(hex.EncodeToString(b[:])+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		*path = p
	}
	secret(&cfg.MasterKeyFile)
	secret(&cfg.MetricsTokenFile)
	secret(&cfg.CacheSaltKeyFile)
	for i := range cfg.Models {
		m := &cfg.Models[i]
		for j := range m.Upstreams {
			if m.Upstreams[j].KeyFile == m.KeyFile {
				m.Upstreams[j].KeyFile = ""
			}
			secret(&m.Upstreams[j].KeyFile)
		}
		secret(&m.KeyFile)
		for j := range m.Upstreams {
			if m.Upstreams[j].KeyFile == "" {
				m.Upstreams[j].KeyFile = m.KeyFile
			}
		}
	}
	secret(&cfg.Alerts.WebhookTokenFile)
	if cfg.Alerts.SMTP != nil {
		secret(&cfg.Alerts.SMTP.PasswordFile)
	}
	if cfg.OIDC != nil {
		secret(&cfg.OIDC.ClientSecretFile)
	}
	cfg.Store.Kind, cfg.Store.DSNFile, cfg.Store.Path = "sqlite", "", filepath.Join(dir, "llmflow.db")
	// The spool beside it: the default one beside the configuration's
	// store (examples/llmflow.db.spool for the quickstart example) would
	// be created in the repository.
	cfg.Store.SpoolDir = filepath.Join(dir, "llmflow.db.spool")
	// Every secret the configuration names (config.Secrets, what serve
	// reads) must now be one of ours: a secret field added to the
	// configuration and not above fails here, by name.
	for _, s := range cfg.Secrets() {
		if filepath.Dir(s.Path) != dir {
			t.Fatalf("%s (%s) not provided: teach provideSecrets about it", s.What, s.Path)
		}
	}
}

// serve runs server.Run as `llmflow serve` does, calling ready with the
// address, the first generation's gateway and its admin API once the
// listener is open.
func serve(ctx context.Context, cfg *config.Config, addr string, log *slog.Logger, ready func(addr string, gw *gateway.Gateway, adm *admin.Handler)) error {
	o := server.Options{Listen: addr, Log: log, Version: buildVersion()}
	if ready != nil {
		o.Ready = func(st server.Started) { ready(st.Addr, st.Gateway, st.Admin) }
	}
	return server.Run(ctx, cfg, o)
}
