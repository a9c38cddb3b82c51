package fairshare

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Value is a float printed as sshare prints doubles: %f (6 decimals),
// "inf" for +Inf and empty for NaN (no value). In JSON it is a number,
// the string "inf", or null.
type Value float64

// String formats v like sshare -P.
func (v Value) String() string {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return ""
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'f', 6, 64)
}

// MarshalJSON encodes v as a number, "inf" / "-inf", or null for NaN.
func (v Value) MarshalJSON() ([]byte, error) {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return []byte("null"), nil
	case math.IsInf(f, 0):
		return []byte(strconv.Quote(v.String())), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Value) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "null":
		*v = Value(math.NaN())
	case `"inf"`:
		*v = Value(math.Inf(1))
	case `"-inf"`:
		*v = Value(math.Inf(-1))
	default:
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return fmt.Errorf("fairshare value %s: %w", b, err)
		}
		*v = Value(f)
	}
	return nil
}

// Snapshot is the fair-share state of a pool at one time, for
// /admin/fairshare, `llmflow share` (sshare -l layout) and metrics.
type Snapshot struct {
	Time      time.Time `json:"time"`      // the time usage was decayed to
	Capacity  int       `json:"capacity"`  // C
	Reserved  int64     `json:"reserved"`  // Σ of the organisations' reservations (≤ C)
	InFlight  int64     `json:"inflight"`  // requests in flight in the pool
	Borrowing int64     `json:"borrowing"` // of which admitted over their organisation's reservation (priority ≥ 10)
	RawUsage  float64   `json:"raw_usage"` // pool usage, decayed GPU-hours (sshare's root RawUsage)
	Leaves    int       `json:"leaves"`    // N: rows ranked by Fair Tree (FairShare = Rank/N): user associations, or leaf accounts in a tree without users
	Rows      []Row     `json:"rows"`      // accounts and user associations in tree order (pre-order, as given to SetTree)
}

// Row is one account or user association of a Snapshot. With Account the
// account's name (a user association's: its parent's) and User the user
// ("" for an account), the sshare -l -P columns are
// Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS,
// plus Reserved|InFlight|Borrowing.
type Row struct {
	Name      string   `json:"name"`                // account name, or the user of a user association
	Path      []string `json:"path"`                // organisation … account (a user association: … account, UserElem)
	Depth     int      `json:"depth"`               // 1 organisation, 2 team, 3+ project; a user association its account's + 1 (sshare indents Depth spaces)
	Kind      string   `json:"kind"`                // "org", "team", "project" or "user"
	User      bool     `json:"user,omitempty"`      // a user association (sshare's User column is Name)
	Partition string   `json:"partition,omitempty"` // a user association's partition
	Leaf      bool     `json:"leaf"`                // ranked by Fair Tree: has a FairShare (sshare: a user row)
	UseParent bool     `json:"use_parent"`          // Fairshare=parent (sshare RawShares "parent")

	RawShares  float64 `json:"raw_shares"`  // shares as configured or from Slurm
	NormShares Value   `json:"norm_shares"` // Fair Tree S: RawShares / Σ RawShares of the level's siblings
	Fraction   float64 `json:"fraction"`    // share of the parent's reservation: RawShares, or RawShares/Σ when siblings sum > 1

	Reserved    int64 `json:"reserved"`     // reservation (Hamilton over the parent's)
	InFlight    int64 `json:"inflight"`     // requests in flight at or under the account
	WithinShare int64 `json:"within_share"` // of which counted within the account's reservation (may exceed Reserved, see the package doc)
	Borrowing   int64 `json:"borrowing"`    // InFlight − WithinShare: in flight beyond the account's own reservation

	RawUsage     float64 `json:"raw_usage"`     // decayed GPU-hours at or under the account
	NormUsage    Value   `json:"norm_usage"`    // RawUsage / pool RawUsage
	EffectvUsage Value   `json:"effectv_usage"` // Fair Tree U: RawUsage / RawUsage of the first ancestor with a level (the pool for organisations)
	LevelFS      Value   `json:"level_fs"`      // LF = S/U; +Inf (unused), 0 (no shares), NaN for UseParent
	FairShare    Value   `json:"fair_share"`    // leaves: Rank/N as sshare; NaN for inner accounts
	Rank         int     `json:"rank"`          // priority rank 0..9 used over the organisation's reservation (inner: best under it)
	BandRank     int     `json:"band_rank"`     // rank 0..3 among siblings used when borrowing from a sibling
}

// Snapshot returns the state with usage decayed to now (ranks are those of
// the last Refresh, SetTree or RestoreUsage; call Refresh first to recompute
// them at now).
func (p *Pool) Snapshot(now time.Time) Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.st.Load()
	inflight, borrowing := p.ctr.PoolCounts()
	s := Snapshot{Time: now, Capacity: p.Capacity(), InFlight: inflight,
		Borrowing: borrowing, RawUsage: p.ctr.Usage(PoolSlot, now), Leaves: st.users}
	for _, n := range st.tree.top {
		s.Reserved += n.res
	}
	for _, n := range st.tree.nodes {
		fr := st.fair[st.rowOf[n.id]]
		u := p.ctr.Usage(n.slot, now)
		nIn, nWithin := p.ctr.Counts(n.slot)
		kind := "project"
		switch {
		case n.user:
			kind = "user"
		case n.depth == 1:
			kind = "org"
		case n.depth == 2:
			kind = "team"
		}
		r := Row{Name: n.name, Path: append([]string(nil), n.path...), Depth: n.depth, Kind: kind,
			User: n.user, Partition: n.partition,
			Leaf: fr.Node.User, UseParent: n.useParent, RawShares: n.rawShares,
			NormShares: Value(fr.NormShares), Fraction: n.fraction, Reserved: n.res,
			InFlight: nIn, WithinShare: nWithin,
			RawUsage: u, NormUsage: Value(0), EffectvUsage: Value(0),
			LevelFS: Value(fr.LevelFS), FairShare: Value(fr.FairShare),
			Rank: int(st.leafRank[n.id]), BandRank: int(st.bandRank[n.id])}
		if n.useParent {
			r.Reserved, r.WithinShare = 0, 0
		}
		r.Borrowing = max(r.InFlight-r.WithinShare, 0)
		if s.RawUsage > 0 {
			r.NormUsage = Value(u / s.RawUsage)
		}
		anc := s.RawUsage
		for a := n.parent; a != nil; a = a.parent {
			if !a.useParent {
				anc = p.ctr.Usage(a.slot, now)
				break
			}
		}
		if anc > 0 {
			r.EffectvUsage = Value(u / anc)
		}
		s.Rows = append(s.Rows, r)
	}
	return s
}
