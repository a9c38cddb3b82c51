package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/server"
)

// version is set with -ldflags "-X main.version=…"; otherwise it comes
// from the module's build information.
var version = ""

// buildVersion is the version `llmflow version` prints and /healthz shows:
// see versionString.
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionString(version, bi)
}

// versionString is the version set with -ldflags (ldflags), else the main
// module's version from bi (as `go install …@version` records it), else
// "dev"; followed, when bi records them (a build in a VCS checkout), by the
// revision's first 7 characters and ", dirty" for a modified work tree:
// "v0.3.1", "dev (rev abcdef1)", "v0.3.1-2-gabcdef1 (rev abcdef1, dirty)".
// bi may be nil.
func versionString(ldflags string, bi *debug.BuildInfo) string {
	v := ldflags
	if v == "" && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "dev"
	}
	if bi == nil {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if dirty {
		return v + " (rev " + rev + ", dirty)"
	}
	return v + " (rev " + rev + ")"
}

// exitError carries an exit status; its message was already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Run is the whole command line: main calls it with the process's
// arguments and streams, end-to-end tests call it directly. It returns the
// exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, e := newRootEnv(stdout, stderr)
	defer e.flushLogs()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(stderr, "llmflow: %v\n", err)
		return 1
	}
}

// env binds command options to flags and LLMFLOW_* variables. Secrets are
// never bound: they come from files named in the configuration.
type env struct {
	v      *viper.Viper
	stdout io.Writer
	stderr io.Writer

	mu   sync.Mutex
	logs []*logWriter // flushed when the command ends
}

// flushLogs writes out the log lines still buffered.
func (e *env) flushLogs() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, lw := range e.logs {
		lw.Flush()
	}
}

func newEnv(stdout, stderr io.Writer) *env {
	v := viper.New()
	v.SetEnvPrefix("LLMFLOW")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	return &env{v: v, stdout: stdout, stderr: stderr}
}

// bind makes flag name readable through e.v, overridable by LLMFLOW_NAME.
func (e *env) bind(cmd *cobra.Command, name string) {
	if err := e.v.BindPFlag(cmd.Name()+"."+name, cmd.Flags().Lookup(name)); err != nil {
		panic(err)
	}
	if err := e.v.BindEnv(cmd.Name()+"."+name, "LLMFLOW_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); err != nil {
		panic(err)
	}
}

// bindURL makes cmd's --url readable through e.v, overridable by
// LLMFLOW_ADMIN_URL: the one environment name for the gateway's address
// of every command that calls the admin API (admin, budgets, share).
func (e *env) bindURL(cmd *cobra.Command) {
	if err := e.v.BindPFlag(cmd.Name()+".url", cmd.Flags().Lookup("url")); err != nil {
		panic(err)
	}
	if err := e.v.BindEnv(cmd.Name()+".url", "LLMFLOW_ADMIN_URL"); err != nil {
		panic(err)
	}
}

func (e *env) str(cmd *cobra.Command, name string) string {
	return e.v.GetString(cmd.Name() + "." + name)
}

// bindPersistent makes root's persistent flag name readable through e.v
// under its own name (the same for every subcommand), overridable by
// LLMFLOW_NAME.
func (e *env) bindPersistent(root *cobra.Command, name string) {
	if err := e.v.BindPFlag(name, root.PersistentFlags().Lookup(name)); err != nil {
		panic(err)
	}
	if err := e.v.BindEnv(name, "LLMFLOW_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); err != nil {
		panic(err)
	}
}

// configPath is the configuration file named by -c/--config (a persistent
// flag of the root command, so every subcommand takes it) or
// LLMFLOW_CONFIG; "" when neither is set.
func (e *env) configPath() string { return e.v.GetString("config") }

// logFlags adds --log-level (default level) and --log-format to cmd,
// bound to LLMFLOW_LOG_LEVEL and LLMFLOW_LOG_FORMAT; logger reads them.
func (e *env) logFlags(cmd *cobra.Command, level string) {
	cmd.Flags().String("log-level", level, "debug, info, warn or error (LLMFLOW_LOG_LEVEL)")
	cmd.Flags().String("log-format", "text", "text or json (LLMFLOW_LOG_FORMAT)")
	e.bind(cmd, "log-level")
	e.bind(cmd, "log-format")
}

