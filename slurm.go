package llmflow

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// The Slurm association of a request: who the GPU-hours of a rollup belong
// to in Slurm's accounting. `llmflow report` and the write-back to slurmdbd
// (package writeback) both map usage with the functions here, so they
// always agree.

// DefaultServiceUser is the Slurm user that the requests of keys without an
// owner count under.
const DefaultServiceUser = "llmflow"

// DefaultSlurmCluster is the Slurm cluster llmflow's usage is written to
// (and reported as).
const DefaultSlurmCluster = "llm"

// ValidClusterName reports whether name is a Slurm cluster name llmflow
// accepts: 1 to 64 lower-case letters, digits, '-' and '_', not starting
// with '-' or '_' (Slurm lower-cases cluster names). Such a name is safe
// inside slurmdbd's per-cluster table names (`<cluster>_assoc_table`) and
// as a sacctmgr argument.
func ValidClusterName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Association returns the Slurm association (account, user) a rollup's
// requests count under, in Slurm's lower-case names:
//
//   - account: the key's project if it has one, else its team;
//   - user: the key's owner (a Slurm user imported by the sync), or
//     serviceUser (DefaultServiceUser when "") for keys without an owner.
//
// Why one service user: sreport only has usage for user associations (an
// account's row is the sum of its subtree), so every GPU-hour must sit on
// some (account, user) pair or the account's total would be short. One
// fixed, documented user per account keeps the account totals complete,
// makes ownerless usage visible as such ("llmflow" rows) instead of
// crediting it to a real person, and adds at most one association per
// account.
//
// account is "" when the rollup has neither project nor team (a request
// without a key): such usage has no place in Slurm's tree and is not
// written.
func Association(r Rollup, serviceUser string) (account, user string) {
	account = r.Project
	if account == "" {
		account = r.Team
	}
	user = r.Owner
	if user == "" {
		user = serviceUser
		if user == "" {
			user = DefaultServiceUser
		}
	}
	return strings.ToLower(strings.TrimSpace(account)), strings.ToLower(strings.TrimSpace(user))
}

// GPUSeconds converts GPU-hours into the TRES-seconds of slurmdbd's
// alloc_secs, rounded to the nearest second (half away from zero).
func GPUSeconds(gpuHours float64) int64 {
	return int64(math.Round(gpuHours * 3600))
}

// AssocHour is the GPU usage of one association in one hour: one row of
// slurmdbd's <cluster>_assoc_usage_hour_table.
type AssocHour struct {
	Account, User string
	Hour          time.Time // start of the hour, UTC
	AllocSecs     int64     // GPU-seconds
}

// Unwritten is usage of one association in one hour that the write-back
// could not write into slurmdbd (its account or user is not a live Slurm
// name, and the cluster never had the association): the report subtracts
// it, so that its rows equal what Slurm holds, and says it apart.
type Unwritten struct {
	AssocHour
	Reason string
}

// AssocLFT is where slurmdbd placed a user association of a write-back
// cluster (its nested-set lft): sreport lists associations in that order,
// and sacctmgr puts a sibling added later first, so it differs from
// llmflow's tree order.
type AssocLFT struct {
	Account, User string
	LFT           int64
}

// Unattributed is usage that has no association (no project and no team).
type Unattributed struct {
	Rollups  int
	GPUHours float64
}

// AssocHours turns rollups into hourly association rows: rollups are
// mapped with Association, summed per (association, UTC hour) in GPU-hours
// and converted once with GPUSeconds; hours that round to 0 seconds are
// left out (slurmdbd writes no zero rows). The result is sorted by hour,
// account, user. Rollups with a zero Hour (range totals) are ignored.
//
// A report that must match sreport on the written cluster computes its
// numbers from these rows: any range's usage is then the sum of whole
// AssocHour values, exactly what slurmdbd's hour, day and month tables
// hold.
func AssocHours(rs []Rollup, serviceUser string) ([]AssocHour, Unattributed) {
	type key struct {
		account, user string
		hour          int64
	}
	type part struct {
		k key
		h float64
	}
	var parts []part
	var un Unattributed
	for _, r := range rs {
		if r.Hour.IsZero() || r.GPUHours == 0 {
			continue
		}
		a, u := Association(r, serviceUser)
		if a == "" {
			un.Rollups++
			un.GPUHours += r.GPUHours
			continue
		}
		parts = append(parts, part{key{a, u, r.Hour.Truncate(time.Hour).Unix()}, r.GPUHours})
	}
	// Sum in a fixed order so the float sum never depends on the order the
	// store returned the rollups in.
	slices.SortFunc(parts, func(x, y part) int {
		return cmp.Or(cmp.Compare(x.k.hour, y.k.hour), cmp.Compare(x.k.account, y.k.account),
			cmp.Compare(x.k.user, y.k.user), cmp.Compare(x.h, y.h))
	})
	var out []AssocHour
	for i := 0; i < len(parts); {
		j, sum := i, 0.0
		for ; j < len(parts) && parts[j].k == parts[i].k; j++ {
			sum += parts[j].h
		}
		if s := GPUSeconds(sum); s > 0 {
			k := parts[i].k
			out = append(out, AssocHour{Account: k.account, User: k.user, Hour: time.Unix(k.hour, 0).UTC(), AllocSecs: s})
		}
		i = j
	}
	return out, un
}
