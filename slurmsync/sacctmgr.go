package slurmsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/sacctmgr"
	"github.com/go-llmflow/llmflow/slurm"
)

// Listing is one sacctmgr output the Sacctmgr source combines. sacctmgr has
// no column for "deleted", "default" is empty in `show assoc`, and
// descriptions are not association columns, so a full tree takes several
// listings (run concurrently):
type Listing int

const (
	// Assocs is the tree itself, deleted associations included, with the
	// accounts' GPU limits (GrpTRESMins, GrpTRES; optional columns):
	//   sacctmgr --parsable2 show assoc withdeleted where cluster=C
	//     format=Cluster,Account,User,Partition,Share,ParentName,GrpTRESMins,GrpTRES,MaxTRES
	Assocs Listing = iota
	// LiveAssocs is the same without withdeleted: associations of Assocs
	// missing here are flagged Deleted.
	LiveAssocs
	// Defaults lists the default associations (is_def):
	//   sacctmgr --parsable2 show assoc onlydefaults where cluster=C format=Account,User,Partition
	Defaults
	// Descriptions: sacctmgr --parsable2 show account withdeleted format=Account,Descr
	Descriptions
	// Organizations: sacctmgr --parsable2 show account withdeleted format=Account,Org
	// (separate from Descriptions: sacctmgr does not escape '|', so each
	// free-text column goes last in its own listing).
	Organizations
	// Coordinators: the account coordinators, who administer in llmflow
	// (roles.go):
	//   sacctmgr --parsable2 show user withcoord format=User,Coord
	// A file may also hold `sacctmgr -P show account withcoord` (see
	// sacctmgr.ParseCoordinators). Without it no coordinator is known.
	Coordinators

	numListings
)

var listingNames = [numListings]string{"assocs", "live-assocs", "defaults", "descriptions", "organizations", "coordinators"}

func (l Listing) String() string {
	if l >= 0 && l < numListings {
		return listingNames[l]
	}
	return "listing(" + strconv.Itoa(int(l)) + ")"
}

// DefaultArgs returns the sacctmgr arguments for listing l of cluster.
// Outputs keep their header line: columns are found by name.
func DefaultArgs(l Listing, cluster string) []string {
	where := []string{"where", "cluster=" + cluster}
	switch l {
	case Assocs, LiveAssocs:
		args := []string{"--parsable2", "show", "assoc"}
		if l == Assocs {
			args = append(args, "withdeleted")
		}
		args = append(args, where...)
		return append(args, "format=Cluster,Account,User,Partition,Share,ParentName,GrpTRESMins,GrpTRES,MaxTRES")
	case Defaults:
		return append(append([]string{"--parsable2", "show", "assoc", "onlydefaults"}, where...),
			"format=Cluster,Account,User,Partition")
	case Descriptions:
		return []string{"--parsable2", "show", "account", "withdeleted", "format=Account,Descr"}
	case Organizations:
		return []string{"--parsable2", "show", "account", "withdeleted", "format=Account,Org"}
	case Coordinators:
		return []string{"--parsable2", "show", "user", "withcoord", "format=User,Coord"}
	}
	return nil
}

// Sacctmgr reads the association tree with sacctmgr, or from files holding
// sacctmgr's output. The zero value plus Cluster runs "sacctmgr" from PATH
// with DefaultArgs for every Listing.
type Sacctmgr struct {
	// Cluster whose tree is read (required).
	Cluster string
	// Path of the sacctmgr binary; default "sacctmgr" (looked up in PATH).
	Path string
	// Args, when non-nil, replaces DefaultArgs: exactly the listings in the
	// map are run, with these arguments (Assocs is required).
	Args map[Listing][]string
	// Files, when non-nil, reads the listings from these files instead of
	// running sacctmgr (Assocs is required; a missing LiveAssocs means
	// nothing is flagged Deleted, a missing Defaults nothing Default).
	// An Assocs file may also be the file `sacctmgr dump CLUSTER file=…`
	// writes (recognised by its content; it has no deleted associations).
	Files map[Listing]string
	// Columns names the columns of Assocs and LiveAssocs listings printed
	// with --noheader (-n), in order, as format= keys or header names;
	// nil: the listings have their header line.
	Columns []string
	// Timeout bounds one Tree call; default 2 minutes.
	Timeout time.Duration
}

// DefaultTimeout is the Sacctmgr timeout when none is set.
const DefaultTimeout = slurm.DefaultTimeout

// String describes the source for logs.
func (s *Sacctmgr) String() string {
	if s.Files != nil {
		return "sacctmgr files " + s.Files[Assocs] + ", cluster " + s.Cluster
	}
	return "sacctmgr (" + s.path() + "), cluster " + s.Cluster
}

func (s *Sacctmgr) path() string { return slurm.Sacctmgr{Path: s.Path}.String() }

