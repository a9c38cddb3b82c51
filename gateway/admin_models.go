package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
)

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

// loadTeamModels reads the lists from the store (New).
func (g *Gateway) loadTeamModels(ctx context.Context) error {
	lists, err := g.admins.TeamModels(ctx)
	if err != nil {
		return fmt.Errorf("read team model lists: %w", err)
	}
	g.modelLists.Store(g.newTeamModels(lists))
	return nil
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

// teamModelsView is GET/PUT /admin/teams/{team}/models: an empty list is
// every configured model.
type teamModelsView struct {
	Team   string   `json:"team,omitempty"`
	Models []string `json:"models"`
}

func (g *Gateway) getTeamModels(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	team, _, err := g.teamFor(r, p, authz.Read, authz.OwnKeys)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, g.teamModelsOf(team.Name))
}

func (g *Gateway) teamModelsOf(team string) teamModelsView {
	v := teamModelsView{Team: team, Models: []string{}}
	if tm := g.modelLists.Load(); tm != nil && tm.names[team] != nil {
		v.Models = slices.Clone(tm.names[team])
	}
	return v
}

// setTeamModels is PUT /admin/teams/{team}/models {"models":[…]}: team
// admins and above; every name must be a configured model.
func (g *Gateway) setTeamModels(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req teamModelsView
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	team, s, err := g.teamFor(r, p, authz.SetModels)
	if err != nil {
		return err
	}
	if req.Team != "" && req.Team != team.Name {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "team", Message: "team in the body differs from the path"}
	}
	var models []string
	for _, m := range req.Models {
		if g.routes[m] == nil {
			return &llmflow.Error{Code: llmflow.EINVALID, Param: "models", Message: "unknown model " + quote(m)}
		}
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	g.modelsMu.Lock()
	defer g.modelsMu.Unlock()
	before := g.teamModelsOf(team.Name)
	if err := g.admins.SetTeamModels(r.Context(), team.Name, models); err != nil {
		return err
	}
	lists := map[string][]string{}
	if tm := g.modelLists.Load(); tm != nil {
		for t, ms := range tm.names {
			lists[t] = ms
		}
	}
	if len(models) == 0 {
		delete(lists, team.Name)
	} else {
		lists[team.Name] = models
	}
	g.modelLists.Store(g.newTeamModels(lists))
	after := g.teamModelsOf(team.Name)
	g.audit(r, p, "team.models", "models of team "+team.Name, s, before, after)
	return writeJSON(w, http.StatusOK, after)
}
