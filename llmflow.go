// Package llmflow is the domain every other package shares: API keys and
// their secrets, accounting records, their hourly rollups and costs, the
// account tree (organisations, teams, projects, their Slurm associations
// and GPU limits), admin users, tokens, roles and the audit trail, runtime
// upstreams and aliases, the outbox, and the error kinds the HTTP layer
// maps to statuses in one place.
//
// It imports nothing but the standard library; every other package may
// import it, it imports none of them.
package llmflow

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Key is a virtual API key as stored. The secret itself is never stored:
// only its SHA-256 (Hash). ID is the public identifier shown in listings.
type Key struct {
	ID   string   // public identifier, "key_" + 16 hex digits
	Hash [32]byte // SHA-256 of the secret "llmf-…"
	Hint string   // the first characters of the secret, for listings ("llmf-3f9a…")
	Name string

	Org     string
	Team    string
	Project string // may be empty: the key belongs to the team itself
	Owner   string // Slurm user the requests count under; may be empty

	RPM         int // requests per minute; 0 = unlimited
	TPM         int // tokens per minute; 0 = unlimited
	MaxInFlight int // concurrent requests; 0 = unlimited
	Tags        []string

	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is active
	// Disabled is a deactivation an administrator can undo (revocation
	// cannot): the key is refused while set.
	Disabled bool

	// ExpiresAt is when the key stops working (zero: never).
	ExpiresAt time.Time
	// Models are the models the key may use (configured names); empty:
	// every model its team may use.
	Models []string
	// PrevHash is the hash of the secret before the last rotation, valid
	// until PrevExpiresAt (zero PrevHash: never rotated, or no grace).
	PrevHash      [32]byte
	PrevExpiresAt time.Time
}

