package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/server"
)

// auditOptions are the filters and the output format of both audit
// commands (`llmflow audit` on the store, `llmflow admin audit` over the
// API).
type auditOptions struct {
	from, to, actor string
	limit           int
	format          listFormat
}

func (o *auditOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.from, "from", "", "entries at or after this RFC 3339 time")
	cmd.Flags().StringVar(&o.to, "to", "", "entries before this RFC 3339 time")
	cmd.Flags().StringVar(&o.actor, "actor", "", "only this user's writes (\"master\" for the master key)")
	cmd.Flags().IntVar(&o.limit, "limit", 100, "at most this many entries")
	o.format.flags(cmd)
}

// filter is the store's filter of the options: --from and --to RFC 3339
// times, --limit at least 1.
func (o *auditOptions) filter() (llmflow.AuditFilter, error) {
	f := llmflow.AuditFilter{Actor: o.actor, Limit: o.limit}
	for _, b := range []struct {
		name, v string
		t       *time.Time
	}{{"--from", o.from, &f.From}, {"--to", o.to, &f.To}} {
		if b.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, b.v)
		if err != nil {
			return f, fmt.Errorf("%s: want an RFC 3339 time such as 2026-11-30T00:00:00Z, got %q", b.name, b.v)
		}
		*b.t = t
	}
	if o.limit < 1 {
		return f, fmt.Errorf("--limit must be at least 1")
	}
	return f, nil
}

// query is the admin API's query of the options, checked as filter does.
func (o *auditOptions) query() (adminapi.AuditQuery, error) {
	f, err := o.filter()
	return adminapi.AuditQuery{From: f.From, To: f.To, Actor: f.Actor, Limit: f.Limit}, err
}

// writeAudit prints entries like sacctmgr, the JSON of the object before
// and after in the last columns (free text: split with a field limit).
func writeAudit(w io.Writer, rows []adminapi.AuditEntry, f listFormat) {
	t := &table{cols: []string{"ID", "Time", "Actor", "Action", "Org", "Team", "Remote", "Target", "Before", "After"},
		widths: []int{6, 19, 10, 14, 10, 10, 18, 30, 30, 30}}
	for _, r := range rows {
		t.add(fmt.Sprint(r.ID), timeCell(&r.Time), r.Actor, r.Action, r.Org, r.Team, r.Remote, r.Target, string(r.Before), string(r.After))
	}
	t.write(w, f)
}

func auditCmd(e *env) *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Print the audit trail of admin writes from the store",
		Long: "audit reads the audit trail from the store the configuration names (-c): every admin write,\n" +
			"who made it, what it changed (the object before and after, never a secret), when and from\n" +
			"which client network, newest first. For the filtered view of a delegated admin, use\n" +
			"`llmflow admin audit` against a running gateway.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.loadConfig(cmd, "")
			if err != nil {
				return err
			}
			f, err := o.filter()
			if err != nil {
				return err
			}
			db, err := server.OpenStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			es, err := db.Audit(cmd.Context(), f)
			if err != nil {
				return err
			}
			rows := make([]adminapi.AuditEntry, 0, len(es))
			for _, x := range es {
				rows = append(rows, adminapi.AuditEntryOf(x))
			}
			writeAudit(e.stdout, rows, o.format)
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}
