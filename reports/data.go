package reports

import (
	"strings"
	"time"
)

// Data is everything a report reads. It does not depend on where it comes
// from: slurmdbd's tables (see the golden tests) or llmflow's rollups.
//
// The zero value is an empty cluster; Run needs at least Now.
type Data struct {
	// Cluster is the cluster name printed in the Cluster column.
	Cluster string

	// Accounts are the account associations of the tree, deleted ones
	// included (sreport counts them). Names are unique.
	Accounts []Account

	// Assocs are the user associations, deleted ones included. Rows of
	// one user in one account (partitions) are printed in this order;
	// give them in slurmdbd's lft order to match sreport exactly.
	Assocs []Assoc

	// Usage holds the per-association rollup rows, by granularity.
	// Usage[Hour] are hour rows, Usage[Day] day rows, Usage[Month] month
	// rows. Only user associations have rows; account usage is summed.
	Usage [3][]UsageRow

	// ClusterUsage holds the cluster totals rows, by granularity.
	ClusterUsage [3][]ClusterRow

	// TRES is the list of TRES names in slurmdbd's id order (cpu, mem,
	// energy, node, billing, fs/disk, vmem, pages, then gres/gpu, …):
	// "-T all" prints every TRES in this order (a -T list prints in its own order). Nil means that
	// default list; names found in rows and missing here are appended.
	TRES []string

	// Now is the current time: End is clamped to it and it picks the
	// rollup table. Required.
	Now time.Time

	// Location is the time zone sreport runs in (slurmdbd buckets by the
	// same zone). Nil means UTC.
	Location *time.Location

	// ProperName returns the "Proper Name" of a login: sreport prints the
	// GECOS field of getpwnam(login) up to the first comma (see
	// GECOSName), or nothing when the login is unknown. Nil prints
	// nothing.
	ProperName func(login string) string
}

// Account is an account association (a node of the tree).
type Account struct {
	Name    string
	Parent  string // "" for the root account
	Deleted bool   // informational: sreport reports deleted accounts too
}

// Assoc is a user association: a user in an account, optionally limited
// to a partition.
type Assoc struct {
	Account   string
	User      string
	Partition string
	Deleted   bool // informational: sreport reports deleted associations too
}

// Granularity indexes Data.Usage and Data.ClusterUsage.
type Granularity int

const (
	Hour Granularity = iota
	Day
	Month
)

func (g Granularity) String() string {
	switch g {
	case Hour:
		return "hour"
	case Day:
		return "day"
	case Month:
		return "month"
	}
	return "granularity(" + itoa(int64(g)) + ")"
}

// UsageRow is one row of <cluster>_assoc_usage_{hour,day,month}_table.
type UsageRow struct {
	Assoc int       // index in Data.Assocs
	TRES  string    // TRES name: "cpu", "billing", "gres/gpu", …
	Start time.Time // start of the hour, day or month (local time)
	Secs  uint64    // alloc_secs: TRES count × seconds
}

// ClusterRow is one row of <cluster>_usage_{hour,day,month}_table: the
// cluster's capacity for one TRES over one period.
type ClusterRow struct {
	TRES        string
	Start       time.Time
	Count       uint64 // TRES count (day/month rows: the maximum)
	Alloc       uint64 // alloc_secs
	Down        uint64 // down_secs
	PlannedDown uint64 // pdown_secs
	Idle        uint64 // idle_secs
	Planned     uint64 // plan_secs (reserved)
	Over        uint64 // over_secs (overcommitted; not part of Reported)
}

// DefaultTRES is slurmdbd's built-in TRES list in id order (ids 1–8).
var DefaultTRES = []string{"cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages"}

// GECOSName returns what sreport prints as Proper Name for a passwd GECOS
// field: C's strtok(gecos, ","), i.e. the first comma-separated token after
// leading commas, or the whole field when it has no token.
func GECOSName(gecos string) string {
	s := strings.TrimLeft(gecos, ",")
	if s == "" {
		return gecos
	}
	if i := strings.IndexByte(s, ','); i >= 0 {
		return s[:i]
	}
	return s
}
