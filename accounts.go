package llmflow

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is an account's level in the organisation tree.
type Kind uint8

const (
	KindOrg     Kind = iota + 1 // an institution: an account directly under Slurm's root
	KindTeam                    // a lab: a child of an organisation
	KindProject                 // anything deeper: a project of a team (or of a project)
	// KindRoot is Slurm's root account itself, named "root", in an
	// imported tree only when root has user associations of its own
	// (root/root with a share): Fair Tree counts them as siblings of the
	// organisations. It carries only Users: no keys, members or reports.
	KindRoot
)

func (k Kind) String() string {
	switch k {
	case KindOrg:
		return "org"
	case KindTeam:
		return "team"
	case KindProject:
		return "project"
	case KindRoot:
		return "root"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Account is one node of the organisation tree the gateway serves, from
// the configuration or imported from Slurm. Names are unique across the
// whole tree (Slurm account names are).
type Account struct {
	Name   string
	Kind   Kind
	Parent string // "" for an organisation

	// Shares is the account's raw share among its siblings: a fraction
	// from the configuration or Slurm's integer Fairshare. Siblings are
	// normalised against each other, so only ratios matter.
	Shares float64
	// UseParent is Slurm's Fairshare=parent: the account has no level of
	// its own; its children compete as if they were its parent's children.
	UseParent bool

	// Disabled accounts (removed in Slurm, or disabled by an admin) are
	// kept with their records; their keys stop working at once.
	Disabled bool

	// Members are the Slurm users with an association in this account.
	Members []string

	// Users are the live Slurm user associations of this account with
	// their shares, in Slurm's order (by user, then partition): the
	// leaves of Fair Tree, normalised as siblings of the sub-accounts.
	// Empty for accounts from the configuration.
	Users []UserAssoc

	// Source says where the account comes from: "config" or "slurm".
	Source string

	// ShareRest marks a team of the configuration declared without a
	// share: its Shares is an equal part of what its siblings' shares
	// leave of 1 (SplitRests), siblings created through the admin API
	// included, so that a share given there is a fraction like the
	// configuration's, never a dilution of the configured teams.
	ShareRest bool

	// Limits are the account's Slurm group limits on GPUs (GrpTRESMins,
	// GrpTRES): a budget and an in-flight cap for the budgets side (see
	// GPULimits). Zero for accounts of the configuration.
	Limits GPULimits
}

// UserAssoc is one Slurm user association of an account: a leaf of the
// fair-share tree.
type UserAssoc struct {
	User      string  `json:"user"`
	Partition string  `json:"partition,omitempty"` // "" for all partitions
	Shares    float64 `json:"shares"`              // raw Fairshare; 0 when UseParent
	UseParent bool    `json:"use_parent,omitempty"`
	// Limits are the association's own GrpTRESMins and GrpTRES gres/gpu
	// counts: a budget over the keys its user owns in the account, and a
	// cap on their requests in flight.
	Limits GPULimits `json:"limits,omitzero"`
}

// Accounts is a whole organisation tree, parents before children.
type Accounts []Account

// SlurmNames returns a copy of the tree with account names and parents
// lower-cased, as Slurm stores them (slurmdbd lower-cases account names):
// the tree that usage mapped to Slurm associations is reported against.
func (as Accounts) SlurmNames() Accounts {
	out := make(Accounts, len(as))
	for i, a := range as {
		a.Name, a.Parent = strings.ToLower(a.Name), strings.ToLower(a.Parent)
		a.Members = slices.Clone(a.Members)
		a.Users = slices.Clone(a.Users)
		out[i] = a
	}
	return out
}

// SplitRests sets the Shares of the accounts marked ShareRest: among each
// parent's children, those split equally what the others' shares leave of
// 1 (nothing when they take it all). It is the configuration's rule for
// teams without a share, applied with the siblings added through the
// admin API.
func (as Accounts) SplitRests() {
	given := map[string]float64{}
	rests := map[string]int{}
	for _, a := range as {
		if a.ShareRest {
			rests[a.Parent]++
		} else if !a.UseParent {
			given[a.Parent] += a.Shares
		}
	}
	for i := range as {
		if a := &as[i]; a.ShareRest {
			a.Shares = max(0, 1-given[a.Parent]) / float64(rests[a.Parent])
		}
	}
}
