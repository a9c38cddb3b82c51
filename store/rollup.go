package store

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// RollupFilter selects and groups rollups (Rollups, RollupsByTag).
//
// The string fields select rollups whose field equals the value exactly;
// an empty field matches everything. Tag applies to RollupsByTag only (an
// untagged request is under the tag ""; use RollupsByTag with GroupBy
// "tag" to see it).
type RollupFilter struct {
	Org     string
	Team    string
	Project string
	KeyID   string
	Owner   string
	Model   string
	Pool    string
	Tag     string

	// GroupBy lists the dimensions kept in the result, among "org",
	// "team", "project", "key", "owner", "model", "pool" and, for
	// RollupsByTag, "tag"; the rollups of the other dimensions are summed
	// and their fields are "". Nil (or empty) keeps every dimension:
	// RollupsByTag then keeps "tag" too.
	GroupBy []string
	// Total sums each group over the whole range instead of hour by hour;
	// the rows' Hour is then zero.
	Total bool
}

// Dimensions a RollupFilter may group by, in result order, with their
// columns.
var rollupDims = []struct{ name, col string }{
	{"tag", "tag"},
	{"org", "org"},
	{"team", "team"},
	{"project", "project"},
	{"key", "key_id"},
	{"owner", "owner"},
	{"model", "model"},
	{"pool", "pool"},
}

// RollupDimensions are the names RollupFilter.GroupBy accepts, in the
// order rollups are sorted by.
func RollupDimensions() []string {
	var s []string
	for _, d := range rollupDims {
		s = append(s, d.name)
	}
	return s
}

// hourMicros is the length of an hour in microseconds.
const hourMicros = int64(time.Hour / time.Microsecond)

// hourOf returns the start of the UTC hour holding t, in unix microseconds
// (floored also before 1970).
func hourOf(us int64) int64 {
	return us - ((us%hourMicros)+hourMicros)%hourMicros
}

// rollupQuery builds the SELECT of Rollups (byTag false: table rollups) or
// RollupsByTag (table rollups_by_tag). It selects, in this order: hour (the
// hourLit constant when f.Total), tag, org, team, project, key_id, owner,
// model, pool, requests, prompt_tokens, completion_tokens, cached_tokens,
// gpu_hours, estimated_requests. ph returns the n-th (1-based) placeholder;
// from and to are the bounds already in the dialect's hour type; sumInt
// wraps an integer sum (PostgreSQL's sum(bigint) is numeric).
//
// With nested, unless model or pool is kept, the rows are first summed per
// hour over the primary key's prefix up to the last kept dimension (a
// GROUP BY that follows the key's order, so SQLite streams it without
// sorting), then grouped as asked over these far fewer rows: SQLite has no
// hash aggregation, and sorting every rollup of a month is what made its
// monthly queries slow.
func rollupQuery(byTag bool, f RollupFilter, from, to any, ph func(int) string, hourLit string, sumInt func(string) string, nested bool) (string, []any, error) {
	if !byTag && f.Tag != "" {
		return "", nil, &llmflow.Error{Code: llmflow.EINVALID, Message: "a tag filter needs the per-tag rollups", Param: "tag"}
	}
	keep := map[string]bool{}
	if len(f.GroupBy) == 0 {
		for _, d := range rollupDims {
			keep[d.name] = true
		}
	}
	for _, g := range f.GroupBy {
		known := slices.ContainsFunc(rollupDims, func(d struct{ name, col string }) bool { return d.name == g })
		if !known || (g == "tag" && !byTag) {
			names := RollupDimensions()
			if !byTag {
				names = names[1:]
			}
			return "", nil, &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("unknown rollup dimension %q (known: %s)", g, strings.Join(names, ", ")), Param: "group_by"}
		}
		keep[g] = true
	}
	if !byTag {
		keep["tag"] = false
	}

	table := "rollups"
	if byTag {
		table = "rollups_by_tag"
	}
	args := []any{from, to}
	where := []string{"hour >= " + ph(1), "hour < " + ph(2)}
	for _, c := range []struct{ col, v string }{
		{"tag", f.Tag}, {"org", f.Org}, {"team", f.Team}, {"project", f.Project},
		{"key_id", f.KeyID}, {"owner", f.Owner}, {"model", f.Model}, {"pool", f.Pool},
	} {
		if c.v != "" {
			args = append(args, c.v)
			where = append(where, c.col+" = "+ph(len(args)))
		}
	}

	from_ := table + " WHERE " + strings.Join(where, " AND ")
	last := 0
	for i, d := range rollupDims {
		if keep[d.name] {
			last = i
		}
	}
	// Keeping model or pool, the last columns of the key, the first step
	// would sum next to nothing: then a single GROUP BY is faster.
	if nested && rollupDims[last].name != "model" && rollupDims[last].name != "pool" {
		prefix := []string{"hour"}
		for _, d := range rollupDims[:last+1] {
			if d.name != "tag" || byTag {
				prefix = append(prefix, d.col)
			}
		}
		from_ = "(SELECT " + strings.Join(prefix, ", ") + ", sum(requests) AS requests, sum(prompt_tokens) AS prompt_tokens," +
			" sum(completion_tokens) AS completion_tokens, sum(cached_tokens) AS cached_tokens, sum(gpu_hours) AS gpu_hours," +
			" sum(estimated_requests) AS estimated_requests FROM " + from_ + " GROUP BY " + strings.Join(prefix, ", ") + ")"
	}

	var sel, group []string
	if f.Total {
		sel = append(sel, hourLit)
	} else {
		sel, group = append(sel, "hour"), append(group, "hour")
	}
	for _, d := range rollupDims {
		if keep[d.name] {
			sel, group = append(sel, d.col), append(group, d.col)
		} else {
			sel = append(sel, "''")
		}
	}
	sel = append(sel,
		sumInt("requests"), sumInt("prompt_tokens"), sumInt("completion_tokens"), sumInt("cached_tokens"),
		"sum(gpu_hours)", sumInt("estimated_requests"))
	q := "SELECT " + strings.Join(sel, ", ") + " FROM " + from_
	if len(group) > 0 {
		q += " GROUP BY " + strings.Join(group, ", ") + " ORDER BY " + strings.Join(group, ", ")
	}
	return q, args, nil
}

// rollupDest returns the scan destinations of a rollupQuery row after the
// hour column.
func rollupDest(r *llmflow.Rollup) []any {
	return []any{&r.Tag, &r.Org, &r.Team, &r.Project, &r.KeyID, &r.Owner, &r.Model, &r.Pool,
		&r.Requests, &r.PromptTokens, &r.CompletionTokens, &r.CachedTokens, &r.GPUHours, &r.EstimatedRequests}
}
