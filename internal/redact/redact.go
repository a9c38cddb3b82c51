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
