package gateway

import (
	"math"

	"github.com/go-llmflow/llmflow/autocap"
	"github.com/go-llmflow/llmflow/fairshare"
)

// FairshareReport is the live fair-share state of every pool, in the
// terms of sshare -l plus the reservation columns. Package admin serves
// it (GET /admin/fairshare, as adminapi.FairshareReport), filtered to what
// the caller may read.
type FairshareReport struct {
	Pools []PoolShare
}

// PoolShare is one pool's state.
type PoolShare struct {
	Pool      string
	Scheduler string // priority, gateway or fcfs
	Capacity  int    // C
	InFlight  int
	Borrowing int            // in flight beyond their organisation's reservation
	Queued    int            // waiting in the gateway-side queue
	Accounts  []AccountShare // tree order: the pool's root, then depth first
	Auto      *CapacityAuto  // capacity = "auto"; nil for a fixed capacity
}

// CapacityAuto is the state of a pool's capacity loop.
type CapacityAuto struct {
	Min, Max int
	Leader   bool   // this replica decides C
	Decision string // the last step's
}

// AccountShare is one account or user association of a pool's tree
// (sshare's row).
type AccountShare struct {
	Account      string // "root" for the pool itself; a user association's account
	User         string // the user of a user association ("" for an account)
	Partition    string // a user association's partition
	Depth        int    // 0 root, 1 organisation, 2 team, 3+ project; a user association its account's + 1
	RawShares    float64
	UseParent    bool // Fairshare=parent: no level of its own
	NormShares   float64
	RawUsage     float64 // decayed GPU-hours
	NormUsage    float64
	EffectvUsage float64
	LevelFS      fairshare.Value // +Inf ("inf") when never used; NaN (null) when it has no level
	FairShare    fairshare.Value // leaves only (null otherwise)
	Rank         int             // borrower rank 0..9 used in priorities (leaves)
	Reserved     int
	InFlight     int
	Within       int // in flight within its own reservation
	Borrowing    int // in flight beyond its organisation's reservation
}

// FairshareReport returns the live fair-share state of every pool.
func (g *Gateway) FairshareReport() FairshareReport {
	now := g.now()
	rep := FairshareReport{Pools: make([]PoolShare, 0, len(g.poolOrder))}
	for _, pl := range g.poolOrder {
		s := pl.fs.Snapshot(now)
		ps := PoolShare{
			Pool: pl.name, Scheduler: pl.engine.Scheduling.String(), Capacity: s.Capacity,
			InFlight: int(s.InFlight), Borrowing: int(s.Borrowing),
			Accounts: make([]AccountShare, 0, len(s.Rows)+1),
		}
		if pl.queue != nil {
			_, ps.Queued = pl.queue.lengths()
		}
		if a := pl.auto; a != nil {
			ps.Auto = &CapacityAuto{Min: a.cfg.Min, Max: a.cfg.Max, Leader: a.leads.Load(), Decision: autocap.Decision(a.last.Load()).String()}
		}
		ps.Accounts = append(ps.Accounts, AccountShare{
			Account: "root", RawUsage: s.RawUsage, NormUsage: 1, EffectvUsage: 1,
			LevelFS: fairshare.Value(math.NaN()), FairShare: fairshare.Value(math.NaN()),
			Reserved: int(s.Reserved), InFlight: int(s.InFlight), Within: int(s.InFlight - s.Borrowing), Borrowing: int(s.Borrowing),
		})
		for _, r := range s.Rows {
			acct, user := r.Name, ""
			if r.User {
				acct, user = "root", r.Name
				if len(r.Path) > 1 {
					acct = r.Path[len(r.Path)-2]
				}
			}
			ps.Accounts = append(ps.Accounts, AccountShare{
				Account: acct, User: user, Partition: r.Partition, Depth: r.Depth, RawShares: r.RawShares, UseParent: r.UseParent,
				NormShares: float64(r.NormShares), RawUsage: r.RawUsage, NormUsage: float64(r.NormUsage),
				EffectvUsage: float64(r.EffectvUsage), LevelFS: r.LevelFS, FairShare: r.FairShare,
				Rank: r.Rank, Reserved: int(r.Reserved), InFlight: int(r.InFlight), Within: int(r.WithinShare),
				Borrowing: int(r.Borrowing),
			})
		}
		rep.Pools = append(rep.Pools, ps)
	}
	return rep
}
