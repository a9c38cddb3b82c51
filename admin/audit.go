package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/authz"
	"github.com/go-llmflow/llmflow/gateway"
)

// audit records an admin write: who (p), what (action on target), where
// in the tree (s, for filtering the trail), the object before and after
// (nil when it did not exist or is gone), when and from which client
// network. before and after are the views the API shows, which never hold
// a secret or a secret's hash; the one-time secret of a created key or
// token is added to the answer after auditing.
//
// Auditing never fails the write it records (that is done already): a
// store error is logged with the entry and counted in
// llmflow_audit_failed_total.
//
// Every write is audited once its change is stored, so this is where the
// other replicas are told (Notifier): TreeChanged for an account of the
// tree, AdminChanged for anything else.
func (h *Handler) audit(r *http.Request, p Principal, action, target string, s authz.Scope, before, after any) {
	defer h.announce(r.Context(), action)
	e := llmflow.AuditEntry{
		Time: h.now().UTC(), Actor: p.Name, Action: action, Target: target, Org: s.Org, Team: s.Team,
		Before: auditJSON(before), After: auditJSON(after), Remote: gateway.ClientNetwork(r.RemoteAddr),
	}
	if h.store == nil {
		h.log.Info("admin write", "actor", e.Actor, "action", e.Action, "target", e.Target, "remote", e.Remote)
		return
	}
	if err := h.store.AppendAudit(r.Context(), e); err != nil {
		h.auditFailed.Inc()
		h.log.Error("audit entry not stored", "actor", e.Actor, "action", e.Action, "target", e.Target,
			"before", e.Before, "after", e.After, "remote", e.Remote, "err", err)
	}
}

// announce tells the other replicas about a stored write (audit).
func (h *Handler) announce(ctx context.Context, action string) {
	if h.notify == nil {
		return
	}
	kind, verb, _ := strings.Cut(action, ".")
	switch {
	case (kind == "org" || kind == "team" || kind == "project") &&
		(verb == "create" || verb == "disable" || verb == "enable" || verb == "share"):
		h.notify.TreeChanged(ctx) // an account of the tree (changeAccount)
	default:
		h.notify.AdminChanged(ctx)
	}
}

func auditJSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// auditView is the wire type adminapi.AuditEntry (package adminapi: the contract of
// the CLI, the console and the API).
type auditView = adminapi.AuditEntry

// listAudit is GET /admin/audit?from=&to=&actor=&limit=: the admin writes,
// newest first, filtered to the scopes the caller may read (proxy-wide
// entries, such as users and organisations, to proxy readers only) and the
// caller's own writes (a member's keys).
// auditPage is the smallest page GET /admin/audit reads from the store,
// and auditScan the most entries one request scans for what its caller
// may see.
const (
	auditPage = 500
	auditScan = 100_000
)

func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := knownParams(r, "from", "to", "actor", "limit"); err != nil {
		return err
	}
	q := r.URL.Query()
	f := llmflow.AuditFilter{Actor: q.Get("actor"), Limit: 100}
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if s := q.Get(b.name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return &llmflow.Error{Code: llmflow.EINVALID, Param: b.name, Message: b.name + " must be an RFC 3339 time (2026-11-30T00:00:00Z)"}
			}
			*b.t = t
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			return &llmflow.Error{Code: llmflow.EINVALID, Message: "limit must be a number from 1 to 10000", Param: "limit"}
		}
		f.Limit = n
	}
	all := p.everywhere(authz.Read)
	out := []auditView{}
	// Filtering after the store's limit could return fewer entries than
	// there are; read in pages until enough are found or the trail ends.
	// Pages are at least auditPage entries, and a reader who may see few
	// entries scans at most auditScan of them: the newest of those it may
	// see are answered, never a store query per entry of the whole trail.
	want := f.Limit
	f.Limit = max(want, auditPage)
	for scanned := 0; scanned < auditScan; {
		es, err := h.store.Audit(r.Context(), f)
		if err != nil {
			return err
		}
		scanned += len(es)
		for _, e := range es {
			if all || (p.User && e.Actor == p.Name) || ((e.Org != "" || e.Team != "") && p.may(authz.Read, authz.Scope{Org: e.Org, Team: e.Team})) {
				out = append(out, adminapi.AuditEntryOf(e))
				if len(out) == want {
					break
				}
			}
		}
		if len(out) == want || len(es) < f.Limit {
			break
		}
		f.BeforeID = es[len(es)-1].ID // the next page: older entries
	}
	return writeJSON(w, http.StatusOK, adminapi.NewList(out))
}
