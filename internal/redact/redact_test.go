package redact_test

import (
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/internal/redact"
)

func TestString(t *testing.T) {
	const dsn = "llmflow:s3cret@tcp(db:3306)/slurm_acct_db"
	for _, c := range []struct {
		name    string
		s       string
		secrets []string
		want    string
	}{
		{"NoSecrets", "open: refused", nil, "open: refused"},
		{"EmptySecretIgnored", "open: refused", []string{""}, "open: refused"},
		{"NotPresent", "open: refused", []string{"s3cret"}, "open: refused"},
		{"One", "bad password s3cret", []string{"s3cret"}, "bad password [redacted]"},
		{"Every", "s3cret and s3cret", []string{"s3cret"}, "[redacted] and [redacted]"},
		// The password is inside the DSN: the whole DSN goes, whatever the
		// order of the secrets.
		{"PasswordInDSN", "invalid DSN " + dsn + ": x", []string{"s3cret", dsn}, "invalid DSN [redacted]: x"},
		{"DSNThenPassword", "invalid DSN " + dsn + ": x", []string{dsn, "s3cret"}, "invalid DSN [redacted]: x"},
		{"PasswordAlone", "timeout=s3cret is no duration, in " + dsn, []string{"s3cret", dsn}, "timeout=[redacted] is no duration, in [redacted]"},
		{"Overlapping", "xxabcdeyy", []string{"abcd", "cde"}, "xx[redacted]yy"},
		{"Adjacent", "abcd", []string{"ab", "cd"}, "[redacted]"},
		{"SelfOverlapping", "aaaa", []string{"aa"}, "[redacted]"},
		// A secret that occurs in the mask does not garble earlier masks.
		{"SecretInMask", "pw=red and " + dsn, []string{"red", dsn}, "pw=[redacted] and [redacted]"},
		{"Whole", "s3cret", []string{"s3cret"}, "[redacted]"},
		{"LongerThanText", "ab", []string{"abc"}, "ab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := redact.String(c.s, c.secrets...)
			if got != c.want {
				t.Errorf("String(%q, %q) = %q, want %q", c.s, c.secrets, got, c.want)
			}
			for _, x := range c.secrets {
				if x != "" && x != "red" && strings.Contains(got, x) {
					t.Errorf("%q still contains %q", got, x)
				}
			}
		})
	}
}

func FuzzString(f *testing.F) {
	f.Add("user:pw@tcp(h)/db failed", "pw", "user:pw@tcp(h)/db")
	f.Add("aaaa", "aa", "a")
	f.Fuzz(func(t *testing.T, s, a, b string) {
		got := redact.String(s, a, b)
		for _, x := range []string{a, b} {
			// A secret sharing a byte with the mask may be formed anew by
			// text next to a mask; the property holds for the others.
			if x != "" && !strings.ContainsAny(x, redact.Mask) && strings.Contains(got, x) {
				t.Errorf("String(%q, %q, %q) = %q: still contains %q", s, a, b, got, x)
			}
		}
	})
}
