package sacctmgr

import "github.com/go-llmflow/llmflow"

// Tree is Slurm's association tree of one cluster, as sacctmgr shows it
// or slurmdbd stores it. Both sources (package slurmsync) produce a Tree,
// and the same Slurm state gives equal Trees.
//
// Names are as Slurm stores them (lower-cased). Deleted associations are
// present only when the source listed them (withdeleted, or the deleted
// column of the database), flagged Deleted.
type Tree struct {
	Cluster  string
	Accounts []Account // parents before children; root first; siblings by name
	Users    []User    // user associations, in tree order
	// Coords are the account coordinators, when the source read them
	// (see Coord; slurmsync reduces them to each user's top-most
	// accounts of the tree).
	Coords []Coord `json:",omitempty"`
	// CoordsKnown says whether the source read the coordinators: when it
	// is false, an empty Coords means "not read", not "none" (a sacctmgr
	// listing file given alone), and no role may be taken away for it.
	CoordsKnown bool `json:",omitempty"`
	// MinutesUnknown and GPUsUnknown say that the source did not list
	// GrpTRESMins / GrpTRES (a listing without the column): the accounts'
	// Limits then say nothing about that limit. It is unknown, not
	// "none", and must not erase a limit known from elsewhere.
	MinutesUnknown bool `json:",omitempty"`
	GPUsUnknown    bool `json:",omitempty"`
	// OtherLimits are the GPU limits the accounts' Limits do not carry,
	// read with them: an account's or user association's MaxTRES (per
	// job), a user association's GrpTRESMins and GrpTRES. In tree order
	// of the listing; deleted associations' too (see Deleted).
	OtherLimits []OtherLimit `json:",omitempty"`
}

// OtherLimit is one gres/gpu limit of an association that is not an
// account's group limit.
type OtherLimit struct {
	Account, User, Partition string // User "" for an account
	Limit                    string // "MaxTRES", "GrpTRESMins" or "GrpTRES"
	GPUs                     int64  // its gres/gpu count (GPU-minutes for GrpTRESMins)
}

// Account is an account association (user = ”): one node of the tree.
type Account struct {
	Name         string
	Parent       string // "" for root
	Description  string
	Organization string
	Shares       uint32 // raw Fairshare; meaningless when UseParent
	UseParent    bool   // Fairshare=parent (2147483647 in the database)
	Deleted      bool
	// Limits are the account's own GrpTRESMins and GrpTRES gres/gpu
	// counts, read when Options.Limits asks for them (and always from
	// slurmdbd); Slurm stores group limits only where they are set.
	Limits llmflow.GPULimits `json:",omitzero"`
}

// User is a user association: a user in an account, on a partition or
// on all partitions ("").
type User struct {
	Name      string
	Account   string
	Partition string
	Shares    uint32
	UseParent bool
	Default   bool // the user's default account (is_def, DefaultAccount)
	Deleted   bool
}

// ParentShares is the value slurmdbd stores for Fairshare=parent
// (SLURMDB_FS_USE_PARENT).
const ParentShares = 0x7FFFFFFF
