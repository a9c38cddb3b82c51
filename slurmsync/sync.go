package slurmsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
)

// Sink is where imported trees go: llmflow's store.
type Sink interface {
	// Accounts returns the stored Slurm tree (nil before the first import).
	Accounts(ctx context.Context) (llmflow.Accounts, error)
	// SaveSync records the run and, when next is not nil, replaces the
	// stored tree, in one transaction.
	SaveSync(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun) (int64, error)
}

// RoleSink is where the roles Slurm implies go (roles.go): llmflow's
// admin store.
type RoleSink interface {
	Users(ctx context.Context) ([]llmflow.User, error)
	// Roles returns every user's roles ("") with their sources.
	Roles(ctx context.Context, user string) ([]llmflow.RoleGrant, error)
	// SaveSyncRoles is SaveSync that also applies role changes, in the
	// same transaction, bumping the admin generation when a row changed
	// (cached principals are read again: a revoked role or a disabled
	// user's token stops at the next request).
	SaveSyncRoles(ctx context.Context, next llmflow.Accounts, run llmflow.SyncRun, changes []llmflow.RoleChange) (int64, error)
}

// Syncer imports the tree of one Slurm source into a Sink.
type Syncer struct {
	Source Source
	Name   string // the source as runs show it, e.g. "slurmdbd:hgx"
	Sink   Sink
	// Roles, when set, also brings the users and roles Slurm implies
	// (coordinators, user associations) in line, in the same
	// transaction as the tree. nil: the tree only.
	Roles RoleSink
	Now   func() time.Time // nil: time.Now
	// Progress, when set, is told how the run goes, stage by stage:
	// "reading" the source (done associations read, of total; 0: not
	// known yet), then "applying" the changes (done of total) when the
	// run writes some. nil: nothing is told. The pure parts (Map, Diff,
	// Roles, RoleDiff) know nothing of it.
	Progress func(stage, unit string, done, total int)
}

// progress tells s.Progress, when set.
func (s *Syncer) progress(stage, unit string, done, total int) {
	if s.Progress != nil {
		s.Progress(stage, unit, done, total)
	}
}

// Result is one run: its record, the changes and the tree now stored.
type Result struct {
	Run      llmflow.SyncRun
	Changes  []Change
	Accounts llmflow.Accounts // the stored tree after the run
	// RoleChanges are the changes of users and roles (Syncer.Roles set),
	// RoleNotes what Slurm says that gives no role, and why.
	RoleChanges []llmflow.RoleChange
	RoleNotes   []string
	// Notes say what the source left unknown and was kept as stored
	// (a listing without the limit columns).
	Notes []string
}

// Run imports the tree, computes the changes against the stored tree and,
// unless dryRun, applies them in one transaction. Every run is recorded,
// failed and dry ones included; a dry run or a run that finds no change
// writes only its record.
func (s *Syncer) Run(ctx context.Context, dryRun bool) (Result, error) {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	res := Result{Run: llmflow.SyncRun{Started: now().UTC(), Source: s.Name, DryRun: dryRun}}
	fail := func(err error) (Result, error) {
		res.Run.Finished = now().UTC()
		res.Run.Outcome = "failed"
		res.Run.Error = err.Error()
		if id, serr := s.Sink.SaveSync(context.WithoutCancel(ctx), nil, res.Run); serr == nil {
			res.Run.ID = id
		} else {
			err = errors.Join(err, serr)
		}
		return res, err
	}
	s.progress("reading "+s.Name, "associations", 0, 0)
	tree, err := s.Source.Tree(ctx)
	if err != nil {
		return fail(fmt.Errorf("import from %s: %w", s.Name, err))
	}
	n := len(tree.Accounts) + len(tree.Users)
	s.progress("reading "+s.Name, "associations", n, n)
	cur, err := Map(tree)
	if err != nil {
		return fail(err)
	}
	old, err := s.Sink.Accounts(ctx)
	if err != nil {
		return fail(err)
	}
	res.Notes = append(KeepUnknownLimits(cur, old, tree.MinutesUnknown, tree.GPUsUnknown), UnenforcedLimits(tree)...)
	changes, next := Diff(old, cur)
	res.Changes = changes
	Count(&res.Run, changes, len(next))
	switch {
	case s.Roles != nil && !tree.CoordsKnown:
		res.RoleNotes = []string{"roles not synced: " + s.Name + " did not read the coordinators " +
			"(sacctmgr files: give the output of `sacctmgr -P show user withcoord` too; " +
			"slurmdbd: the database user needs SELECT on acct_coord_table)"}
	case s.Roles != nil:
		want, notes := Roles(tree, cur)
		users, err := s.Roles.Users(ctx)
		if err != nil {
			return fail(err)
		}
		have, err := s.Roles.Roles(ctx, "")
		if err != nil {
			return fail(err)
		}
		rc, more := RoleDiff(want, have, users)
		res.RoleChanges, res.RoleNotes = rc, append(notes, more...)
	}
	switch {
	case dryRun:
		res.Run.Outcome, res.Accounts = "dry-run", old
		next = nil
	case len(changes) == 0 && len(res.RoleChanges) == 0:
		res.Run.Outcome, res.Accounts = "unchanged", old
		next = nil
	case len(changes) == 0:
		res.Run.Outcome, res.Accounts = "applied", old
		next = nil
	default:
		res.Run.Outcome, res.Accounts = "applied", next
	}
	res.Run.Finished = now().UTC()
	applying := 0 // the changes written, in one transaction
	if !dryRun {
		applying = len(changes) + len(res.RoleChanges)
	}
	if applying > 0 {
		s.progress("applying", "changes", 0, applying)
	}
	var id int64
	if s.Roles != nil && !dryRun && len(res.RoleChanges) > 0 {
		id, err = s.Roles.SaveSyncRoles(ctx, next, res.Run, res.RoleChanges)
	} else {
		id, err = s.Sink.SaveSync(ctx, next, res.Run)
	}
	if err != nil {
		res.Accounts = old
		return fail(err)
	}
	if applying > 0 {
		s.progress("applying", "changes", applying, applying)
	}
	res.Run.ID = id
	return res, nil
}

