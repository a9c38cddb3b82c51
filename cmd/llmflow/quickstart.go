package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/examples"
	"github.com/go-llmflow/llmflow/server"
	"github.com/go-llmflow/llmflow/vllmsim"
)

func quickstartCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quickstart",
		Short: "Run the gateway on its embedded defaults: SQLite store, simulated vLLM, a fresh key",
		Long: "quickstart writes quickstart.hcl, master.key and vllm.key into --dir (keeping files that\n" +
			"exist), starts a simulated vLLM where the configuration's upstream points, runs the gateway\n" +
			"with a SQLite store in the same directory, creates a client key and prints how to call it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := e.logger(cmd)
			if err != nil {
				return err
			}
			dir := e.str(cmd, "dir")
			cfgPath, err := writeQuickstart(dir)
			if err != nil {
				return err
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			model := cfg.Models[0]
			simKey, err := config.ReadSecret(model.KeyFile)
			if err != nil {
				return fmt.Errorf("vllm.key: %w", err)
			}
			sim := vllmsim.New(vllmsim.Config{Models: []string{model.UpstreamModel}, APIKey: simKey, Log: log})
			defer sim.Close()
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			// Bind the simulated engine's port before starting the gateway:
			// if something else holds it, the gateway would talk to that.
			simAddr := model.Upstreams[0].BaseURL.Host
			ln, err := net.Listen("tcp", simAddr)
			if err != nil {
				return fmt.Errorf("simulated vLLM cannot listen on %s (the upstream of %s): %w; stop what holds it or edit the upstream's base_url", simAddr, cfgPath, err)
			}
			simErr := make(chan error, 1)
			go func() { simErr <- sim.Serve(ctx, ln) }()

			ready := func(st server.Started) {
				_, secret, err := st.Admin.CreateKey(ctx,
					admin.KeyRequest{Team: cfg.Orgs[0].Teams[0].Name, Name: "quickstart"},
					admin.Principal{Name: "quickstart", Role: admin.RoleProxyAdmin})
				if err != nil {
					log.Error("create quickstart key", "err", err)
					cancel()
					return
				}
				printQuickstart(e, st.Addr, cfgPath, cfg, secret)
			}
			err = runServe(ctx, cfg, server.Options{Listen: e.str(cmd, "listen"), Log: log, Ready: ready})
			cancel()
			if serr := <-simErr; err == nil && serr != nil && !errors.Is(serr, context.Canceled) {
				err = fmt.Errorf("simulated vLLM: %w", serr)
			}
			return err
		},
	}
	cmd.Flags().String("dir", "llmflow-quickstart", "directory for the configuration, keys and database")
	cmd.Flags().String("listen", "127.0.0.1:8080", "gateway address (LLMFLOW_LISTEN)")
	e.logFlags(cmd, "info") // as serve: one line per request
	for _, f := range []string{"dir", "listen"} {
		e.bind(cmd, f)
	}
	return cmd
}

// writeQuickstart creates dir with the embedded configuration and two
// random secrets, keeping any file that is already there.
func writeQuickstart(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("quickstart directory: %w", err)
	}
	write := func(name string, data []byte, mode fs.FileMode) error {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("quickstart: %w", err)
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return fmt.Errorf("quickstart: %w", err)
		}
		return f.Close()
	}
	secret := func() []byte {
		var b [32]byte
		rand.Read(b[:])
		return []byte(hex.EncodeToString(b[:]) + "\n")
	}
	if err := write("quickstart.hcl", examples.Quickstart, 0o644); err != nil {
		return "", err
	}
	if err := write("master.key", secret(), 0o600); err != nil {
		return "", err
	}
	if err := write("vllm.key", secret(), 0o600); err != nil {
		return "", err
	}
	return filepath.Join(dir, "quickstart.hcl"), nil
}

func printQuickstart(e *env, addr, cfgPath string, cfg *config.Config, key string) {
	base := "http://" + addr
	m := cfg.Models[0]
	fmt.Fprintf(e.stdout, `llmflow quickstart is running (stop with Ctrl-C)

  gateway      %s
  engine       simulated vLLM at %s (model %s)
  config       %s
  store        %s
  master key   %s (admin API)
  client key   %s
               (team %s of %s; shown once: keep it)

Call it:

  curl -s %s/v1/chat/completions \
    -H "Authorization: Bearer %s" -H "Content-Type: application/json" \
    -d '{"model":"%s","messages":[{"role":"user","content":"Hello"}]}'

  curl -sN %s/v1/chat/completions \
    -H "Authorization: Bearer %s" -H "Content-Type: application/json" \
    -d '{"model":"%s","stream":true,"messages":[{"role":"user","content":"Hello"}]}'

  OPENAI_BASE_URL=%s/v1 OPENAI_API_KEY=%s python3 -c \
    'from openai import OpenAI; print(OpenAI().chat.completions.create(model="%s", messages=[{"role":"user","content":"Hello"}]).choices[0].message.content)'

More keys:  curl -s %s/admin/keys -H "Authorization: Bearer $(cat %s)" -d '{"team":"lab-chem","name":"me"}'
Metrics:    curl -s %s/metrics
Your key:   curl -s %s/v1/me -H "Authorization: Bearer %s"
Console:    %s/console/ (sign in with the master key's content)
`,
		base, m.Upstreams[0].BaseURL, m.UpstreamModel, cfgPath, cfg.Store.Path, cfg.MasterKeyFile, key,
		cfg.Orgs[0].Teams[0].Name, cfg.Orgs[0].Name,
		base, key, m.Name,
		base, key, m.Name,
		base, key, m.Name,
		base, cfg.MasterKeyFile,
		base,
		base, key,
		base)
}
