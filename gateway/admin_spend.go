package gateway

import (
	"bytes"
	"cmp"
	"net/http"
	"slices"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/reports"
)

// spendFiltered is GET /admin/spend, filtered to what the caller may see:
// everything for proxy readers, their organisations for org admins and
// viewers, their teams for team admins and viewers, their own keys for a
// member (spec: "an org admin sees their organisation, a member their own
// keys").
func (g *Gateway) spendFiltered(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "from", "to", "group_by", "format"); err != nil {
		return err
	}
	if p.everywhere(authz.Read) {
		return g.spendReport(w, r, p)
	}
	from, to, groupBy, format, err := spendQuery(r, "org,team", "json")
	if err != nil {
		return err
	}
	return g.writeSpendFor(w, r, p, from, to, groupBy, format)
}

// usageCSVFiltered is GET /admin/usage.csv, the v0.1 export, filtered the
// same way.
func (g *Gateway) usageCSVFiltered(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "from", "to"); err != nil {
		return err
	}
	if p.everywhere(authz.Read) {
		return g.usageCSV(w, r, p)
	}
	from, to, _, _, err := spendQuery(r, "team,pool", "csv")
	if err != nil {
		return err
	}
	return g.writeSpendFor(w, r, p, from, to, []string{"team", "pool"}, "csv")
}

// spendScopes are the disjoint rollup filters that make up what p may
// see of the spend: one per organisation p reads, per team p reads
// outside those, and per team where p owns keys as a member (their own
// keys: Owner is p).
func (g *Gateway) spendScopes(p Principal) []llmflow.RollupFilter {
	az := p.authz()
	var out []llmflow.RollupFilter
	orgs := map[string]bool{}
	for _, gr := range az.Grants {
		if gr.Level() == authz.LevelOrg && authz.Allows(gr.Role, authz.Read) && !orgs[gr.Org] {
			orgs[gr.Org] = true
			out = append(out, llmflow.RollupFilter{Org: gr.Org})
		}
	}
	teams := map[string]bool{}
	for _, gr := range az.Grants {
		if gr.Level() == authz.LevelTeam && authz.Allows(gr.Role, authz.Read) && !orgs[gr.Org] && !teams[gr.Team] {
			teams[gr.Team] = true
			out = append(out, llmflow.RollupFilter{Team: gr.Team})
		}
	}
	for _, gr := range az.Grants {
		if p.User && gr.Level() == authz.LevelTeam && authz.Allows(gr.Role, authz.OwnKeys) && !orgs[gr.Org] && !teams[gr.Team] {
			teams[gr.Team] = true
			out = append(out, llmflow.RollupFilter{Team: gr.Team, Owner: p.Name})
		}
	}
	return out
}

func (g *Gateway) writeSpendFor(w http.ResponseWriter, r *http.Request, p Principal, from, to time.Time, groupBy []string, format string) error {
	if g.spend == nil {
		return llmflow.Errorf(llmflow.EUNAVAILABLE, "this gateway keeps no accounting store")
	}
	var rows []llmflow.Rollup
	for _, f := range g.spendScopes(p) {
		f.GroupBy, f.Total = groupBy, true
		rs, err := g.spend.Spend(r.Context(), from, to, f)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	rows = mergeRollups(rows, groupBy)
	var buf bytes.Buffer
	if err := reports.WriteSpend(&buf, rows, groupBy, format, from, to); err != nil {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: err.Error(), Param: "format"}
	}
	switch format {
	case "json":
		w.Header().Set("Content-Type", "application/json")
	case "csv":
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.Write(buf.Bytes())
	return nil
}

// mergeRollups sums rows of the same group (from several disjoint
// scopes) and orders them by the grouped dimensions, as a store does.
func mergeRollups(rows []llmflow.Rollup, groupBy []string) []llmflow.Rollup {
	type key struct{ tag, org, team, project, keyID, owner, model, pool string }
	idx := map[key]int{}
	var out []llmflow.Rollup
	for _, r := range rows {
		k := key{r.Tag, r.Org, r.Team, r.Project, r.KeyID, r.Owner, r.Model, r.Pool}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, r)
			continue
		}
		o := &out[i]
		o.Requests += r.Requests
		o.PromptTokens += r.PromptTokens
		o.CompletionTokens += r.CompletionTokens
		o.CachedTokens += r.CachedTokens
		o.GPUHours += r.GPUHours
		o.EstimatedRequests += r.EstimatedRequests
	}
	slices.SortStableFunc(out, func(a, b llmflow.Rollup) int {
		for _, d := range groupBy {
			if c := cmp.Compare(a.Dimension(d), b.Dimension(d)); c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}

// fairshareFiltered is GET /admin/fairshare: every pool's state for proxy
// readers; for others, only the subtrees of the organisations they read,
// and no pool-wide totals (from which another organisation's load could
// be worked out).
func (g *Gateway) fairshareFiltered(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	if p.everywhere(authz.Read) {
		return g.fairshareReport(w, r, p)
	}
	rep := g.FairshareReport()
	for i := range rep.Pools {
		ps := &rep.Pools[i]
		ps.InFlight, ps.Borrowing, ps.Queued = 0, 0, 0
		var keep []AccountShare
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
				if s, ok := g.teamScope(a.Account); ok && p.may(authz.Read, s) {
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
			ps.Accounts = []AccountShare{}
		}
	}
	return writeJSON(w, http.StatusOK, rep)
}

// listSyncsProxyWide is GET /admin/sync: the Slurm import runs concern
// the whole tree, so proxy readers only.
func (g *Gateway) listSyncsProxyWide(w http.ResponseWriter, r *http.Request, p Principal) error {
	if !p.everywhere(authz.Read) {
		return forbidden("the Slurm import history is proxy-wide: it needs proxy_admin or proxy_viewer")
	}
	return g.listSyncs(w, r, p)
}
