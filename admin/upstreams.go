package admin

import (
	"net/http"
	"net/url"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// Runtime upstreams and aliases through the admin API (smol-llm-proxy's
// /admin/servers and /admin/aliases, on llmflow's models):
//
//	GET    /admin/upstreams                           every model's upstreams
//	GET    /admin/models/{model}/upstreams            one model's
//	POST   /admin/models/{model}/upstreams            {"name","base_url"}: add (409 when the name exists)
//	PUT    /admin/models/{model}/upstreams/{name}     {"base_url"}: add or replace
//	DELETE /admin/models/{model}/upstreams/{name}     remove
//	GET    /admin/aliases                             every alias
//	PUT    /admin/aliases/{name...}                   {"model"}: create or switch
//	DELETE /admin/aliases/{name...}                   remove
//
// Who: engine URLs and the model names every organisation's clients use
// are proxy-wide, outside any organisation's or team's scope in authz's
// policy, so proxy_admin (and the master key) writes them and
// proxy_viewer reads them ("read every listing"); every other role gets
// 403, as for the Slurm import history.
//
// The configuration is authoritative for what it declares: a configured
// upstream cannot be replaced or removed here (409), an alias cannot take
// a configured model's name (409). Runtime upstreams take the model's
// key_file; a request body naming a key (or anything else unknown) is
// refused, so no secret passes through this API, its listings or the
// audit trail.

// upstreamView is the wire type adminapi.Upstream (package adminapi: the contract of
// the CLI, the console and the API).
type upstreamView = adminapi.Upstream

// aliasView is the wire type adminapi.Alias (package adminapi: the contract of
// the CLI, the console and the API).
type aliasView = adminapi.Alias

func storedUpstreamView(u llmflow.RuntimeUpstream) upstreamView {
	c, up := u.CreatedAt, u.UpdatedAt
	return upstreamView{Model: u.Model, Name: u.Name, BaseURL: redactURL(u.BaseURL), InheritKey: u.InheritKey, KeyName: u.KeyName, Source: "admin", CreatedAt: &c, UpdatedAt: &up, By: u.By}
}

// redactURL shows a stored URL without what could hold a secret
// (credentials, query, fragment). The API stores none; a row written
// behind its back (or by an older version) may.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User == nil && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.Opaque == "" {
		return s
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment, u.Opaque = nil, "", false, "", "", ""
	return u.String()
}

// upstreamViews lists the upstreams of model ("" = every model), the
// configured ones first, with their live state.
func (h *Handler) upstreamViews(model string) []upstreamView {
	rs := h.gw.Routing()
	out := []upstreamView{}
	live := func(v *upstreamView, b gateway.Backend) {
		healthy, n := b.Healthy, b.InFlight
		v.Healthy, v.InFlight = &healthy, &n
	}
	backends := h.gw.Backends(model)
	for _, m := range h.gw.Models() {
		if model != "" && m != model {
			continue
		}
		var runtime []gateway.Backend
		for _, b := range backends {
			switch {
			case b.Model != m:
			case b.Configured:
				v := upstreamView{Model: m, Name: b.Name, BaseURL: b.BaseURL, Source: "config", Served: true}
				live(&v, b)
				out = append(out, v)
			default:
				runtime = append(runtime, b)
			}
		}
		for _, u := range rs.Upstreams {
			if u.Model != m {
				continue
			}
			v := storedUpstreamView(u)
			v.Reason = rs.UpstreamReason(u.Model, u.Name)
			for _, b := range runtime {
				if b.Name == u.Name {
					v.Served = true
					live(&v, b)
				}
			}
			out = append(out, v)
		}
	}
	for _, u := range rs.Upstreams { // rows of models no longer configured
		if (model == "" || u.Model == model) && !h.gw.IsModel(u.Model) {
			v := storedUpstreamView(u)
			v.Reason = rs.UpstreamReason(u.Model, u.Name)
			out = append(out, v)
		}
	}
	return out
}

func (h *Handler) mayReadRouting(p Principal) error {
	if !p.may(authz.Read, authz.Proxy) {
		return forbidden("upstreams and aliases are proxy-wide: proxy admins and proxy viewers read them")
	}
	return nil
}

func (h *Handler) mayWriteRouting(p Principal) error {
	if !p.may(authz.ManageRouting, authz.Proxy) {
		return forbidden("only a proxy admin changes upstreams and aliases")
	}
	return nil
}

func (h *Handler) listAllUpstreams(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "model"); err != nil {
		return err
	}
	if err := h.mayReadRouting(p); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(h.upstreamViews(r.URL.Query().Get("model"))))
}

func (h *Handler) listModelUpstreams(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	if err := h.mayReadRouting(p); err != nil {
		return err
	}
	model := r.PathValue("model")
	if !h.gw.IsModel(model) {
		return llmflow.Errorf(llmflow.ENOTFOUND, "no configured model %s", quote(model))
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(h.upstreamViews(model)))
}

// UpstreamRequest is the wire type adminapi.UpstreamRequest (package adminapi: the contract of
// the CLI, the console and the API).
type UpstreamRequest = adminapi.UpstreamRequest

func (h *Handler) createUpstream(w http.ResponseWriter, r *http.Request, p Principal) error {
	return h.writeUpstream(w, r, p, r.PathValue("model"), "", true)
}