// Expired reports whether the key's expiry has passed at now.
func (k Key) Expired(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// Matches reports whether a secret hashing to h is the key's at now: its
// secret, or the one before its last rotation while that is in its grace
// period. Each is compared in constant time (which of the two matched may
// show in the time taken: both are the holder's).
func (k Key) Matches(h [32]byte, now time.Time) bool {
	if subtle.ConstantTimeCompare(h[:], k.Hash[:]) == 1 {
		return true
	}
	return k.PrevHash != [32]byte{} && subtle.ConstantTimeCompare(h[:], k.PrevHash[:]) == 1 && now.Before(k.PrevExpiresAt)
}

// AllowsModel reports whether the key's model list lets it use model.
func (k Key) AllowsModel(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

// Active reports whether the key may be used now: neither revoked nor
// disabled.
func (k Key) Active() bool { return k.RevokedAt.IsZero() && !k.Disabled }

// KeyFilter selects keys in listings. Empty fields match everything.
type KeyFilter struct {
	Org            string
	Team           string
	IncludeRevoked bool
}

// Outcome says how a request ended, for accounting.
type Outcome string

const (
	OutcomeOK            Outcome = "ok"             // complete answer (stream ended on [DONE])
	OutcomeUpstreamError Outcome = "upstream_error" // upstream answered with an error status or an error event
	OutcomeIncomplete    Outcome = "incomplete"     // stream ended without its terminator
	OutcomeClientGone    Outcome = "client_gone"    // the client left before the end
	OutcomeUnreachable   Outcome = "unreachable"    // no upstream could be reached
	OutcomeRejected      Outcome = "rejected"       // refused by the gateway before any upstream
)

// EstimateReason says why a record's usage is the gateway's estimate
// (Record.Estimated) rather than the engine's report: "" for a record whose
// usage the engine reported.
type EstimateReason string

const (
	EstimateNoUsage       EstimateReason = "no_usage"       // the engine's answer carried no usage
	EstimateInvalidUsage  EstimateReason = "invalid_usage"  // the engine's usage failed validation (negative, beyond the model's bound, cached > prompt, not integers)
	EstimateClientGone    EstimateReason = "client_gone"    // the client left before the usage came
	EstimateIncomplete    EstimateReason = "incomplete"     // the answer broke off before the usage came
	EstimateIdleTimeout   EstimateReason = "idle_timeout"   // the engine sent nothing for limits.stream_idle_timeout: the request was cancelled
	EstimateUpstreamError EstimateReason = "upstream_error" // the answer was unusable (an oversized body)
)

// MaxRecordTokens bounds each token count of a stored record. Stores clamp
// a record's counts into [0, MaxRecordTokens] (and mark it estimated,
// EstimateInvalidUsage) so that an hourly rollup sum cannot overflow an
// int64 before 2^31 such records land in one rollup row in one hour. It is
// 4096 times the largest context window of 2026's models; the gateway's
// own bound (a model's max_context_tokens) is at most this.
const MaxRecordTokens = 1 << 32

// MaxRecordGPUHours bounds the GPU-hours of one stored record, for the same
// reason: stores clamp GPUHours into [0, MaxRecordGPUHours] and store NaN
// as 0.
const MaxRecordGPUHours = 1e6

// Record is one accounting row: one per proxied request.
type Record struct {
	Time      time.Time // when the request arrived
	RequestID string

	KeyID    string
	Project  string
	Team     string
	Org      string
	Model    string // client-facing model name
	Pool     string
	Upstream string // upstream name within the model

	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	GPUHours         float64

	Status    int // HTTP status returned to the client
	Outcome   Outcome
	Estimated bool // usage estimated: the engine never reported it, or reported nonsense
	// EstimateReason says why the usage was estimated; "" when Estimated
	// is false.
	EstimateReason EstimateReason
	Stream         bool
	Priority       int // priority sent to the engine

	// Preemptions is how many times the gateway took the request's slot
	// back for a request within its reservation (pool reclaim =
	// "preempt") and resumed it; RecomputedTokens the prompt tokens the
	// engine prefilled again to resume it, not from its prefix cache. The
	// usage above is the client's (the prompt once, every completion
	// token); the recomputed tokens are the pool's overhead, charged to no
	// budget.
	Preemptions      int
	RecomputedTokens int64

	Latency time.Duration // arrival to last byte
	TTFB    time.Duration // arrival to first byte sent to the client; 0 when none was sent

	// Tags are the request's tags, in the order given. Stores keep them
	// with the record (no tags, nil or empty, reads back as nil) and roll
	// the request up once under each distinct tag.
	Tags []string
}

// ClampUsage brings r's token counts into [0, MaxRecordTokens], its cached
// tokens to at most its prompt tokens, and its GPU-hours into
// [0, MaxRecordGPUHours] (NaN to 0). When it changes anything it marks
// the usage estimated with EstimateInvalidUsage and reports true. Stores
// call it on every record they write, so that one bad record can neither
// fail a batch nor overflow a rollup.
func (r *Record) ClampUsage() (clamped bool) {
	clamp := func(v *int64, hi int64) {
		switch {
		case *v < 0:
			*v, clamped = 0, true
		case *v > hi:
			*v, clamped = hi, true
		}
	}
	clamp(&r.PromptTokens, MaxRecordTokens)
	clamp(&r.CompletionTokens, MaxRecordTokens)
	clamp(&r.CachedTokens, r.PromptTokens)
	switch g := r.GPUHours; {
	case g != g || g < 0: // NaN or negative
		r.GPUHours, clamped = 0, true
	case g > MaxRecordGPUHours:
		r.GPUHours, clamped = MaxRecordGPUHours, true
	}
	if clamped {
		r.Estimated, r.EstimateReason = true, EstimateInvalidUsage
	}
	return clamped
}

// Rollup is the accounting of one hour (or, for a query summing a range,
// of the range) for one combination of the record fields it is keyed by.
// Stores maintain rollups as records are written, in the same transaction:
// a record written again (same RequestID) is never counted twice. Reports
// read rollups, never raw records.
//
// Owner is the Slurm user of the key (Key.Owner) at the time the record was
// written, "" for a record without a key or whose key has no owner. Tag is
// set only by the per-tag rollups: a request with several tags counts once
// under each distinct tag, and a request without tags under the tag "".
// Fields that a grouped query does not keep are "".
type Rollup struct {
	Hour time.Time // start of the hour, UTC; zero when a query sums a whole range

	Org     string
	Team    string
	Project string
	KeyID   string
	Owner   string
	Model   string
	Pool    string
	Tag     string

	Requests          int64 // records rolled up
	PromptTokens      int64
	CompletionTokens  int64
	CachedTokens      int64
	GPUHours          float64
	EstimatedRequests int64 // of Requests, those whose usage was estimated (Record.Estimated)
}

// Error codes understood by the HTTP layer. They say what kind of failure
// happened, never how to present it.
const (
	EINVALID      = "invalid"      // bad input from the caller
	EUNAUTHORIZED = "unauthorized" // missing or bad credentials
	EFORBIDDEN    = "forbidden"    // authenticated but not allowed
	ENOTFOUND     = "not_found"    // no such thing (or not visible to the caller)
	ECONFLICT     = "conflict"     // already exists
	ETOOLARGE     = "too_large"    // body or header over a limit
	ERATELIMIT    = "rate_limited" // too many requests
	EUNAVAILABLE  = "unavailable"  // no healthy upstream, store down
	EUPSTREAM     = "upstream"     // the upstream failed
	ETIMEOUT      = "timeout"      // the upstream did not answer in time
	EINTERNAL     = "internal"     // a bug or an unexpected failure
)

// Error is an error with a kind and a message safe to show to the caller.
// Anything internal (paths, DSNs, upstream bodies) belongs in Err, which is
// logged but never sent.
type Error struct {
	Code    string
	Message string // shown to the client
	Param   string // the offending request field, when there is one
	Err     error  // internal cause, never shown
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted public message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL
// for any other non-nil error and "" for nil.
func ErrorCode(err error) string {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	default:
		return EINTERNAL
	}
}

// ErrorMessage returns the public message of the first *Error in err's chain
// and a generic text for anything else, so internal detail never leaks.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// ErrNotFound is returned by stores when a lookup finds nothing.
var ErrNotFound = &Error{Code: ENOTFOUND, Message: "not found"}

// ShareUsage is the decayed fair-share usage of one account of a pool, as
// saved so that it survives a restart.
type ShareUsage struct {
	Path     []string // organisation, team, project…
	GPUHours float64
}

// SyncRun is one run of the Slurm import: when, from where, what changed
// and how it ended.
type SyncRun struct {
	ID       int64
	Started  time.Time
	Finished time.Time
	Source   string // "slurmdbd:<cluster>", "sacctmgr:<cluster>", "file:<path>"
	DryRun   bool

	Created       int // accounts new to llmflow
	SharesChanged int
	Reparented    int
	Disabled      int // removed in Slurm: disabled, never deleted
	Reenabled     int
	Members       int // accounts whose Slurm users changed
	LimitsChanged int // accounts whose GPU limits (GrpTRESMins, GrpTRES) changed
	Unchanged     int

	Outcome string // "applied", "unchanged", "dry-run" or "failed"
	Error   string // why it failed (never a DSN or a password)
}
