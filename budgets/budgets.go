// Package budgets caps the GPU-hours a scope may spend per UTC day, week
// or month, and keeps the per-key rate and concurrency limits. It is pure:
// time is passed in, nothing here reads a store or the network.
//
// A budget is set on one scope (an organisation, a team, a project, a key
// or a tag), for every model or for one model only. A request falls under
// every budget of its organisation, team, project, key and tags, each for
// all models and for its own model; it is admitted only when every one of
// them can still pay for it.
//
// The request path is two calls on a ledger: Reserve at admission holds
// the request's maximum cost on each of its budgets (and takes its place
// in the key's rate windows and in-flight count), Settle at the end
// replaces the hold by the real cost. Holds are what make a budget
// impossible to overspend by a burst of long requests: what is in flight
// counts as spent until it settles. Mem is the in-memory ledger of one
// gateway; replicas share holds and spend through a store of their own
// (redisstate), with the budgets in force, their limits and the gateway's
// own figures still taken from a Mem (shared.go). Package admission puts
// a request's reservation and its fair-share admission behind one call.
package budgets

import (
	"github.com/go-llmflow/llmflow"

	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
)

// Kind is the kind of scope a budget caps.
type Kind string

const (
	KindOrg     Kind = "org"
	KindTeam    Kind = "team"
	KindProject Kind = "project"
	KindKey     Kind = "key"
	KindTag     Kind = "tag"
	// KindUser is a user association's: the keys owned by a user in an
	// account (its project, else its team). Its name is
	// UserScopeName(account, user). Slurm sets it (GrpTRESMins on a user
	// association, FromSlurm).
	KindUser Kind = "user"
)

// Kinds are the scope kinds, in the order a request's budgets are checked
// (the widest first, so a refusal names the widest exhausted scope).
var Kinds = []Kind{KindOrg, KindTeam, KindProject, KindUser, KindKey, KindTag}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindOrg, KindTeam, KindProject, KindUser, KindKey, KindTag:
		return true
	}
	return false
}

// UserScopeName is the name of the KindUser scope of user in account:
// "account/user", the user name lower-cased as Slurm keeps it.
func UserScopeName(account, user string) string { return account + "/" + strings.ToLower(user) }

// SplitUserScope returns the account and user of a KindUser scope's name;
// ok is false when name is not one.
func SplitUserScope(name string) (account, user string, ok bool) {
	account, user, ok = strings.Cut(name, "/")
	return account, user, ok && account != "" && user != ""
}

// Period is the calendar period a budget resets on (UTC).
type Period string

const (
	Day   Period = "day"
	Week  Period = "week" // ISO weeks: Monday 00:00 UTC
	Month Period = "month"
)

// Valid reports whether p is day, week or month.
func (p Period) Valid() bool { return p == Day || p == Week || p == Month }

