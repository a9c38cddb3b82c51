package llmflow

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"
)

// AdminTokenPrefix starts every admin token secret (delegated
// administration), so that it is never mistaken for a client key.
const AdminTokenPrefix = "llma-"

// NewAdminTokenSecret returns a fresh admin token secret: AdminTokenPrefix
// and 256 random bits as 64 hex digits, with its SHA-256 (what stores
// keep) and the hint listings show.
func NewAdminTokenSecret() (secret string, hash [32]byte, hint string) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	secret = AdminTokenPrefix + hex.EncodeToString(b[:])
	return secret, HashKey(secret), secret[:len(AdminTokenPrefix)+4] + "…"
}

// LooksLikeAdminToken reports whether tok has the shape of an admin token.
func LooksLikeAdminToken(tok string) bool { return strings.HasPrefix(tok, AdminTokenPrefix) }

// User is someone who administers through the admin API with tokens of
// their own. Users are disabled, never deleted: the audit trail names them.
type User struct {
	Name string
	// Org is the organisation the user was created under by one of its
	// admins ("" when a proxy admin created them); its admins see the user
	// in listings before any role is granted.
	Org        string
	CreatedAt  time.Time
	DisabledAt time.Time // zero while the user is enabled
	// Source is SourceSlurm for a user the Slurm import created (a Slurm
	// user that gained a role), else SourceAdmin.
	Source string
	// DisabledBy is SourceSlurm when the Slurm import disabled the user
	// (removed from Slurm: it re-enables them when they come back), ""
	// otherwise (an admin disabled them: the import leaves them so).
	DisabledBy string
}

// Active reports whether the user may still authenticate.
func (u User) Active() bool { return u.DisabledAt.IsZero() }

// ValidUserName reports whether name can be a user name: 1 to 64 letters,
// digits, '.', '_' or '-', not starting with '-' or '.', and not "master"
// (the audit trail's name for the master key). A user name is also the
// owner of the keys a member creates, a Slurm user name, so nothing that
// sacctmgr would read as a separator.
func ValidUserName(name string) bool { return ValidAccountName(name) && name != "master" }

// ValidAccountName reports whether name can name an account created
// through the admin API, like a Slurm account: 1 to 64 letters, digits,
// '.', '_' or '-', not starting with '-' or '.'.
func ValidAccountName(name string) bool {
	if name == "" || len(name) > 64 || name[0] == '-' || name[0] == '.' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// AdminToken is a user's admin token as stored: only the SHA-256 of the
// secret "llma-…" is kept.
type AdminToken struct {
	ID        string // "tok_" + 16 hex digits
	User      string
	Hash      [32]byte
	Hint      string
	Name      string
	CreatedAt time.Time
	RevokedAt time.Time // zero while the token is active
}

// Active reports whether the token may still be used.
func (t AdminToken) Active() bool { return t.RevokedAt.IsZero() }

// RoleGrant is a role a user holds on a scope: Org and Team empty for the
// proxy roles, Org alone for an organisation, Team alone for a team (team
// names are global; its organisation is the tree's to say).
type RoleGrant struct {
	User      string
	Role      string
	Org       string
	Team      string
	CreatedAt time.Time
	// Source is where the grant comes from: SourceAdmin (by hand through
	// the admin API; "" is read as that) or SourceSlurm (the Slurm import,
	// which removes it when Slurm no longer says so).
	Source string
}

// AdminAccount is an account change made through the admin API, kept on
// top of the tree from the configuration or from Slurm: an organisation,
// team or project created there (Created), or a mark disabling an account
// (Disabled), whichever source declares it.
type AdminAccount struct {
	Name     string
	Kind     Kind
	Parent   string
	Created  bool
	Disabled bool
	// Shares is the raw share of an account created here among its
	// siblings (as Account.Shares); 0: none, it only borrows.
	Shares float64
	At     time.Time // of the last change
}

// AuditEntry is one admin write: who did what to what, the object before
// and after (JSON, never a secret or a secret's hash), when and from
// which client network.
type AuditEntry struct {
	ID     int64
	Time   time.Time
	Actor  string // user name, "master" for the master key
	Action string // "user.create", "key.revoke", "role.grant", …
	Target string // what it acted on: "user bob", "key key_…"
	Org    string // where it sits in the tree, for filtering ("" proxy-wide)
	Team   string
	Before string // JSON, "" when the object did not exist
	After  string // JSON, "" when the object is gone
	Remote string // the client network (IPv4 address or IPv6 /64)
}

// AuditFilter selects audit entries: Time in [From, To) (zero: open),
// by Actor when set, with an ID below BeforeID when set (the next page),
// newest first, at most Limit (0: 1000).
type AuditFilter struct {
	From, To time.Time
	Actor    string
	BeforeID int64
	Limit    int
}
