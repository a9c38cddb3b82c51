package llmflow

import "slices"

// RollupFilter selects and groups hourly rollups: what a spend report,
// an export or a write-back asks of a store.
//
// The string fields select rollups whose field equals the value exactly;
// an empty field matches everything. Tag applies to the per-tag rollups
// only (an untagged request is under the tag ""; group by "tag" to see
// it): see NeedsTags.
type RollupFilter struct {
	Org     string
	Team    string
	Project string
	KeyID   string
	Owner   string
	Model   string
	Pool    string
	Tag     string

	// GroupBy lists the dimensions kept in the result, among
	// RollupDimensions ("tag" for the per-tag rollups only); the rollups of
	// the other dimensions are summed and their fields are "". Nil (or
	// empty) keeps every dimension: the per-tag rollups then keep "tag"
	// too.
	GroupBy []string
	// Total sums each group over the whole range instead of hour by hour;
	// the rows' Hour is then zero.
	Total bool
}

// NeedsTags reports whether f can be answered only from the per-tag
// rollups (a store's RollupsByTag), where a request counts once under each
// of its tags: f selects a tag or groups by "tag". Every other filter is
// answered from the plain rollups, where a request counts once.
func (f RollupFilter) NeedsTags() bool {
	return f.Tag != "" || slices.Contains(f.GroupBy, DimTag)
}

// The dimensions of a rollup: the names RollupFilter.GroupBy, spend
// reports and exports accept.
const (
	DimOrg     = "org"
	DimTeam    = "team"
	DimProject = "project"
	DimKey     = "key"
	DimOwner   = "owner"
	DimModel   = "model"
	DimPool    = "pool"
	DimTag     = "tag" // per-tag rollups only
)

// rollupDimensions is the one list of dimensions, in the order they are
// listed to users.
var rollupDimensions = []string{DimOrg, DimTeam, DimProject, DimKey, DimOwner, DimModel, DimPool, DimTag}

// RollupDimensions returns the dimensions a rollup may be grouped by:
// org, team, project, key, owner, model, pool and tag. The slice is the
// caller's.
func RollupDimensions() []string { return slices.Clone(rollupDimensions) }

// IsRollupDimension reports whether name is one of RollupDimensions.
func IsRollupDimension(name string) bool { return slices.Contains(rollupDimensions, name) }

// Dimension returns r's value for the dimension name (one of
// RollupDimensions), "" for any other name.
func (r Rollup) Dimension(name string) string {
	switch name {
	case DimOrg:
		return r.Org
	case DimTeam:
		return r.Team
	case DimProject:
		return r.Project
	case DimKey:
		return r.KeyID
	case DimOwner:
		return r.Owner
	case DimModel:
		return r.Model
	case DimPool:
		return r.Pool
	case DimTag:
		return r.Tag
	}
	return ""
}