// Combine is the tree the gateway serves when the configuration has a
// slurm block: Slurm's accounts, then the configuration's accounts Slurm
// does not have. Slurm names are lower case; a configuration account whose
// name matches one case-insensitively is that account, and Slurm's shares
// replace the configuration's. A team the configuration puts under another
// organisation than Slurm does is an error naming both places (where is
// the configuration's position of each team, "file:line:col").
func Combine(slurm, cfg llmflow.Accounts, where func(name string) string) (llmflow.Accounts, error) {
	bySlurm := map[string]llmflow.Account{}
	for _, a := range slurm {
		bySlurm[strings.ToLower(a.Name)] = a
	}
	rename := map[string]string{} // configuration name → Slurm name
	for _, a := range cfg {
		if s, ok := bySlurm[strings.ToLower(a.Name)]; ok {
			rename[a.Name] = s.Name
		}
	}
	var errs []error
	out := append(llmflow.Accounts(nil), slurm...)
	for _, a := range cfg {
		parent := a.Parent
		if p, ok := rename[parent]; ok {
			parent = p
		}
		s, inSlurm := bySlurm[strings.ToLower(a.Name)]
		if !inSlurm {
			a.Parent = parent
			out = append(out, a)
			continue
		}
		if s.Parent != parent || s.Kind != a.Kind {
			sp := s.Parent
			if sp == "" {
				sp = "root"
			}
			errs = append(errs, fmt.Errorf("%s: %s %q is under %q in the configuration but Slurm has account %q under %q",
				where(a.Name), a.Kind, a.Name, a.Parent, s.Name, sp))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return order(out), nil
}

// KeepUnknownLimits gives the accounts of cur the stored limits (old) the
// source did not list: a listing without the GrpTRESMins (minutes) or
// GrpTRES (gpus) column says nothing about that limit, so it is unknown,
// never "none" (two sources, one with the columns and one without, would
// otherwise erase and restore a budget in turn). It returns a note for
// each limit left unknown.
func KeepUnknownLimits(cur, old llmflow.Accounts, minutes, gpus bool) []string {
	if !minutes && !gpus {
		return nil
	}
	stored := make(map[string]llmflow.GPULimits, len(old))
	for _, o := range old {
		stored[o.Name] = o.Limits
	}
	for i := range cur {
		l := stored[cur[i].Name]
		if minutes {
			cur[i].Limits.Minutes, cur[i].Limits.HasMinutes = l.Minutes, l.HasMinutes
		}
		if gpus {
			cur[i].Limits.GPUs, cur[i].Limits.HasGPUs = l.GPUs, l.HasGPUs
		}
	}
	var notes []string
	for _, c := range []struct {
		unknown bool
		col     string
	}{{minutes, "GrpTRESMins"}, {gpus, "GrpTRES"}} {
		if c.unknown {
			notes = append(notes, "limits: the listing has no "+c.col+" column: "+c.col+" is unknown, the stored limits are kept "+
				"(list it with format=…,GrpTRESMins,GrpTRES to import it)")
		}
	}
	return notes
}

// UnenforcedLimits lists the GPU limits of t's live associations that
// llmflow does not enforce, so that none is dropped silently: MaxTRES (a
// per-job cap: a request holds no GPUs of its own), and a user
// association's limits on a partition (keys have no partition). A user
// association's own GrpTRESMins (a budget over the keys its user owns in
// the account) and GrpTRES (a cap on their requests in flight) are
// enforced, as the accounts' are.
func UnenforcedLimits(t *sacctmgr.Tree) []string {
	deletedAcct := map[string]bool{}
	for _, a := range t.Accounts {
		deletedAcct[a.Name] = a.Deleted
	}
	type uk struct{ user, account, partition string }
	deletedUser := map[uk]bool{}
	for _, u := range t.Users {
		deletedUser[uk{u.Name, u.Account, u.Partition}] = u.Deleted
	}
	var out []string
	for _, l := range t.OtherLimits {
		if deletedAcct[l.Account] || (l.User != "" && deletedUser[uk{l.User, l.Account, l.Partition}]) {
			continue
		}
		value := fmt.Sprintf("%s=gres/gpu=%d", l.Limit, l.GPUs)
		where := "account " + l.Account
		if l.User != "" {
			where = "user " + l.User + " in account " + l.Account
			if l.Partition != "" {
				where += " (partition " + l.Partition + ")"
			}
		}
		var why string
		switch {
		case l.Limit == "MaxTRES":
			why = "a per-job cap: a request holds no GPUs of its own"
		case l.Partition != "":
			why = "a limit on a partition: keys have no partition"
		default:
			continue // a user association's own group limit: enforced
		}
		out = append(out, "limit not enforced: "+value+" of "+where+" ("+why+")")
	}
	return out
}
