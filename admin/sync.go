package admin

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/authz"
)

// syncRunView is a run as GET /admin/sync shows it.
type syncRunView struct {
	ID            int64     `json:"id"`
	Started       time.Time `json:"started"`
	Finished      time.Time `json:"finished"`
	Source        string    `json:"source"`
	DryRun        bool      `json:"dry_run"`
	Outcome       string    `json:"outcome"`
	Error         string    `json:"error,omitempty"`
	Created       int       `json:"created"`
	SharesChanged int       `json:"shares_changed"`
	Reparented    int       `json:"reparented"`
	Disabled      int       `json:"disabled"`
	Reenabled     int       `json:"reenabled"`
	Members       int       `json:"members"`
	Unchanged     int       `json:"unchanged"`
}

// listSyncs is GET /admin/sync?limit=: the Slurm import runs, newest
// first. They concern the whole tree, so proxy readers only.
func (h *Handler) listSyncs(w http.ResponseWriter, r *http.Request, p Principal) error {
	if !p.everywhere(authz.Read) {
		return forbidden("the Slurm import history is proxy-wide: it needs proxy_admin or proxy_viewer")
	}
	if h.syncs == nil {
		return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []syncRunView{}})
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
		out = append(out, syncRunView{ID: x.ID, Started: x.Started, Finished: x.Finished, Source: x.Source, DryRun: x.DryRun,
			Outcome: x.Outcome, Error: x.Error, Created: x.Created, SharesChanged: x.SharesChanged, Reparented: x.Reparented,
			Disabled: x.Disabled, Reenabled: x.Reenabled, Members: x.Members, Unchanged: x.Unchanged})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}