// logger writes leveled logs to stderr, as text (key=value) or JSON (one
// object per line) as --log-format says.
func (e *env) logger(cmd *cobra.Command) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(e.str(cmd, "log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	lw := newLogWriter(e.stderr, 100*time.Millisecond)
	var h slog.Handler
	switch f := e.str(cmd, "log-format"); f {
	case "", "text":
		h = slog.NewTextHandler(lw, opts)
	case "json":
		h = slog.NewJSONHandler(lw, opts)
	default:
		return nil, fmt.Errorf("--log-format: %q is neither text nor json", f)
	}
	e.mu.Lock()
	e.logs = append(e.logs, lw)
	e.mu.Unlock()
	return slog.New(flushOnWarn{h, lw}), nil
}

// loadConfig reads the configuration named by -c or LLMFLOW_CONFIG (why
// says what it is needed for, in the error when none is named). Its
// diagnostics go to stderr one per line, as file:line:col: message, and the
// command exits 1.
func (e *env) loadConfig(cmd *cobra.Command, why string) (*config.Config, error) {
	path := e.configPath()
	if path == "" {
		return nil, fmt.Errorf("no configuration: pass -c FILE or set LLMFLOW_CONFIG%s", why)
	}
	cfg, err := config.Load(path)
	return cfg, e.diagnostics(err)
}

// diagnostics prints configuration diagnostics and turns them into exit
// status 1; other errors pass through.
func (e *env) diagnostics(err error) error {
	var d config.Diagnostics
	if errors.As(err, &d) {
		fmt.Fprintln(e.stderr, err)
		return &exitError{code: 1}
	}
	return err
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root, _ := newRootEnv(stdout, stderr)
	return root
}

// newRootEnv is newRoot with its env (Run flushes its logs at the end).
func newRootEnv(stdout, stderr io.Writer) (*cobra.Command, *env) {
	e := newEnv(stdout, stderr)
	root := &cobra.Command{
		Use:           "llmflow",
		Short:         "Share a GPU cluster's LLM inference fairly between institutions",
		Long:          "llmflow is an OpenAI-compatible gateway in front of vLLM, llama-server and other engines,\nwith virtual keys, accounting in GPU-hours and fair-share scheduling.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(), // --version, as `llmflow version`
	}
	root.SetVersionTemplate("llmflow {{.Version}}\n")
	root.PersistentFlags().StringP("config", "c", "", "configuration file (LLMFLOW_CONFIG)")
	e.bindPersistent(root, "config")
	root.AddCommand(serveCmd(e), checkConfigCmd(e), versionCmd(e), vllmsimCmd(e), quickstartCmd(e), demoCmd(e), shareCmd(e), syncCmd(e), exportCmd(e), reportCmd(e), adminCmd(e), auditCmd(e), budgetsCmd(e), doctorCmd(e))
	return root, e
}

func versionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(e.stdout, "llmflow %s\n", buildVersion())
			return nil
		},
	}
}

// secretsHint follows the diagnostics of check-config when secret files
// are refused (config.CheckSecrets): on a workstation the secrets usually
// live elsewhere.
const secretsHint = "llmflow: secret files named by the configuration are refused (above: missing, unreadable, " +
	"open to group or others, or a master key too short); " +
	"on a machine without them, check-config --syntax-only checks everything else without opening them"

func checkConfigCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check-config [--syntax-only]",
		Short: "Validate a configuration file and every secret file it names",
		Long: "check-config parses the configuration, runs every semantic check and opens every secret\n" +
			"file it names. Each problem is printed as file:line:col: message, one per line.\n" +
			"With --syntax-only the secret files are not opened: the check for a workstation without them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadConfig(cmd, "")
			if err != nil {
				return err
			}
			syntaxOnly, _ := cmd.Flags().GetBool("syntax-only")
			note := ""
			if syntaxOnly {
				note = ", secret files not opened"
			} else if err := e.diagnostics(config.CheckSecrets(cfg)); err != nil {
				fmt.Fprintln(e.stderr, secretsHint)
				return err
			} else if cfg.TLS != nil {
				if err := server.CheckTLS(cfg.TLS); err != nil { // the pair serve would load
					return err
				}
			}
			fmt.Fprintf(e.stdout, "%s: ok (%d organisations, %d pools, %d models%s)\n", cfg.Filename, len(cfg.Orgs), len(cfg.Pools), len(cfg.Models), note)
			return nil
		},
	}
	cmd.Flags().Bool("syntax-only", false, "parse and check the configuration without opening the secret files it names")
	return cmd
}
