package admin

import (
	"net/http"
	"strings"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// fairshare is GET /admin/fairshare: every pool's state for proxy
// readers; for others, the whole subtree of each organisation or team they
// read (its projects and user associations too, as sshare shows them), and
// a member's own user associations in their teams; no pool-wide totals
// (from which another organisation's load could be worked out).
func (h *Handler) fairshare(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	rep := fairshareOf(h.gw.FairshareReport())
	if p.everywhere(authz.Read) {
		return writeJSON(w, http.StatusOK, rep)
	}
	view := h.gw.Accounts()
	for i := range rep.Pools {
		ps := &rep.Pools[i]
		ps.InFlight, ps.Borrowing, ps.Queued = 0, 0, 0
		var keep []adminapi.AccountShare
		subtree := -1 // depth of the readable subtree the rows are in; -1: none
		for _, a := range ps.Accounts {
			if a.Depth == 0 {
				continue // the pool's root: totals of everyone
			}
			if subtree >= 0 && a.Depth > subtree {
				keep = append(keep, a) // rows are in tree order: still inside
				continue
			}
			subtree = -1
			switch {
			case a.User != "":
				// outside a readable subtree: a member sees their own
				if strings.EqualFold(a.User, p.Name) && p.may(authz.OwnKeys, h.teamScopeOf(view, a.Account)) {
					keep = append(keep, a)
				}
			case a.Depth == 1 && p.may(authz.Read, authz.OrgScope(a.Account)):
				subtree = 1
				keep = append(keep, a)
			case a.Depth == 2:
				// a team the caller reads, in an organisation it does not
				if s, ok := h.teamScope(a.Account); ok && p.may(authz.Read, s) {
					subtree = 2
					keep = append(keep, a)
				}
			}
		}
		ps.Accounts = keep
		if ps.Accounts == nil {
			ps.Accounts = []adminapi.AccountShare{}
		}
	}
	return writeJSON(w, http.StatusOK, rep)
}

// teamScopeOf is the scope of the team that account (a team or a project
// under it) belongs to; authz.Proxy for an organisation or an unknown name
// (which no member holds).
func (h *Handler) teamScopeOf(view gateway.AccountView, account string) authz.Scope {
	for range 64 { // a parent cycle cannot loop
		a, ok := view.Account(account)
		switch {
		case !ok || a.Kind == llmflow.KindOrg || a.Kind == llmflow.KindRoot:
			return authz.Proxy
		case a.Kind == llmflow.KindTeam:
			return authz.TeamScope(a.Parent, a.Name)
		}
		account = a.Parent
	}
	return authz.Proxy
}

// fairshareOf is the gateway's fair-share state as the API shows it.
func fairshareOf(r gateway.FairshareReport) adminapi.FairshareReport {
	out := adminapi.FairshareReport{Pools: make([]adminapi.PoolShare, 0, len(r.Pools))}
	for _, p := range r.Pools {
		ps := adminapi.PoolShare{Pool: p.Pool, Scheduler: p.Scheduler, Capacity: p.Capacity, InFlight: p.InFlight,
			Borrowing: p.Borrowing, Queued: p.Queued, Accounts: make([]adminapi.AccountShare, 0, len(p.Accounts))}
		if a := p.Auto; a != nil {
			ps.Auto = &adminapi.CapacityAuto{Min: a.Min, Max: a.Max, Leader: a.Leader, Decision: a.Decision}
		}
		for _, a := range p.Accounts {
			ps.Accounts = append(ps.Accounts, adminapi.AccountShare{Account: a.Account, User: a.User, Partition: a.Partition,
				Depth: a.Depth, RawShares: a.RawShares, UseParent: a.UseParent, NormShares: a.NormShares, RawUsage: a.RawUsage,
				NormUsage: a.NormUsage, EffectvUsage: a.EffectvUsage, LevelFS: adminapi.Value(a.LevelFS),
				FairShare: adminapi.Value(a.FairShare), Rank: a.Rank, Reserved: a.Reserved, InFlight: a.InFlight,
				Within: a.Within, Borrowing: a.Borrowing})
		}
		out.Pools = append(out.Pools, ps)
	}
	return out
}