// Tree runs (or reads) the listings and combines them.
func (s *Sacctmgr) Tree(ctx context.Context) (*sacctmgr.Tree, error) {
	cluster := strings.ToLower(strings.TrimSpace(s.Cluster))
	if !llmflow.ValidClusterName(cluster) {
		return nil, fmt.Errorf("sacctmgr: invalid cluster name %q", s.Cluster)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var outs [numListings][]byte
	var have [numListings]bool
	var wg sync.WaitGroup
	switch {
	case s.Files != nil:
		for l, f := range s.Files {
			if l < 0 || l >= numListings {
				return nil, fmt.Errorf("sacctmgr: unknown listing %d", l)
			}
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("sacctmgr: %w", err) // names the file
			}
			outs[l], have[l] = b, true
		}
	default:
		args := s.Args
		if args == nil {
			args = make(map[Listing][]string, numListings)
			for l := range numListings {
				args[l] = DefaultArgs(l, cluster)
			}
		}
		runner := slurm.Sacctmgr{Path: s.Path, Timeout: timeout}
		// The first failure stops the other runs and is the one reported.
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		var (
			mu       sync.Mutex
			firstErr error
		)
		for l, a := range args {
			if l < 0 || l >= numListings {
				return nil, fmt.Errorf("sacctmgr: unknown listing %d", l)
			}
			have[l] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := runner.Output(rctx, a...)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
					rcancel()
				}
				outs[l] = out
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
	}
	if !have[Assocs] {
		return nil, errors.New("sacctmgr: no Assocs listing configured")
	}
	var names [numListings]string
	for l := range numListings {
		names[l] = l.String() + " listing"
		if f, ok := s.Files[l]; ok {
			names[l] = f // the admin's file, not our listing's name
		}
	}
	t, err := combine(cluster, outs, have, s.Columns, names)
	if err != nil {
		return nil, fmt.Errorf("sacctmgr: cluster %s: %w", cluster, err)
	}
	return t, nil
}

// combine parses the listings with package sacctmgr and merges them.
func combine(cluster string, outs [numListings][]byte, have [numListings]bool, columns []string, names [numListings]string) (*sacctmgr.Tree, error) {
	opts := sacctmgr.Options{Cluster: cluster, Columns: columns, Limits: true}
	var t *sacctmgr.Tree
	var err error
	if IsDump(outs[Assocs]) {
		if t, err = sacctmgr.ParseDump(outs[Assocs]); err != nil {
			return nil, fmt.Errorf("sacctmgr dump file: %w", err)
		}
		if t.Cluster != "" && t.Cluster != cluster {
			return nil, fmt.Errorf("sacctmgr dump file is of cluster %q, not %q", t.Cluster, cluster)
		}
	} else if t, err = sacctmgr.ParseAssociations(bytes.NewReader(outs[Assocs]), opts); err != nil {
		return nil, fmt.Errorf("%s: %w", names[Assocs], err)
	}
	if have[LiveAssocs] {
		live, err := sacctmgr.ParseAssociations(bytes.NewReader(outs[LiveAssocs]), opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", names[LiveAssocs], err)
		}
		t = sacctmgr.MergeDeleted(live, t)
	}
	if t.Cluster == "" {
		t.Cluster = cluster
	}
	if have[Defaults] {
		o := opts
		o.OnlyDefaults, o.Partial = true, true
		defs, err := sacctmgr.ParseAssociations(bytes.NewReader(outs[Defaults]), o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", names[Defaults], err)
		}
		t.Annotate(nil, defs.Users)
	}
	for _, l := range []Listing{Descriptions, Organizations} {
		if !have[l] {
			continue
		}
		var o sacctmgr.Options
		if hasColumns(outs[l], "Descr", "Org") {
			// Both free-text columns (a capture of the default "show
			// account"): an unescaped '|' is taken to be in Descr.
			o.PipeColumn = "Descr"
		}
		accts, err := sacctmgr.ParseAccounts(bytes.NewReader(outs[l]), o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", names[l], err)
		}
		if l == Descriptions {
			for i := range accts {
				accts[i].Organization = ""
			}
		} else {
			for i := range accts {
				accts[i].Description = ""
			}
		}
		t.Annotate(accts, nil)
	}
	if have[Coordinators] {
		cs, err := sacctmgr.ParseCoordinators(bytes.NewReader(outs[Coordinators]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", names[Coordinators], err)
		}
		t.Coords, t.CoordsKnown = cs, true
	}
	if err := Normalize(t); err != nil {
		return nil, err
	}
	return t, nil
}

// IsDump reports whether data is the file `sacctmgr dump` writes (its first
// line that is neither empty nor a '#' comment is a "Cluster - '…'" line)
// rather than a listing.
func IsDump(data []byte) bool {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		rest, ok := bytes.CutPrefix(line, []byte("Cluster"))
		if !ok {
			return false
		}
		rest = bytes.TrimLeft(rest, " \t")
		return bytes.HasPrefix(rest, []byte("-"))
	}
	return false
}

// ErrNotListingPair is returned by WithDeletedFirst for two listings
// neither of which holds every line of the other.
var ErrNotListingPair = errors.New("neither listing holds every row of the other: " +
	"want the output of one `sacctmgr show assoc` command, with and without withdeleted")

// WithDeletedFirst tells the two listings of one cluster apart, the plain
// `sacctmgr show assoc` and the same with withdeleted (printed with the
// same format=): the withdeleted listing holds every line of the plain one
// and the deleted associations. It reports whether a is the withdeleted
// one (for equal listings, a).
func WithDeletedFirst(a, b []byte) (bool, error) {
	lines := func(d []byte) map[string]bool {
		m := map[string]bool{}
		for _, l := range bytes.Split(d, []byte{'\n'}) {
			if l = bytes.TrimRight(l, "\r"); len(l) > 0 {
				m[string(l)] = true
			}
		}
		return m
	}
	la, lb := lines(a), lines(b)
	within := func(x, y map[string]bool) bool {
		for l := range x {
			if !y[l] {
				return false
			}
		}
		return true
	}
	switch {
	case within(lb, la):
		return true, nil
	case within(la, lb):
		return false, nil
	}
	return false, ErrNotListingPair
}

// hasColumns reports whether the header line of a listing has every column.
func hasColumns(out []byte, cols ...string) bool {
	header, _, _ := bytes.Cut(out, []byte{'\n'})
	fields := strings.Split(strings.TrimRight(string(header), "|\r"), "|")
	for _, c := range cols {
		if !slices.Contains(fields, c) {
			return false
		}
	}
	return true
}
