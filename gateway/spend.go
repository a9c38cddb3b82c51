package gateway

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/reports"
)

// SpendReader is what the gateway needs of a store for the spend routes.
// The stores implement it.
type SpendReader interface {
	// Spend returns the accounting rollups of the hours starting in
	// [from, to) that f selects, grouped by f.GroupBy: per tag, a request
	// counting once under each of its tags, when f.NeedsTags. It fails with
	// EINVALID for a dimension it does not know.
	Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
}

// spendQuery reads from, to, group_by and format of a spend request.
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
	return from, to, groupBy, format, nil
}

// spendReport is GET /admin/spend: requests, tokens, GPU-hours and
// estimated requests per group, as json, csv or parsable2.
func (g *Gateway) spendReport(w http.ResponseWriter, r *http.Request, p Principal) error {
	from, to, groupBy, format, err := spendQuery(r, "org,team", "json")
	if err != nil {
		return err
	}
	return g.writeSpend(w, r, from, to, groupBy, format)
}

// usageCSV is GET /admin/usage.csv: the v0.1 export, grouped by team and
// pool.
func (g *Gateway) usageCSV(w http.ResponseWriter, r *http.Request, p Principal) error {
	from, to, _, _, err := spendQuery(r, "team,pool", "csv")
	if err != nil {
		return err
	}
	return g.writeSpend(w, r, from, to, []string{"team", "pool"}, "csv")
}

func (g *Gateway) writeSpend(w http.ResponseWriter, r *http.Request, from, to time.Time, groupBy []string, format string) error {
	if g.spend == nil {
		return llmflow.Errorf(llmflow.EUNAVAILABLE, "this gateway keeps no accounting store")
	}
	rows, err := g.spend.Spend(r.Context(), from, to, llmflow.RollupFilter{GroupBy: groupBy, Total: true})
	if err != nil {
		return err
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
