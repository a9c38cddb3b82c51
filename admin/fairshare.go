package admin

import (
	"net/http"

	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// fairshare is GET /admin/fairshare: every pool's state for proxy
// readers; for others, only the subtrees of the organisations they read,
// and no pool-wide totals (from which another organisation's load could
// be worked out).
func (h *Handler) fairshare(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	rep := h.gw.FairshareReport()
	if p.everywhere(authz.Read) {
		return writeJSON(w, http.StatusOK, rep)
	}
	for i := range rep.Pools {
		ps := &rep.Pools[i]
		ps.InFlight, ps.Borrowing, ps.Queued = 0, 0, 0
		var keep []gateway.AccountShare
		visible := false // inside a visible organisation's subtree
		for _, a := range ps.Accounts {
			if a.Depth == 0 {
				continue // the pool's root: totals of everyone
			}
			if a.Depth == 1 {
				visible = p.may(authz.Read, authz.OrgScope(a.Account))
			}
			if !visible && a.Depth == 2 {
				// a team the caller reads, in an organisation it does not
				if s, ok := h.teamScope(a.Account); ok && p.may(authz.Read, s) {
					keep = append(keep, a)
					continue
				}
			}
			if visible {
				keep = append(keep, a)
			}
		}
		ps.Accounts = keep
		if ps.Accounts == nil {
			ps.Accounts = []gateway.AccountShare{}
		}
	}
	return writeJSON(w, http.StatusOK, rep)
}
