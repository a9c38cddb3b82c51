package gateway

// teamModels is the team model lists as the request path reads them: for
// each team with a list, the routes it may use. A team without a list may
// use every model. It is replaced whole (an atomic pointer) when a list
// changes, so the check on the request path takes no lock and allocates
// nothing: one map lookup by team name, one by route pointer, and none at
// all while no team has a list.
type teamModels struct {
	byTeam map[string]map[*route]struct{}
	names  map[string][]string // as set, for the admin API
}

// hidden reports whether team may not use rt: the team has a list and rt
// is not on it.
func (tm *teamModels) hidden(team string, rt *route) bool {
	if tm == nil {
		return false
	}
	allowed, ok := tm.byTeam[team]
	if !ok {
		return false
	}
	_, ok = allowed[rt]
	return !ok
}

// newTeamModels indexes the lists by route; names that are not configured
// models (a model removed from the configuration since) allow nothing.
func (g *Gateway) newTeamModels(lists map[string][]string) *teamModels {
	if len(lists) == 0 {
		return nil
	}
	tm := &teamModels{byTeam: make(map[string]map[*route]struct{}, len(lists)), names: lists}
	for team, names := range lists {
		set := make(map[*route]struct{}, len(names))
		for _, n := range names {
			if rt := g.routes[n]; rt != nil {
				set[rt] = struct{}{}
			}
		}
		tm.byTeam[team] = set
	}
	return tm
}

// visibleModels returns the model cards a team may see in /v1/models.
func (g *Gateway) visibleModels(team string) []modelCard {
	tm, cards := g.modelLists.Load(), g.routing.aliases.Load().cards // models, then aliases
	if tm == nil {
		return cards
	}
	out := make([]modelCard, 0, len(cards))
	for _, m := range cards {
		if !tm.hidden(team, g.routeOf(m.ID)) {
			out = append(out, m)
		}
	}
	return out
}
