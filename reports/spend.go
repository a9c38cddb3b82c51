package reports

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// SpendFormats are the formats WriteSpend writes.
var SpendFormats = []string{"json", "csv", "parsable2"}

// ParseGroupBy checks a comma-separated group-by list of rollup
// dimensions (llmflow.RollupDimensions), in any case; empty means
// "org,team".
func ParseGroupBy(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return []string{llmflow.DimOrg, llmflow.DimTeam}, nil
	}
	var out []string
	for _, d := range strings.Split(s, ",") {
		d = strings.ToLower(strings.TrimSpace(d))
		if !llmflow.IsRollupDimension(d) {
			return nil, fmt.Errorf("unknown group-by %q (one of %s)", d, strings.Join(llmflow.RollupDimensions(), ", "))
		}
		if slices.Contains(out, d) {
			return nil, fmt.Errorf("group-by %q given twice", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// ParseSpendTime reads a spend report bound: a date (2026-10-01, midnight
// UTC) or an RFC 3339 time. Rollups are hourly, so bounds are truncated to
// the hour.
func ParseSpendTime(s string) (time.Time, error) {
	for _, layout := range []string{time.DateOnly, "2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC().Truncate(time.Hour), nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid time %q: use 2026-10-01 or 2026-10-01T00:00:00Z", s)
}

var spendColumns = []string{"requests", "prompt_tokens", "completion_tokens", "cached_tokens", "gpu_hours", "estimated_requests"}

func spendValues(r llmflow.Rollup) []string {
	return []string{
		strconv.FormatInt(r.Requests, 10), strconv.FormatInt(r.PromptTokens, 10),
		strconv.FormatInt(r.CompletionTokens, 10), strconv.FormatInt(r.CachedTokens, 10),
		strconv.FormatFloat(r.GPUHours, 'f', 6, 64), strconv.FormatInt(r.EstimatedRequests, 10),
	}
}

// parsable2Name is a column's name in the pipe-delimited form, in
// sreport's style: Org, Team, GPUHours …
func parsable2Name(col string) string {
	switch col {
	case "gpu_hours":
		return "GPUHours"
	case "key":
		return "Key"
	}
	var b strings.Builder
	for _, part := range strings.Split(col, "_") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// CSVText neutralises a text cell of a CSV export against formula
// injection (OWASP's rule): a cell starting with '=', '+', '-', '@', a tab
// or a carriage return gets a single quote in front, so that a spreadsheet
// shows it as text instead of evaluating it; encoding/csv then quotes the
// cell where CSV requires it (a quote, comma, CR or LF inside). Other cells
// are returned unchanged. Only text cells (names) go through it: numbers
// are written by the program, never start with one of these characters
// unless negative, and must stay numbers.
func CSVText(s string) string {
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 {
		return "'" + s
	}
	return s
}

// WriteSpend writes rollups already grouped by groupBy (one row per group)
// as json, csv or parsable2 (pipe-delimited like sreport --parsable2).
// In csv the names are neutralised by CSVText; json and parsable2 are
// not (they are read by programs, not spreadsheets).
func WriteSpend(w io.Writer, rows []llmflow.Rollup, groupBy []string, format string, from, to time.Time) error {
	switch format {
	case "json":
		type row map[string]any
		out := struct {
			From    time.Time `json:"from"`
			To      time.Time `json:"to"`
			GroupBy []string  `json:"group_by"`
			Data    []row     `json:"data"`
		}{From: from, To: to, GroupBy: groupBy, Data: make([]row, 0, len(rows))}
		for _, r := range rows {
			x := row{}
			for _, d := range groupBy {
				x[d] = r.Dimension(d)
			}
			x["requests"], x["prompt_tokens"], x["completion_tokens"] = r.Requests, r.PromptTokens, r.CompletionTokens
			x["cached_tokens"], x["gpu_hours"], x["estimated_requests"] = r.CachedTokens, r.GPUHours, r.EstimatedRequests
			out.Data = append(out.Data, x)
		}
		enc := json.NewEncoder(w)
		return enc.Encode(out)
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(append(slices.Clone(groupBy), spendColumns...))
		for _, r := range rows {
			rec := make([]string, 0, len(groupBy)+len(spendColumns))
			for _, d := range groupBy {
				rec = append(rec, CSVText(r.Dimension(d)))
			}
			cw.Write(append(rec, spendValues(r)...))
		}
		cw.Flush()
		return cw.Error()
	case "parsable2":
		var b strings.Builder
		var head []string
		for _, c := range append(slices.Clone(groupBy), spendColumns...) {
			head = append(head, parsable2Name(c))
		}
		b.WriteString(strings.Join(head, "|") + "\n")
		for _, r := range rows {
			var cells []string
			for _, d := range groupBy {
				cells = append(cells, strings.ReplaceAll(r.Dimension(d), "|", "_"))
			}
			b.WriteString(strings.Join(append(cells, spendValues(r)...), "|") + "\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	return fmt.Errorf("unknown format %q (one of %s)", format, strings.Join(SpendFormats, ", "))
}