func (h *Handler) replaceUpstream(w http.ResponseWriter, r *http.Request, p Principal) error {
	return h.writeUpstream(w, r, p, r.PathValue("model"), r.PathValue("name"), false)
}

func (h *Handler) writeUpstream(w http.ResponseWriter, r *http.Request, p Principal, model, name string, create bool) error {
	if err := h.mayWriteRouting(p); err != nil {
		return err
	}
	var req UpstreamRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	switch {
	case create:
		name = req.Name
	case req.Name != "" && req.Name != name:
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "name", Message: "name in the body differs from the path"}
	}
	if req.BaseURL == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Param: "base_url", Message: "base_url is required"}
	}
	if req.KeyName != "" {
		if req.InheritKey {
			return &llmflow.Error{Code: llmflow.EINVALID, Param: "key_name", Message: "an upstream gets either the model's key (inherit_key) or its own (key_name), not both"}
		}
		if err := h.gw.CheckUpstreamKey(req.KeyName); err != nil {
			return err
		}
	}
	now := h.now().UTC()
	u := llmflow.RuntimeUpstream{Model: model, Name: name, BaseURL: req.BaseURL, InheritKey: req.InheritKey, KeyName: req.KeyName, CreatedAt: now, UpdatedAt: now, By: p.Name}
	before, err := h.putUpstream(r.Context(), u, create)
	if err != nil {
		return err
	}
	after := h.upstreamOf(model, name)
	status, action := http.StatusCreated, "upstream.create"
	var bv any
	if before != nil {
		status, action = http.StatusOK, "upstream.update"
		bv = storedUpstreamView(*before)
	}
	h.audit(r, p, action, "upstream "+model+"/"+name, authz.Proxy, bv, auditUpstream(after))
	h.log.Info("runtime upstream stored", "model", model, "upstream", name, "by", p.Name)
	return writeJSON(w, status, after)
}

// auditUpstream is the stored part of a view: live state (health, in
// flight) does not belong in the trail.
func auditUpstream(v upstreamView) upstreamView {
	v.Healthy, v.InFlight = nil, nil
	return v
}

// upstreamOf is the view of one upstream of a model after a change.
func (h *Handler) upstreamOf(model, name string) upstreamView {
	for _, v := range h.upstreamViews(model) {
		if v.Name == name && v.Source == "admin" {
			return v
		}
	}
	return upstreamView{Model: model, Name: name, Source: "admin"}
}

func (h *Handler) removeUpstream(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	if err := h.mayWriteRouting(p); err != nil {
		return err
	}
	model, name := r.PathValue("model"), r.PathValue("name")
	before, err := h.deleteUpstream(r.Context(), model, name)
	if err != nil {
		return err
	}
	v := storedUpstreamView(before)
	h.audit(r, p, "upstream.delete", "upstream "+model+"/"+name, authz.Proxy, v, nil)
	h.log.Info("runtime upstream removed", "model", model, "upstream", name, "by", p.Name)
	return writeJSON(w, http.StatusOK, v)
}

func (h *Handler) aliasViews() []aliasView {
	rs := h.gw.Routing()
	out := make([]aliasView, 0, len(rs.Aliases))
	for _, a := range rs.Aliases {
		why := rs.AliasReason(a.Name)
		out = append(out, aliasView{Name: a.Name, Model: a.Model, Served: why == "", Reason: why, UpdatedAt: a.UpdatedAt, By: a.By})
	}
	return out
}

func (h *Handler) listAliases(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	if err := h.mayReadRouting(p); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(h.aliasViews()))
}

// AliasRequest is the wire type adminapi.AliasRequest (package adminapi: the contract of
// the CLI, the console and the API).
type AliasRequest = adminapi.AliasRequest

func (h *Handler) setAlias(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := h.mayWriteRouting(p); err != nil {
		return err
	}
	var req AliasRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		return err
	}
	name := r.PathValue("name")
	a := llmflow.ModelAlias{Name: name, Model: req.Model, UpdatedAt: h.now().UTC(), By: p.Name}
	before, err := h.putAlias(r.Context(), a)
	if err != nil {
		return err
	}
	after := aliasView{Name: a.Name, Model: a.Model, Served: true, UpdatedAt: a.UpdatedAt, By: a.By}
	status, action := http.StatusCreated, "alias.create"
	var bv any
	if before != nil {
		status, action = http.StatusOK, "alias.update"
		bv = aliasView{Name: before.Name, Model: before.Model, Served: true, UpdatedAt: before.UpdatedAt, By: before.By}
	}
	h.audit(r, p, action, "alias "+name, authz.Proxy, bv, after)
	h.log.Info("model alias stored", "alias", name, "model", a.Model, "by", p.Name)
	return writeJSON(w, status, after)
}

func (h *Handler) removeAlias(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r); err != nil {
		return err
	}
	if err := h.mayWriteRouting(p); err != nil {
		return err
	}
	name := r.PathValue("name")
	before, err := h.deleteAlias(r.Context(), name)
	if err != nil {
		return err
	}
	v := aliasView{Name: before.Name, Model: before.Model, UpdatedAt: before.UpdatedAt, By: before.By}
	h.audit(r, p, "alias.delete", "alias "+name, authz.Proxy, v, nil)
	h.log.Info("model alias removed", "alias", name, "by", p.Name)
	return writeJSON(w, http.StatusOK, v)
}
