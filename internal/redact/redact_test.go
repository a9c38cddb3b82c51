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

func TestDSN(t *testing.T) {
	for _, tc := range []struct {
		name, msg, dsn string
		pw             []string
		want           string
	}{
		{"one-letter password leaves words alone",
			"dial tcp 127.0.0.1:3306: connect: connection refused (user u:t@tcp(127.0.0.1:3306)/db)", "u:t@tcp(127.0.0.1:3306)/db", nil,
			"dial tcp 127.0.0.1:3306: connect: connection refused (user [redacted])"},
		{"password in userinfo, DSN not quoted whole",
			"parse u:t@tcp(h)/x failed", "u:t@tcp(h)/db", nil,
			"parse u:[redacted]@tcp(h)/x failed"},
		{"URL form",
			"cannot parse `postgres://app:s3cr3t@db:5432/x`", "postgres://app:s3cr3t@db:5432/llmflow", nil,
			"cannot parse `postgres://app:[redacted]@db:5432/x`"},
		{"key=value, quoted and not",
			"bad conn: host=other password='p w' sslmode=x and password=pw2 port=1", "host=db password='p w'", []string{"pw2"},
			"bad conn: host=other password='[redacted]' sslmode=x and password=[redacted] port=1"},
		{"the whole DSN", "bad conn: host=db password='p w'", "host=db password='p w'", nil, "bad conn: [redacted]"},
		{"a longer value that only starts with the password is kept",
			"password=tea", "host=db password=t", nil, "password=tea"},
		{"no password", "connect: refused", "u@tcp(h)/db", nil, "connect: refused"},
		{"a long password quoted back as a word", `time: invalid duration "s3cr3t-Pw"`, "u:s3cr3t-Pw@tcp(h)/db", nil,
			`time: invalid duration "[redacted]"`},
		{"a long password inside a longer word is kept", "xs3cr3t-Pwx", "u:s3cr3t-Pw@tcp(h)/db", nil, "xs3cr3t-Pwx"},
		{"a short password alone is kept outside its place", "dial tcp t: refused", "u:t@tcp(h)/db", nil, "dial tcp t: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := redact.DSN(tc.msg, tc.dsn, tc.pw...); got != tc.want {
				t.Errorf("DSN(%q)\n got %q\nwant %q", tc.msg, got, tc.want)
			}
		})
	}
}

// FuzzDSN: whatever the message and DSN, the DSN never survives whole and
// its password never survives in the user:password@ place.
func FuzzDSN(f *testing.F) {
	f.Add("dial u:t@tcp(h)/db: refused", "u:t@tcp(h)/db")
	f.Add("postgres://a:b@c/d?password=e", "host=x password='e f'")
	f.Add(`invalid duration "longpassword"`, "u:longpassword@tcp(h)/db")
	f.Fuzz(func(t *testing.T, msg, dsn string) {
		got := redact.DSN(msg, dsn)
		if dsn != "" && !strings.Contains(redact.Mask, dsn) && strings.Contains(got, dsn) && !strings.Contains(msg, redact.Mask) {
			t.Fatalf("DSN %q survives in %q", dsn, got)
		}
	})
}

// FuzzDSNPassword: the password of a user:password@ DSN never survives in
// the user:password@ place of a message, whatever the message. (FuzzDSN
// checks the whole DSN only.) Passwords with ':', '@' or '=' would make
// the DSN mean something else, and '[' or ']' could read as part of the
// mask: those are left out.
func FuzzDSNPassword(f *testing.F) {
	f.Add("dial u:t@tcp(h)/db: refused", "t")
	f.Add("error 1045: access denied for llmflow:s3cret@localhost", "s3cret")
	f.Add("x:pw@y:pw@z :pw@", "pw")
	f.Fuzz(func(t *testing.T, msg, pw string) {
		if pw == "" || strings.ContainsAny(pw, ":@=[]") {
			t.Skip()
		}
		dsn := "u:" + pw + "@tcp(h)/db"
		if got := redact.DSN(msg, dsn); strings.Contains(got, ":"+pw+"@") {
			t.Fatalf("password %q survives in %q (from %q)", pw, got, msg)
		}
	})
}
