package admin

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/reports"
)

// spendQuery reads from, to, group_by and format of a spend request, and
// checks them all before any store is read.
func spendQuery(r *http.Request, defGroup, defFormat string) (from, to time.Time, groupBy []string, format string, err error) {
	q := r.URL.Query()
	bad := func(param, msg string) error {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: msg, Param: param}
	}
	if from, err = reports.ParseSpendTime(q.Get("from")); err != nil {
		return from, to, nil, "", bad("from", "from: "+err.Error())
	}
	if to, err = reports.ParseSpendTime(q.Get("to")); err != nil {
		return from, to, nil, "", bad("to", "to: "+err.Error())
	}
	if !from.Before(to) {
		return from, to, nil, "", bad("to", "to must be after from")
	}
	g := q.Get("group_by")
	if g == "" {
		g = defGroup
	}
	if groupBy, err = reports.ParseGroupBy(g); err != nil {
		return from, to, nil, "", bad("group_by", err.Error())
	}
	if format = q.Get("format"); format == "" {
		format = defFormat
	}
	if !slices.Contains(reports.SpendFormats, format) {
		return from, to, nil, "", bad("format", fmt.Sprintf("unknown format %q (one of %s)", format, strings.Join(reports.SpendFormats, ", ")))
	}
	return from, to, groupBy, format, nil
}

// spendReport is GET /admin/spend: requests, tokens, GPU-hours and
// estimated requests per group, as json, csv or parsable2, of what the
// caller may see (spendScopes: "an org admin sees their organisation, a
// member their own keys").
func (h *Handler) spendReport(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "from", "to", "group_by", "format"); err != nil {
		return err
	}
	from, to, groupBy, format, err := spendQuery(r, "org,team", "json")
	if err != nil {
		return err
	}
	return h.writeSpend(w, r, p, from, to, groupBy, format)
}

// usageCSV is GET /admin/usage.csv: the v0.1 export, grouped by team and
// pool, filtered the same way.
func (h *Handler) usageCSV(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "from", "to"); err != nil {
		return err
	}
	from, to, _, _, err := spendQuery(r, "team,pool", "csv")
	if err != nil {
		return err
	}
	return h.writeSpend(w, r, p, from, to, []string{"team", "pool"}, "csv")
}

// spendScopes are the disjoint rollup filters that make up what p may
// see of the spend: everything (one filter selecting all) for a proxy
// reader; else one per organisation p reads, per team p reads outside
// those, and per team where p owns keys as a member (their own keys:
// Owner is p).
func spendScopes(p Principal) []llmflow.RollupFilter {
	if p.everywhere(authz.Read) {
		return []llmflow.RollupFilter{{}}
	}
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

// writeSpend answers the spend of p's scopes (spendScopes) in format,
// checked already (spendQuery).
func (h *Handler) writeSpend(w http.ResponseWriter, r *http.Request, p Principal, from, to time.Time, groupBy []string, format string) error {
	if h.spend == nil {
		return llmflow.Errorf(llmflow.EUNAVAILABLE, "this gateway keeps no accounting store")
	}
	scopes := spendScopes(p)
	var rows []llmflow.Rollup
	for _, f := range scopes {
		f.GroupBy, f.Total = groupBy, true
		rs, err := h.spend.Spend(r.Context(), from, to, f)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	if !p.everywhere(authz.Read) { // several disjoint scopes: one row per group
		rows = mergeRollups(rows, groupBy)
	}
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
