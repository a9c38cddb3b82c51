package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxSecretBytes bounds what ReadSecret reads: secrets are keys and tokens.
const maxSecretBytes = 64 << 10

// ErrEmptySecret is returned (wrapped) by ReadSecret for a file holding
// nothing but white space.
var ErrEmptySecret = errors.New("secret file is empty")

// Secrets lists every secret file the configuration names, in file order:
// master key, metrics token, cache salt key, each model's key_file, each
// upstream's own key_file (one that differs from its model's), the store's
// dsn_file, the alert webhook token and the SMTP password. Range is the
// attribute's value in the file, zero for a Config not built by Parse.
func (c *Config) Secrets() []Secret {
	var out []Secret
	add := func(what, path string) {
		if path != "" {
			out = append(out, Secret{What: what, Path: path, Range: c.ranges[what]})
		}
	}
	add("master_key_file", c.MasterKeyFile)
	add("metrics_token_file", c.MetricsTokenFile)
	add("cache_salt_key_file", c.CacheSaltKeyFile)
	for _, m := range c.Models {
		add(fmt.Sprintf("model %q key_file", m.Name), m.KeyFile)
		for _, u := range m.Upstreams {
			if u.KeyFile != m.KeyFile {
				add(fmt.Sprintf("model %q upstream %q key_file", m.Name, u.Name), u.KeyFile)
			}
		}
	}
	add("store dsn_file", c.Store.DSNFile)
	add("alerts webhook_token_file", c.Alerts.WebhookTokenFile)
	if c.Alerts.SMTP != nil {
		add("alerts smtp password_file", c.Alerts.SMTP.PasswordFile)
	}
	if c.Slurm != nil {
		add("slurm dsn_file", c.Slurm.DSNFile)
	}
	if c.Writeback != nil {
		add("writeback dsn_file", c.Writeback.DSNFile)
	}
	if c.Redis != nil {
		add("redis password_file", c.Redis.PasswordFile)
	}
	if c.TLS != nil {
		add("tls key_file", c.TLS.KeyFile)
	}
	if c.OIDC != nil {
		add("oidc client_secret_file", c.OIDC.ClientSecretFile)
	}
	return out
}

// MinMasterKeyBytes is the shortest master key CheckSecrets accepts: the
// master key guards the whole admin API.
const MinMasterKeyBytes = 32

// AllowInsecureSecretFilesEnv names the environment variable that, set to
// "1", lets CheckSecrets accept secret files readable or writable by group
// or others (a shared test machine, a secret mounted by an orchestrator
// that cannot set modes). Nothing else is relaxed.
const AllowInsecureSecretFilesEnv = "LLMFLOW_ALLOW_INSECURE_SECRET_FILES"

// CheckSecrets reads every secret file c names (see Secrets) and reports,
// as Diagnostics such as "gateway.hcl:1:19: master_key_file: open /x: no
// such file or directory", those that cannot be read or are empty, those
// whose mode gives any access to group or others (mode&0o077 != 0, unless
// AllowInsecureSecretFilesEnv is "1"), and a master key shorter than
// MinMasterKeyBytes. The content of a file never appears in a diagnostic.
// It returns nil when every secret is acceptable. check-config and serve
// both call it.
func CheckSecrets(c *Config) error {
	allowInsecure := os.Getenv(AllowInsecureSecretFilesEnv) == "1"
	var ds Diagnostics
	for _, s := range c.Secrets() {
		pos := posOf(s.Range)
		if pos.Filename == "" {
			pos.Filename = c.Filename
		}
		add := func(msg string) { ds = append(ds, Diagnostic{Pos: pos, Message: s.What + ": " + msg}) }
		v, fi, err := readSecret(s.Path)
		if err != nil {
			add(err.Error())
			continue
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 && !allowInsecure {
			add(fmt.Sprintf("%s: mode %04o gives access to group or others; chmod 600 it (or set %s=1 to accept it)",
				s.Path, perm, AllowInsecureSecretFilesEnv))
		}
		if s.What == "master_key_file" && len(v) < MinMasterKeyBytes {
			add(fmt.Sprintf("%s: the master key is %d bytes, at least %d are needed (openssl rand -hex 32)",
				s.Path, len(v), MinMasterKeyBytes))
		}
	}
	return ds.err()
}

// ReadSecret reads a secret file and returns its content without the
// surrounding white space (a trailing newline in particular). An empty file
// is an error wrapping ErrEmptySecret, and so is a file larger than 64 KiB.
// Errors name the path, never the content.
func ReadSecret(path string) (string, error) {
	v, _, err := readSecret(path)
	return v, err
}

// readSecret is ReadSecret, also returning the file's information (of the
// file opened) for CheckSecrets' mode check.
func readSecret(path string) (string, os.FileInfo, error) {
	// A FIFO would block the open until a writer comes, a device would be
	// read from: only regular files (and directories, which fail to read)
	// are opened. A Stat error is left to Open, whose error names it.
	if fi, err := os.Stat(path); err == nil && fi.Mode().Type()&^os.ModeDir != 0 {
		return "", nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err // *fs.PathError: "open /x: no such file or directory"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return "", nil, err // *fs.PathError: "read /x: is a directory"
	}
	if len(b) > maxSecretBytes {
		return "", nil, fmt.Errorf("%s: secret file is larger than %d bytes", path, maxSecretBytes)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", nil, fmt.Errorf("%s: %w", path, ErrEmptySecret)
	}
	return s, fi, nil
}
