package admin

import (
	"maps"
	"net/http"
	"slices"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
)

// teamModelsView is the wire type adminapi.TeamModels (package adminapi: the contract of
// the CLI, the console and the API).
type teamModelsView = adminapi.TeamModels

func (h *Handler) getTeamModels(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	team, _, err := h.teamFor(r, p, authz.Read, authz.OwnKeys)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, h.teamModelsOf(team.Name))
}

func (h *Handler) teamModelsOf(team string) teamModelsView {
	v := teamModelsView{Team: team, Models: []string{}}
	if ms := h.gw.TeamModels()[team]; ms != nil {
		v.Models = slices.Clone(ms)
	}
	return v
}

// setTeamModels is PUT /admin/teams/{team}/models {"models":[…]}: team
// admins and above; every name must be a configured model.
func (h *Handler) setTeamModels(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req teamModelsView
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	team, s, err := h.teamFor(r, p, authz.SetModels)
	if err != nil {
		return err
	}
	if req.Team != "" && req.Team != team.Name {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "team", Message: "team in the body differs from the path"}
	}
	var models []string
	for _, m := range req.Models {
		if !h.gw.IsModel(m) {
			return &llmflow.Error{Code: llmflow.EINVALID, Param: "models", Message: "unknown model " + quote(m)}
		}
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	h.modelsMu.Lock()
	defer h.modelsMu.Unlock()
	before := h.teamModelsOf(team.Name)
	if err := h.store.SetTeamModels(r.Context(), team.Name, models); err != nil {
		return err
	}
	lists := maps.Clone(h.gw.TeamModels())
	if lists == nil {
		lists = map[string][]string{}
	}
	if len(models) == 0 {
		delete(lists, team.Name)
	} else {
		lists[team.Name] = models
	}
	h.gw.SetTeamModels(lists)
	after := h.teamModelsOf(team.Name)
	h.audit(r, p, "team.models", "models of team "+team.Name, s, before, after)
	return writeJSON(w, http.StatusOK, after)
}