// Start returns the start (UTC) of the period of kind p containing t.
func (p Period) Start(t time.Time) time.Time {
	t = t.UTC()
	y, m, d := t.Date()
	switch p {
	case Week:
		wd := (int(t.Weekday()) + 6) % 7 // Monday = 0
		return time.Date(y, m, d-wd, 0, 0, 0, 0, time.UTC)
	case Month:
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	default:
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
}

// End returns the end (exclusive, UTC) of the period of kind p that
// starts at start.
func (p Period) End(start time.Time) time.Time {
	switch p {
	case Week:
		return start.AddDate(0, 0, 7)
	case Month:
		return start.AddDate(0, 1, 0)
	default:
		return start.AddDate(0, 0, 1)
	}
}

// Source says where a budget was set.
type Source string

const (
	SourceAdmin Source = "admin" // PUT /admin/budgets, llmflow budgets set
	SourceSlurm Source = "slurm" // an account's GrpTRESMins in Slurm
)

// Scope is what a budget caps: a kind, a name and a model ("" = all
// models). Names: an organisation, team or project account name, a key
// ID, a tag.
type Scope struct {
	Kind  Kind
	Name  string
	Model string
}

// String names the scope in refusals and listings: `team "lab-nlp"`, with
// ` model "m"` when the budget is for one model.
func (s Scope) String() string {
	out := string(s.Kind) + " " + fmt.Sprintf("%q", s.Name)
	if s.Model != "" {
		out += fmt.Sprintf(" (model %q)", s.Model)
	}
	return out
}

// Budget caps the spend of one scope per period, in GPU-hours.
type Budget struct {
	Scope
	Period    Period
	MaxCost   float64 // GPU-hours per period; 0 refuses everything
	SoftLimit float64 // alert when spend reaches it; 0 = no alert
	Source    Source  // "" = SourceAdmin
	UpdatedAt time.Time
}

// ID identifies a budget in alerts and listings: kind/name/model.
func (b Budget) ID() string { return ID(b.Scope) }

// ID is the identifier of the budget of scope s.
func ID(s Scope) string { return string(s.Kind) + "/" + s.Name + "/" + s.Model }

// MaxGPUHours bounds a budget, an increase and a soft limit.
const MaxGPUHours = 1e9

// Validate checks what an administrator sets; the error names the field.
func (b Budget) Validate() error {
	if err := b.Scope.Validate(); err != nil {
		return err
	}
	switch {
	case !b.Period.Valid():
		return &FieldError{"period", fmt.Sprintf("period must be day, week or month, got %q", b.Period)}
	case !finite(b.MaxCost) || b.MaxCost < 0 || b.MaxCost > MaxGPUHours:
		return &FieldError{"max_cost", fmt.Sprintf("max_cost must be between 0 and %g GPU-hours", float64(MaxGPUHours))}
	case !finite(b.SoftLimit) || b.SoftLimit < 0 || b.SoftLimit > MaxGPUHours:
		return &FieldError{"soft_limit", fmt.Sprintf("soft_limit must be between 0 and %g GPU-hours", float64(MaxGPUHours))}
	case b.Source != "" && b.Source != SourceAdmin && b.Source != SourceSlurm:
		return &FieldError{"source", fmt.Sprintf("unknown source %q", b.Source)}
	}
	return nil
}

// Validate checks a scope: a known kind, a name of 1 to 200 bytes without
// control characters, a model name likewise (or empty).
func (s Scope) Validate() error {
	switch {
	case !s.Kind.Valid():
		return &FieldError{"kind", fmt.Sprintf("kind must be org, team, project, user, key or tag, got %q", s.Kind)}
	case s.Name == "" || len(s.Name) > 200 || strings.ContainsFunc(s.Name, unicode.IsControl):
		return &FieldError{"name", "name must be 1 to 200 bytes without control characters"}
	case len(s.Model) > 200 || strings.ContainsFunc(s.Model, unicode.IsControl):
		return &FieldError{"model", "model must be at most 200 bytes without control characters"}
	}
	if _, _, ok := SplitUserScope(s.Name); s.Kind == KindUser && !ok {
		return &FieldError{"name", `a user budget's name is "account/user"`}
	}
	return nil
}

// Increase raises a budget's limit by Amount GPU-hours until ExpiresAt,
// whatever the period; setting the budget again keeps it.
type Increase struct {
	ID        int64
	Scope     Scope
	Amount    float64
	ExpiresAt time.Time
	CreatedAt time.Time
}

// MaxIncreaseLife is how far ahead an increase may expire.
const MaxIncreaseLife = 366 * 24 * time.Hour

// Validate checks an increase created at now.
func (in Increase) Validate(now time.Time) error {
	if err := in.Scope.Validate(); err != nil {
		return err
	}
	switch {
	case !finite(in.Amount) || in.Amount <= 0 || in.Amount > MaxGPUHours:
		return &FieldError{"amount", fmt.Sprintf("amount must be more than 0 and at most %g GPU-hours", float64(MaxGPUHours))}
	case !in.ExpiresAt.After(now):
		return &FieldError{"expires_at", "expires_at must be in the future"}
	case in.ExpiresAt.After(now.Add(MaxIncreaseLife)):
		return &FieldError{"expires_at", "expires_at must be within a year"}
	}
	return nil
}

// FieldError is a validation error naming the offending field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Message }

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Merge returns the budgets in force: the admin-set ones, and those from
// Slurm (GrpTRESMins) for every scope the admin did not set. An admin
// budget on a scope takes precedence over Slurm's for that scope (same
// kind, name and model): llmflow's own setting is the explicit one, and
// the next Slurm import cannot undo it. Slurm budgets keep
// Source = SourceSlurm.
func Merge(admin, slurm []Budget) []Budget {
	out := make([]Budget, 0, len(admin)+len(slurm))
	seen := make(map[Scope]bool, len(admin))
	for _, b := range admin {
		if b.Source == "" {
			b.Source = SourceAdmin
		}
		seen[b.Scope] = true
		out = append(out, b)
	}
	for _, b := range slurm {
		if seen[b.Scope] {
			continue
		}
		seen[b.Scope] = true
		b.Source = SourceSlurm
		out = append(out, b)
	}
	return out
}

// Crossing is a budget reaching its soft limit for the first time in a
// period: what an alert says.
type Crossing struct {
	BudgetID    string
	Kind        Kind
	Name        string
	Model       string // "" = all models
	Period      Period
	PeriodStart time.Time // UTC
	Limit       float64   // effective limit (with increases), GPU-hours
	SoftLimit   float64
	Spent       float64 // GPU-hours when crossed
	At          time.Time
}

// ErrExhausted is wrapped by a Refusal of a budget.
var ErrExhausted = errors.New("budget exhausted")

// FromSlurm returns the budgets Slurm sets on accounts: an account with
// GrpTRESMins=gres/gpu=N gets a budget of N/60 GPU-hours per period on
// its scope (organisation, team or project, all models), and a user
// association with one a KindUser budget over the keys its user owns in
// that account, each with a soft limit of softPercent of it (0: none). Disabled accounts (deleted in
// Slurm) and Slurm's root carry no budget. Merge puts an admin-set
// budget on the same scope first.
func FromSlurm(accts llmflow.Accounts, period Period, softPercent float64) []Budget {
	var out []Budget
	for _, a := range accts {
		if a.Disabled {
			continue
		}
		// a user association's GrpTRESMins: a budget over the keys its
		// user owns in the account (a partition's association: keys have
		// no partition, so it is listed as not enforced by the sync)
		for _, u := range a.Users {
			if gh, ok := u.Limits.BudgetGPUHours(); ok && u.Partition == "" && a.Kind != llmflow.KindRoot {
				b := Budget{Scope: Scope{Kind: KindUser, Name: UserScopeName(a.Name, u.User)}, Period: period, MaxCost: min(gh, MaxGPUHours), Source: SourceSlurm}
				if softPercent > 0 && softPercent < 100 {
					b.SoftLimit = b.MaxCost * softPercent / 100
				}
				out = append(out, b)
			}
		}
		gh, ok := a.Limits.BudgetGPUHours()
		if !ok {
			continue
		}
		var kind Kind
		switch a.Kind {
		case llmflow.KindOrg:
			kind = KindOrg
		case llmflow.KindTeam:
			kind = KindTeam
		case llmflow.KindProject:
			kind = KindProject
		default:
			continue
		}
		b := Budget{Scope: Scope{Kind: kind, Name: a.Name}, Period: period, MaxCost: min(gh, MaxGPUHours), Source: SourceSlurm}
		if softPercent > 0 && softPercent < 100 {
			b.SoftLimit = b.MaxCost * softPercent / 100
		}
		out = append(out, b)
	}
	return out
}
