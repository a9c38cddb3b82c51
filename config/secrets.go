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
	return out
}

// CheckSecrets reads every secret file c names (see Secrets) and reports
// those that cannot be read or are empty, as Diagnostics such as
// "gateway.hcl:1:19: master_key_file: open /x: no such file or directory".
// The content of a file never appears in a diagnostic. It returns nil when
// every secret is readable.
func CheckSecrets(c *Config) error {
	var ds Diagnostics
	for _, s := range c.Secrets() {
		if _, err := ReadSecret(s.Path); err != nil {
			pos := posOf(s.Range)
			if pos.Filename == "" {
				pos.Filename = c.Filename
			}
			ds = append(ds, Diagnostic{Pos: pos, Message: s.What + ": " + err.Error()})
		}
	}
	return ds.err()
}

// ReadSecret reads a secret file and returns its content without the
// surrounding white space (a trailing newline in particular). An empty file
// is an error wrapping ErrEmptySecret, and so is a file larger than 64 KiB.
// Errors name the path, never the content.
func ReadSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err // *fs.PathError: "open /x: no such file or directory"
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return "", err // *fs.PathError: "read /x: is a directory"
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("%s: secret file is larger than %d bytes", path, maxSecretBytes)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s: %w", path, ErrEmptySecret)
	}
	return s, nil
}
