package admin

import (
	"net/http"
	"strconv"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
)

// syncRunView is the wire type adminapi.SyncRun (package adminapi: the contract of
// the CLI, the console and the API).
type syncRunView = adminapi.SyncRun

// listSyncs is GET /admin/sync?limit=: the Slurm import runs, newest
// first. They concern the whole tree, so proxy readers only.
func (h *Handler) listSyncs(w http.ResponseWriter, r *http.Request, p Principal) error {
	if !p.everywhere(authz.Read) {
		return forbidden("the Slurm import history is proxy-wide: it needs proxy_admin or proxy_viewer")
	}
	if h.syncs == nil {
		return writeJSON(w, http.StatusOK, adminapi.NewList([]syncRunView{}))
	}
	limit := 50
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			return &llmflow.Error{Code: llmflow.EINVALID, Message: "limit must be a number from 1 to 10000", Param: "limit"}
		}
		limit = n
	}
	runs, err := h.syncs.SyncRuns(r.Context(), limit)
	if err != nil {
		return err
	}
	out := make([]syncRunView, 0, len(runs))
	for _, x := range runs {
		out = append(out, adminapi.SyncRunOf(x))
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}
