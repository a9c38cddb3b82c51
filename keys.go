package llmflow

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
)

// KeyPrefix starts every client key secret; admin tokens will use "llma-".
const KeyPrefix = "llmf-"

// Bounds of the free-text fields of a key.
const (
	MaxKeyFieldBytes = 200 // Name, Project, Owner
	MaxTagBytes      = 100 // each of Tags
)

// NewKeySecret returns a fresh client key secret: KeyPrefix and 256 random
// bits as 64 hex digits, with its SHA-256 (what stores keep) and the hint
// listings show.
func NewKeySecret() (secret string, hash [32]byte, hint string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	secret = KeyPrefix + hex.EncodeToString(b[:])
	return secret, HashKey(secret), secret[:len(KeyPrefix)+4] + "…"
}

// HashKey is the digest a key secret is stored and looked up by.
func HashKey(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// LooksLikeKey reports whether tok has the shape of a client key secret,
// so that anything else is refused before any lookup.
func LooksLikeKey(tok string) bool { return strings.HasPrefix(tok, KeyPrefix) }

// NewID returns prefix and 16 random hex digits: the public identifier of
// a key ("key_…") or of any other object listings show.
func NewID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Validate checks what an administrator sets on a key: limits not
// negative, free-text fields bounded, tags non-empty and bounded. Where
// the key sits in the account tree (its team exists, its project is under
// it) is the tree's to check. The error is an *Error with code EINVALID
// naming the offending field.
func (k Key) Validate() error {
	bad := func(param, format string, args ...any) error {
		e := Errorf(EINVALID, format, args...)
		e.Param = param
		return e
	}
	switch {
	case k.RPM < 0:
		return bad("rpm", "rpm must not be negative")
	case k.TPM < 0:
		return bad("tpm", "tpm must not be negative")
	case k.MaxInFlight < 0:
		return bad("max_inflight", "max_inflight must not be negative")
	}
	for _, f := range []struct{ name, v string }{{"name", k.Name}, {"project", k.Project}, {"owner", k.Owner}} {
		if len(f.v) > MaxKeyFieldBytes {
			return bad(f.name, "%s is limited to %d bytes", f.name, MaxKeyFieldBytes)
		}
		if hasControl(f.v) {
			return bad(f.name, "%s must not contain control characters", f.name)
		}
	}
	// The owner is the Slurm user the key's usage is written back under
	// (sacctmgr add user A,B account=…): a space, comma, equals sign or
	// quote would name other users or accounts there.
	if strings.ContainsAny(k.Owner, " ,=\"'") {
		return bad("owner", "owner is a Slurm user name: no space, comma, equals sign or quote")
	}
	for _, t := range k.Tags {
		if t == "" || len(t) > MaxTagBytes {
			return bad("tags", "tags must be 1 to %d bytes", MaxTagBytes)
		}
		if hasControl(t) {
			return bad("tags", "tags must not contain control characters")
		}
	}
	if len(k.Models) > MaxKeyModels {
		return bad("models", "a key lists at most %d models", MaxKeyModels)
	}
	for _, m := range k.Models {
		if m == "" || len(m) > MaxKeyFieldBytes || hasControl(m) {
			return bad("models", "model names must be 1 to %d bytes without control characters", MaxKeyFieldBytes)
		}
	}
	return nil
}

// MaxKeyModels bounds a key's model list.
const MaxKeyModels = 64

// hasControl reports whether s has a control character (C0, DEL, C1): a
// NUL, which PostgreSQL's text refuses, or a line break or escape that
// would forge log lines and report rows.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, unicode.IsControl)
}
