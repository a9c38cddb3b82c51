package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-llmflow/llmflow"
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

// auditRow is an audit entry as both commands print it.
type auditRow struct {
	ID     int64           `json:"id"`
	Time   time.Time       `json:"time"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Org    string          `json:"org"`
	Team   string          `json:"team"`
	Remote string          `json:"remote"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// writeAudit prints entries like sacctmgr, the JSON of the object before
// and after in the last columns (free text: split with a field limit).
func writeAudit(w io.Writer, rows []auditRow, f listFormat) {
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
					return fmt.Errorf("%s: want an RFC 3339 time such as 2026-11-30T00:00:00Z, got %q", b.name, b.v)
				}
				*b.t = t
			}
			if o.limit < 1 {
				return fmt.Errorf("--limit must be at least 1")
			}
			db, err := openStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			es, err := db.Audit(cmd.Context(), f)
			if err != nil {
				return err
			}
			rows := make([]auditRow, 0, len(es))
			for _, x := range es {
				rows = append(rows, auditRow{ID: x.ID, Time: x.Time, Actor: x.Actor, Action: x.Action, Target: x.Target,
					Org: x.Org, Team: x.Team, Remote: x.Remote, Before: rawJSON(x.Before), After: rawJSON(x.After)})
			}
			writeAudit(e.stdout, rows, o.format)
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

func rawJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}
