// Package redact removes secrets (DSNs, passwords, keys) from text before
// it is shown in an error or a log.
package redact

import "strings"

// Mask is what replaces a secret.
const Mask = "[redacted]"

// String returns s with every occurrence of every non-empty secret
// replaced by Mask. Occurrences are found in s as given, before any
// replacement, and every run of bytes covered by one or more secrets
// becomes a single Mask: a secret inside another (a password inside its
// DSN), overlapping secrets, or a secret that occurs in Mask itself
// never leave part of a secret or a garbled mask behind.
func String(s string, secrets ...string) string {
	var covered []bool
	for _, x := range secrets {
		if x == "" {
			continue
		}
		for i := 0; i <= len(s)-len(x); {
			j := strings.Index(s[i:], x)
			if j < 0 {
				break
			}
			if covered == nil {
				covered = make([]bool, len(s))
			}
			for k := i + j; k < i+j+len(x); k++ {
				covered[k] = true
			}
			i += j + 1
		}
	}
	if covered == nil {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if !covered[i] {
			j := i
			for j < len(s) && !covered[j] {
				j++
			}
			b.WriteString(s[i:j])
			i = j
			continue
		}
		b.WriteString(Mask)
		for i < len(s) && covered[i] {
			i++
		}
	}
	return b.String()
}

// minTokenPassword is the length from which a password is also masked
// where it stands alone as a word (see DSN).
const minTokenPassword = 8

// DSN returns msg with a database DSN and its password masked by Mask,
// structurally:
//
//   - the whole DSN, wherever it occurs;
//   - the password where it stands as a password: "user:PASSWORD@" (URL and
//     go-sql-driver/mysql forms) and "password=PASSWORD" (libpq's
//     key=value form, quoted or not);
//   - elsewhere, a password of minTokenPassword bytes or more where it is a
//     whole word (not inside a longer run of letters and digits), as when
//     a driver quotes a DSN value back.
//
// A password is never masked inside other words, and a short one never
// outside its place: a one-letter password "t" leaves "tcp" as it is, and
// the mask never tells what it replaced.
func DSN(msg, dsn string, passwords ...string) string {
	msg = String(msg, dsn)
	for _, p := range append(passwords, dsnPassword(dsn)) {
		if p == "" {
			continue
		}
		msg = replaceBetween(msg, ":", p, "@")
		for _, q := range []string{"'", `"`} {
			msg = replaceBetween(msg, "password="+q, p, q)
		}
		msg = replaceKeyValue(msg, "password=", p)
		if len(p) >= minTokenPassword {
			msg = replaceWord(msg, p)
		}
	}
	return msg
}

// replaceWord masks p where it is not preceded or followed by a letter or
// a digit.
func replaceWord(s, p string) string {
	word := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
	}
	var b strings.Builder
	for {
		i := strings.Index(s, p)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(p)
		if (i > 0 && word(s[i-1])) || (end < len(s) && word(s[end])) {
			b.WriteString(s[:i+1])
			s = s[i+1:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString(Mask)
		s = s[end:]
	}
}

// dsnPassword is the password of dsn as a driver would read it: the URL
// userinfo's, or the part between the first ':' and the last '@' of the
// mysql form, or the value of libpq's password=.
func dsnPassword(dsn string) string {
	if i := strings.Index(dsn, "password="); i >= 0 {
		v := dsn[i+len("password="):]
		if len(v) > 0 && (v[0] == '\'' || v[0] == '"') {
			if j := strings.IndexByte(v[1:], v[0]); j >= 0 {
				return v[1 : 1+j]
			}
			return v[1:]
		}
		if j := strings.IndexAny(v, " \t"); j >= 0 {
			return v[:j]
		}
		return v
	}
	if i := strings.Index(dsn, "://"); i >= 0 {
		dsn = dsn[i+3:]
	}
	if at := strings.LastIndex(dsn, "@"); at > 0 {
		if _, pw, ok := strings.Cut(dsn[:at], ":"); ok {
			return pw
		}
	}
	return ""
}

// replaceBetween masks p wherever it stands between before and after,
// keeping both.
func replaceBetween(s, before, p, after string) string {
	return strings.ReplaceAll(s, before+p+after, before+Mask+after)
}

// replaceKeyValue masks an unquoted key=p value ending at a space or the
// end of s.
func replaceKeyValue(s, key, p string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, key+p)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(key) + len(p)
		if end < len(s) && s[end] != ' ' && s[end] != '\t' && s[end] != '\n' && s[end] != ',' && s[end] != ')' {
			b.WriteString(s[:end])
			s = s[end:]
			continue
		}
		b.WriteString(s[:i+len(key)])
		b.WriteString(Mask)
		s = s[end:]
	}
}
