package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
)

// rollupColumns are the columns of the rollup dimensions
// (llmflow.RollupDimensions), in the order of the tables' primary keys,
// which is the order rollups are sorted by.
var rollupColumns = []struct{ dim, col string }{
	{llmflow.DimTag, "tag"},
	{llmflow.DimOrg, "org"},
	{llmflow.DimTeam, "team"},
	{llmflow.DimProject, "project"},
	{llmflow.DimKey, "key_id"},
	{llmflow.DimOwner, "owner"},
	{llmflow.DimModel, "model"},
	{llmflow.DimPool, "pool"},
}

// Rollups returns the hourly rollups of the hours starting in [from, to),
// selected and grouped by f, ordered by hour then the kept dimensions
// (org, team, project, key, owner, model, pool). It reads rollups only,
// never raw records, so it answers the same after PurgeRecords. Bounds are
// meant to be whole hours: a from of 10:30 starts at the 11:00 hour.
func (a *sqlDB) Rollups(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return a.rollups(ctx, false, from, to, f)
}

// RollupsByTag is Rollups per tag: a request with several tags counts once
// under each distinct tag, a request without tags under the tag "". Rows
// are ordered by hour, then tag, then the other kept dimensions.
func (a *sqlDB) RollupsByTag(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return a.rollups(ctx, true, from, to, f)
}

// Spend returns the rollups f selects: from RollupsByTag when f needs the
// tags (llmflow.RollupFilter.NeedsTags), from Rollups otherwise.
func (a *sqlDB) Spend(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return a.rollups(ctx, f.NeedsTags(), from, to, f)
}

func (a *sqlDB) rollups(ctx context.Context, byTag bool, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	q, args, err := a.rollupQuery(byTag, f, from, to)
	if err != nil {
		return nil, err
	}
	if !from.Before(to) {
		return nil, nil
	}
	return all(ctx, a.read, "read rollups", q, args, func(rows dbRows) (llmflow.Rollup, error) {
		var r llmflow.Rollup
		err := rows.Scan(dbTime{&r.Hour}, &r.Tag, &r.Org, &r.Team, &r.Project, &r.KeyID, &r.Owner, &r.Model, &r.Pool,
			&r.Requests, &r.PromptTokens, &r.CompletionTokens, &r.CachedTokens, &r.GPUHours, &r.EstimatedRequests)
		return r, err
	})
}

// rollupQuery builds the SELECT of Rollups (byTag false:
// table rollups) or RollupsByTag (table rollups_by_tag) over the hours
// starting in [from, to). It selects, in this order: hour (a.nullHour when
// f.Total), tag, org, team, project, key_id, owner, model, pool, requests,
// prompt_tokens, completion_tokens, cached_tokens, gpu_hours,
// estimated_requests. It fails with EINVALID for a dimension that is not
// one of llmflow.RollupDimensions, and for a tag (filter or group) without
// byTag.
//
// With a.nestRollups, unless model or pool is kept, the rows are first
// summed per hour over the primary key's prefix up to the last kept
// dimension (a GROUP BY that follows the key's order, so SQLite streams it
// without sorting), then grouped as asked over these far fewer rows:
// SQLite has no hash aggregation, and sorting every rollup of a month is
// what made its monthly queries slow.
func (a *sqlDB) rollupQuery(byTag bool, f llmflow.RollupFilter, from, to time.Time) (string, []any, error) {
	if !byTag && f.Tag != "" {
		return "", nil, &llmflow.Error{Code: llmflow.EINVALID, Message: "a tag filter needs the per-tag rollups", Param: "tag"}
	}
	keep := map[string]bool{}
	if len(f.GroupBy) == 0 {
		for _, c := range rollupColumns {
			keep[c.dim] = true
		}
	}
	for _, g := range f.GroupBy {
		if !llmflow.IsRollupDimension(g) || (g == llmflow.DimTag && !byTag) {
			names := llmflow.RollupDimensions()
			if !byTag {
				names = slices.DeleteFunc(names, func(n string) bool { return n == llmflow.DimTag })
			}
			return "", nil, &llmflow.Error{Code: llmflow.EINVALID, Message: fmt.Sprintf("unknown rollup dimension %q (known: %s)", g, strings.Join(names, ", ")), Param: "group_by"}
		}
		keep[g] = true
	}
	if !byTag {
		keep[llmflow.DimTag] = false
	}

	table := "rollups"
	if byTag {
		table = "rollups_by_tag"
	}
	args := []any{a.bound(from), a.bound(to)}
	where := []string{"hour >= ?", "hour < ?"}
	for _, c := range []struct{ col, v string }{
		{"tag", f.Tag}, {"org", f.Org}, {"team", f.Team}, {"project", f.Project},
		{"key_id", f.KeyID}, {"owner", f.Owner}, {"model", f.Model}, {"pool", f.Pool},
	} {
		if c.v != "" {
			args = append(args, c.v)
			where = append(where, c.col+" = ?")
		}
	}

	from_ := table + " WHERE " + strings.Join(where, " AND ")
	last := 0
	for i, c := range rollupColumns {
		if keep[c.dim] {
			last = i
		}
	}
	// Keeping model or pool, the last columns of the key, the first step
	// would sum next to nothing: then a single GROUP BY is faster.
	if a.nestRollups && rollupColumns[last].dim != llmflow.DimModel && rollupColumns[last].dim != llmflow.DimPool {
		prefix := []string{"hour"}
		for _, c := range rollupColumns[:last+1] {
			if c.dim != llmflow.DimTag || byTag {
				prefix = append(prefix, c.col)
			}
		}
		from_ = "(SELECT " + strings.Join(prefix, ", ") + ", sum(requests) AS requests, sum(prompt_tokens) AS prompt_tokens," +
			" sum(completion_tokens) AS completion_tokens, sum(cached_tokens) AS cached_tokens, sum(gpu_hours) AS gpu_hours," +
			" sum(estimated_requests) AS estimated_requests FROM " + from_ + " GROUP BY " + strings.Join(prefix, ", ") + ")"
	}

	var sel, group []string
	if f.Total {
		sel = append(sel, a.nullHour)
	} else {
		sel, group = append(sel, "hour"), append(group, "hour")
	}
	for _, c := range rollupColumns {
		if keep[c.dim] {
			sel, group = append(sel, c.col), append(group, c.col)
		} else {
			sel = append(sel, "''")
		}
	}
	sumInt := func(col string) string { return "sum(" + col + ")" + a.sumCast }
	sel = append(sel,
		sumInt("requests"), sumInt("prompt_tokens"), sumInt("completion_tokens"), sumInt("cached_tokens"),
		"sum(gpu_hours)", sumInt("estimated_requests"))
	q := "SELECT " + strings.Join(sel, ", ") + " FROM " + from_
	if len(group) > 0 {
		q += " GROUP BY " + strings.Join(group, ", ") + " ORDER BY " + strings.Join(group, ", ")
	}
	return q, args, nil
}
