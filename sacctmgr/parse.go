package sacctmgr

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/go-llmflow/llmflow"
)

// Format is the parsable form of a listing.
type Format int

const (
	// FormatAuto detects the form: a header ending in '|' is -p; without
	// a header (Options.Columns), a first line that ends in '|' and has one
	// field more than the columns is -p. Set the format explicitly for -n
	// listings whose first line may hold an unescaped '|'.
	FormatAuto Format = iota
	// FormatParsable2 is --parsable2 (-P): '|' between fields only.
	FormatParsable2
	// FormatParsable is --parsable (-p): also a '|' at the end of every line.
	FormatParsable
)

// Options tells ParseAssociations and ParseAccounts how the listing was
// produced. The zero value reads a -P listing with a header line.
type Options struct {
	// Columns names the columns of a --noheader (-n) listing, in order,
	// as format= keys (Fairshare, ParentName, DefaultAccount, Description…)
	// or as header names (Share, Def Acct, Descr…); case does not matter.
	// Nil means the first line is the header.
	Columns []string

	// Format is the parsable form; FormatAuto detects it.
	Format Format

	// Cluster keeps only the rows of this cluster when the listing has a
	// Cluster column. Empty accepts a listing of one cluster and rejects
	// a listing of several.
	Cluster string

	// PipeColumn names the free-text column (Descr or Org) that takes the
	// extra fields of a line holding an unescaped '|'. Empty means: the
	// listing's only free-text column; with both Descr and Org such a
	// line is an error.
	PipeColumn string

	// Partial accepts a listing that does not carry the whole tree:
	// accounts with no parent information keep an empty Parent (several
	// roots), user rows may name accounts that have no account row, and
	// the Share column may be missing (Shares 0). The result is in tree
	// order as far as it is known; Validate rejects it. Use it for the
	// default "show assoc" columns, "show user withassoc", and as input
	// to Annotate.
	Partial bool

	// OnlyDefaults says the listing is "show assoc onlydefaults": every
	// user row is its user's default association.
	OnlyDefaults bool

	// Limits reads the GrpTRESMins and GrpTRES columns, when the listing
	// has them, into the accounts' Limits (their gres/gpu counts; see
	// ParseTRES). A TRES string that does not parse is an error naming
	// the line.
	Limits bool
}

// ParseError is the error of every parser of this package.
type ParseError struct {
	Line int // 1-based; 0 when the error is about the input as a whole
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line <= 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

func errorf(line int, format string, args ...any) error {
	return &ParseError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

type column int

const (
	colOther column = iota
	colCluster
	colAccount
	colUser
	colPartition
	colShare
	colParentName
	colParentID
	colID
	colLFT
	colRGT
	colDescr
	colOrg
	colDefAcct
	colGrpTRES
	colGrpTRESMins
	colMaxTRES
	numColumns
)

// limitNames are the limit columns as sacctmgr names them.
var limitNames = map[column]string{colGrpTRESMins: "GrpTRESMins", colGrpTRES: "GrpTRES", colMaxTRES: "MaxTRES"}

// columnNames maps header names and format= keys (lower-cased) to columns.
var columnNames = map[string]column{
	"cluster":        colCluster,
	"account":        colAccount,
	"user":           colUser,
	"partition":      colPartition,
	"share":          colShare,
	"shares":         colShare,
	"fairshare":      colShare,
	"parentname":     colParentName,
	"parentid":       colParentID,
	"id":             colID,
	"lft":            colLFT,
	"rgt":            colRGT,
	"descr":          colDescr,
	"description":    colDescr,
	"org":            colOrg,
	"organization":   colOrg,
	"def acct":       colDefAcct,
	"defaultaccount": colDefAcct,
	"grptres":        colGrpTRES,
	"maxtres":        colMaxTRES,
	"grptresmins":    colGrpTRESMins,
}

// layout is what the header (or Options.Columns) says about the fields.
type layout struct {
	n      int             // number of columns
	pos    [numColumns]int // position of each known column, -1 if absent
	names  []string        // the names as given
	pipe   int             // position of the free-text column taking extra '|', -1 if none
	free   []string        // names of the free-text columns
	format Format          // resolved: FormatParsable2 or FormatParsable
	line   int             // line of the header, 0 for Options.Columns
}

func (l *layout) has(c column) bool { return l.pos[c] >= 0 }

func newLayout(names []string, opts Options, line int) (*layout, error) {
	l := &layout{n: len(names), names: names, pipe: -1, line: line}
	for i := range l.pos {
		l.pos[i] = -1
	}
	for i, name := range names {
		key := strings.ToLower(strings.TrimSpace(name))
		if key == "" {
			return nil, errorf(line, "column %d of the header line has no name (a --noheader (-n) listing has no header line: name its columns, the format= it was listed with)", i+1)
		}
		c := columnNames[key]
		if c == colOther {
			continue
		}
		if l.pos[c] >= 0 {
			return nil, errorf(line, "column %q given twice (columns %d and %d)", name, l.pos[c]+1, i+1)
		}
		l.pos[c] = i
		if c == colDescr || c == colOrg {
			l.free = append(l.free, name)
		}
	}
	if opts.PipeColumn != "" {
		c := columnNames[strings.ToLower(strings.TrimSpace(opts.PipeColumn))]
		if c != colDescr && c != colOrg {
			return nil, errorf(line, "PipeColumn %q is not a free-text column (Descr or Org)", opts.PipeColumn)
		}
		if !l.has(c) {
			return nil, errorf(line, "PipeColumn %q is not a column of the listing", opts.PipeColumn)
		}
		l.pipe = l.pos[c]
	} else if len(l.free) == 1 {
		l.pipe = l.pos[columnNames[strings.ToLower(strings.TrimSpace(l.free[0]))]]
	}
	return l, nil
}

// lines iterates over the lines of a listing, keeping line numbers and
// skipping blank lines.
type lines struct {
	data []byte
	num  int
}

func (ls *lines) next() (string, int, bool) {
	for len(ls.data) > 0 {
		ls.num++
		var line []byte
		if i := bytes.IndexByte(ls.data, '\n'); i >= 0 {
			line, ls.data = ls.data[:i], ls.data[i+1:]
		} else {
			line, ls.data = ls.data, nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return string(line), ls.num, true
	}
	return "", ls.num, false
}

func splitFields(dst []string, line string) []string {
	dst = dst[:0]
	for {
		i := strings.IndexByte(line, '|')
		if i < 0 {
			return append(dst, line)
		}
		dst = append(dst, line[:i])
		line = line[i+1:]
	}
}

func isTableRule(s string) bool {
	return strings.Contains(s, "---") && strings.Trim(s, "- ") == ""
}

// reader turns lines into fields according to a layout.
type reader struct {
	ls     lines
	l      *layout
	fields []string
	opts   Options
	first  bool
}

func newReader(data []byte, opts Options) (*reader, error) {
	r := &reader{ls: lines{data: data}, opts: opts}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errorf(0, "empty input (sacctmgr printed nothing: see its stderr and exit status)")
	}
	if opts.Columns != nil {
		if len(opts.Columns) == 0 {
			return nil, errorf(0, "no columns named for a --noheader (-n) listing")
		}
		l, err := newLayout(opts.Columns, opts, 0)
		if err != nil {
			return nil, err
		}
		l.format = opts.Format
		if l.format == FormatAuto {
			// Peek at the first line.
			peek := lines{data: data}
			line, _, _ := peek.next()
			if strings.HasSuffix(line, "|") && strings.Count(line, "|") == l.n {
				l.format = FormatParsable
			} else {
				l.format = FormatParsable2
			}
		}
		r.l = l
		r.first = true
		return r, nil
	}
	header, num, _ := r.ls.next()
	format := opts.Format
	if format == FormatAuto {
		format = FormatParsable2
		if strings.HasSuffix(header, "|") {
			format = FormatParsable
		}
	}
	if format == FormatParsable {
		if !strings.HasSuffix(header, "|") {
			return nil, errorf(num, "header does not end with '|' as --parsable (-p) output does")
		}
		header = header[:len(header)-1]
	}
	if !strings.Contains(header, "|") {
		save := r.ls
		if next, n2, ok := r.ls.next(); ok && isTableRule(next) {
			return nil, errorf(n2, "table output: run sacctmgr with --parsable2 (-P); the table form pads and truncates fields")
		}
		r.ls = save
	}
	l, err := newLayout(splitFields(nil, header), opts, num)
	if err != nil {
		return nil, err
	}
	l.format = format
	r.l = l
	return r, nil
}

// next returns the fields of the next row, exactly l.n of them.
func (r *reader) next() ([]string, int, bool, error) {
	line, num, ok := r.ls.next()
	if !ok {
		return nil, num, false, nil
	}
	l := r.l
	if l.format == FormatParsable {
		if !strings.HasSuffix(line, "|") {
			return nil, num, false, errorf(num, "no '|' at the end of the line as --parsable (-p) output has (truncated line?)")
		}
		line = line[:len(line)-1]
	}
	r.fields = splitFields(r.fields, line)
	f := r.fields
	if r.first {
		r.first = false
		if a := l.pos[colAccount]; a >= 0 && len(f) > a && strings.EqualFold(strings.TrimSpace(f[a]), "account") {
			return nil, num, false, errorf(num, "looks like a header line, but columns were named for a --noheader (-n) listing: name none for a listing with its header")
		}
	}
	switch {
	case len(f) < l.n:
		return nil, num, false, errorf(num, "%d fields for %d columns (truncated line?)", len(f), l.n)
	case len(f) > l.n:
		extra := len(f) - l.n
		if l.pipe < 0 {
			if len(l.free) == 0 {
				return nil, num, false, errorf(num, "%d fields for %d columns, and no free-text column to hold an unescaped '|'", len(f), l.n)
			}
			return nil, num, false, errorf(num, "%d fields for %d columns: an unescaped '|' in %s, cannot tell which (list each free-text column in a sacctmgr command of its own: format=Account,Descr and format=Account,Org)",
				len(f), l.n, strings.Join(l.free, " or "))
		}
		start := 0
		for _, s := range f[:l.pipe] {
			start += len(s) + 1
		}
		end := start + extra
		for _, s := range f[l.pipe : l.pipe+extra+1] {
			end += len(s)
		}
		f[l.pipe] = line[start:end]
		copy(f[l.pipe+1:], f[l.pipe+extra+1:])
		f = f[:l.n]
		r.fields = f
	}
	return f, num, true, nil
}

func (r *reader) get(f []string, c column) string {
	if p := r.l.pos[c]; p >= 0 {
		return f[p]
	}
	return ""
}

// row is one association row of a listing.
type row struct {
	line      int
	depth     int // indentation of the Account field
	account   string
	user      string
	partition string
	parent    string
	descr     string
	org       string
	defAcct   string
	shares    uint32
	useParent bool
	id        uint64
	parentID  uint64
	lft, rgt  uint64
	limits    llmflow.GPULimits
}

func parseShares(s string, line int) (uint32, bool, error) {
	if strings.EqualFold(s, "parent") {
		return ParentShares, true, nil
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, false, errorf(line, "Share %q is neither a number nor \"parent\"", s)
	}
	if v == ParentShares {
		return ParentShares, true, nil
	}
	return uint32(v), false, nil
}

func parseUint(s, what string, line int) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errorf(line, "%s %q is not a number", what, s)
	}
	return v, nil
}

func readAll(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read listing: %w", err)
	}
	return data, nil
}

// parent information methods, in order of preference.
const (
	byNone = iota
	byParentName
	byID
	byNestedSet
	byIndent
)

// ParseAssociations parses "sacctmgr show assoc", "show account withassoc"
// or "show user withassoc" output (see the package documentation) into a
// Tree in tree order. Unless opts.Partial, the Tree is complete and valid:
// Account, User and Share columns present, every account placed under a
// parent of the listing, one root, no cycle. Errors are *ParseError.
func ParseAssociations(r io.Reader, opts Options) (*Tree, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	return parseAssociations(data, opts)
}

func parseAssociations(data []byte, opts Options) (*Tree, error) {
	rd, err := newReader(data, opts)
	if err != nil {
		return nil, err
	}
	l := rd.l
	if !l.has(colAccount) {
		return nil, errorf(l.line, "no Account column")
	}
	if !l.has(colUser) {
		return nil, errorf(l.line, "no User column: \"sacctmgr show account\" lists no associations; use \"sacctmgr show assoc\" (or show account withassoc)")
	}
	if !l.has(colShare) && !opts.Partial {
		return nil, errorf(l.line, "no Share column (format=…,Fairshare)")
	}
	method := byNone
	switch {
	case l.has(colParentName):
		method = byParentName
	case l.has(colID) && l.has(colParentID):
		method = byID
	case l.has(colLFT) && l.has(colRGT):
		method = byNestedSet
	}

	t := &Tree{Cluster: strings.ToLower(opts.Cluster),
		MinutesUnknown: !opts.Limits || !l.has(colGrpTRESMins), GPUsUnknown: !opts.Limits || !l.has(colGrpTRES)}
	clusterLine := 0
	rows := make([]row, 0, bytes.Count(data, []byte{'\n'})+1)
	indented := false
	for {
		f, num, ok, err := rd.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if l.has(colCluster) {
			c := strings.ToLower(strings.TrimSpace(rd.get(f, colCluster)))
			switch {
			case opts.Cluster != "":
				if c != t.Cluster {
					continue
				}
			case clusterLine == 0:
				t.Cluster, clusterLine = c, num
			case c != t.Cluster:
				return nil, errorf(num, "second cluster %q (cluster %q on line %d): list one cluster (where cluster=NAME) or name the cluster to read", c, t.Cluster, clusterLine)
			}
		}
		acct := rd.get(f, colAccount)
		trimmed := strings.TrimLeft(acct, " ")
		x := row{
			line:      num,
			depth:     len(acct) - len(trimmed),
			account:   strings.ToLower(strings.TrimSpace(trimmed)),
			user:      strings.ToLower(strings.TrimSpace(rd.get(f, colUser))),
			partition: strings.ToLower(strings.TrimSpace(rd.get(f, colPartition))),
			descr:     rd.get(f, colDescr),
			org:       rd.get(f, colOrg),
			defAcct:   strings.ToLower(strings.TrimSpace(rd.get(f, colDefAcct))),
		}
		if x.depth > 0 {
			indented = true
		}
		if x.account == "" {
			return nil, errorf(num, "empty Account")
		}
		if l.has(colShare) {
			x.shares, x.useParent, err = parseShares(strings.TrimSpace(rd.get(f, colShare)), num)
			if err != nil {
				return nil, err
			}
		}
		if x.user == "" && opts.Limits {
			if x.limits, err = GPULimits(rd.get(f, colGrpTRESMins), rd.get(f, colGrpTRES), GPUTRES); err != nil {
				return nil, errorf(num, "account %q: %v", x.account, err)
			}
		}
		if opts.Limits {
			cols := []column{colMaxTRES}
			if x.user != "" {
				cols = []column{colGrpTRESMins, colGrpTRES, colMaxTRES}
			}
			for _, c := range cols {
				n, ok, err := GPUCount(rd.get(f, c), GPUTRES)
				if err != nil {
					return nil, errorf(num, "association %q/%q: %s: %v", x.account, x.user, limitNames[c], err)
				}
				if ok {
					t.OtherLimits = append(t.OtherLimits, OtherLimit{Account: x.account, User: x.user, Partition: x.partition, Limit: limitNames[c], GPUs: n})
				}
			}
		}
		if x.user == "" {
			switch method {
			case byParentName:
				x.parent = strings.ToLower(strings.TrimSpace(rd.get(f, colParentName)))
			case byID:
				if x.id, err = parseUint(strings.TrimSpace(rd.get(f, colID)), "ID", num); err != nil {
					return nil, err
				}
				if x.parentID, err = parseUint(strings.TrimSpace(rd.get(f, colParentID)), "ParentID", num); err != nil {
					return nil, err
				}
			case byNestedSet:
				if x.lft, err = parseUint(strings.TrimSpace(rd.get(f, colLFT)), "LFT", num); err != nil {
					return nil, err
				}
				if x.rgt, err = parseUint(strings.TrimSpace(rd.get(f, colRGT)), "RGT", num); err != nil {
					return nil, err
				}
				if x.lft >= x.rgt {
					return nil, errorf(num, "LFT %d is not below RGT %d", x.lft, x.rgt)
				}
			}
		}
		rows = append(rows, x)
	}
	if len(rows) == 0 {
		if opts.Cluster != "" {
			return nil, errorf(0, "no rows of cluster %q", opts.Cluster)
		}
		return nil, errorf(0, "no rows")
	}
	if method == byNone && indented {
		method = byIndent
	}
	return buildTree(t, rows, method, l.has(colPartition), l.has(colDefAcct), opts)
}

type userKey struct{ user, account, partition string }

func buildTree(t *Tree, rows []row, method int, hasPartition, hasDefAcct bool, opts Options) (*Tree, error) {
	nAcct := 0
	for i := range rows {
		if rows[i].user == "" {
			nAcct++
		}
	}
	t.Accounts = make([]Account, 0, nAcct)
	t.Users = make([]User, 0, len(rows)-nAcct)
	acctLine := make([]int, 0, nAcct)
	userLine := make([]int, 0, len(rows)-nAcct)
	acctIdx := make(map[string]int, nAcct)
	userIdx := make(map[userKey]int, len(rows)-nAcct)

	// Accounts first: user rows may come before their account's row
	// ("show account withassoc" sorts by account name only).
	var stack []string // byIndent: account names by depth
	for i := range rows {
		x := &rows[i]
		if method == byIndent {
			if x.user == "" {
				switch {
				case x.depth > len(stack):
					return nil, errorf(x.line, "account %q indented %d, deeper than its parent's indentation + 1", x.account, x.depth)
				case x.depth > 0:
					x.parent = stack[x.depth-1]
				}
				stack = append(stack[:x.depth], x.account)
			} else if x.depth > 0 && (x.depth > len(stack) || stack[x.depth-1] != x.account) {
				return nil, errorf(x.line, "user row of account %q indented %d, not under that account", x.account, x.depth)
			}
		}
		if x.user != "" {
			continue
		}
		if j, dup := acctIdx[x.account]; dup {
			return nil, errorf(x.line, "account %q listed twice (first on line %d)", x.account, acctLine[j])
		}
		acctIdx[x.account] = len(t.Accounts)
		acctLine = append(acctLine, x.line)
		t.Accounts = append(t.Accounts, Account{
			Name: x.account, Parent: x.parent,
			Description: x.descr, Organization: x.org,
			Shares: x.shares, UseParent: x.useParent,
			Limits: x.limits,
		})
	}

	switch method {
	case byID:
		byID := make(map[uint64]string, nAcct)
		for i := range rows {
			if x := &rows[i]; x.user == "" {
				if prev, dup := byID[x.id]; dup {
					return nil, errorf(x.line, "ID %d of account %q is also the ID of %q", x.id, x.account, prev)
				}
				byID[x.id] = x.account
			}
		}
		for i := range rows {
			x := &rows[i]
			if x.user != "" || x.parentID == 0 {
				continue
			}
			p, ok := byID[x.parentID]
			if !ok {
				if opts.Partial {
					continue
				}
				return nil, errorf(x.line, "account %q: ParentID %d is not the ID of an account of the listing", x.account, x.parentID)
			}
			t.Accounts[acctIdx[x.account]].Parent = p
		}
	case byNestedSet:
		order := make([]int, 0, nAcct)
		for i := range rows {
			if rows[i].user == "" {
				order = append(order, i)
			}
		}
		sort.Slice(order, func(a, b int) bool { return rows[order[a]].lft < rows[order[b]].lft })
		var st []int
		for _, i := range order {
			x := &rows[i]
			for len(st) > 0 && rows[st[len(st)-1]].rgt < x.lft {
				st = st[:len(st)-1]
			}
			if len(st) > 0 {
				p := &rows[st[len(st)-1]]
				if x.rgt > p.rgt {
					return nil, errorf(x.line, "account %q: LFT/RGT %d/%d overlap %q's %d/%d", x.account, x.lft, x.rgt, p.account, p.lft, p.rgt)
				}
				t.Accounts[acctIdx[x.account]].Parent = p.account
			}
			st = append(st, i)
		}
	case byNone:
		if nAcct > 1 && !opts.Partial {
			second := 0
			for i := range rows {
				if rows[i].user == "" {
					if second++; second == 2 {
						return nil, errorf(rows[i].line, "cannot place account %q: the listing has no parent information (no ParentName, ID+ParentID or LFT+RGT column, not a tree listing); add ParentName to format=", rows[i].account)
					}
				}
			}
		}
	}

	for i := range rows {
		x := &rows[i]
		if x.user == "" {
			continue
		}
		k := userKey{x.user, x.account, x.partition}
		if j, dup := userIdx[k]; dup {
			u := &t.Users[j]
			if !hasPartition && u.Shares == x.shares && u.UseParent == x.useParent {
				continue // a partition association the listing cannot tell apart
			}
			if !hasPartition {
				return nil, errorf(x.line, "user %q has two associations in account %q (line %d) with different shares, and the listing has no Partition column", x.user, x.account, userLine[j])
			}
			return nil, errorf(x.line, "association of user %q in account %q partition %q listed twice (first on line %d)", x.user, x.account, x.partition, userLine[j])
		}
		userIdx[k] = len(t.Users)
		userLine = append(userLine, x.line)
		t.Users = append(t.Users, User{
			Name: x.user, Account: x.account, Partition: x.partition,
			Shares: x.shares, UseParent: x.useParent,
			Default: opts.OnlyDefaults || (hasDefAcct && x.defAcct == x.account),
		})
	}
	if hasDefAcct && !opts.OnlyDefaults {
		// is_def is set on the partition-less association of the default
		// account when there is one.
		for i := range t.Users {
			u := &t.Users[i]
			if u.Default && u.Partition != "" {
				if _, ok := userIdx[userKey{u.Name, u.Account, ""}]; ok {
					u.Default = false
				}
			}
		}
	}
	if err := check(t, acctLine, userLine, opts.Partial); err != nil {
		return nil, err
	}
	t.Sort()
	return t, nil
}

// ParseAccounts parses "sacctmgr show account" output (Account, Descr, Org
// columns, any order; other columns ignored) into accounts in listing
// order. Parent is set only when the listing has a ParentName column.
// Options.Columns, Format and PipeColumn apply as for ParseAssociations;
// the listing has two free-text columns, so a line with an unescaped '|'
// is an error unless PipeColumn says which one holds it (in practice
// "Descr"). Use the result with Tree.Annotate.
func ParseAccounts(r io.Reader, opts Options) ([]Account, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	rd, err := newReader(data, opts)
	if err != nil {
		return nil, err
	}
	if !rd.l.has(colAccount) {
		return nil, errorf(rd.l.line, "no Account column")
	}
	var accts []Account
	seen := map[string]int{}
	for {
		f, num, ok, err := rd.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if u := strings.TrimSpace(rd.get(f, colUser)); u != "" {
			continue // "show account withassoc": a user row
		}
		name := strings.ToLower(strings.TrimSpace(rd.get(f, colAccount)))
		if name == "" {
			return nil, errorf(num, "empty Account")
		}
		if prev, dup := seen[name]; dup {
			return nil, errorf(num, "account %q listed twice (first on line %d)", name, prev)
		}
		seen[name] = num
		accts = append(accts, Account{
			Name:         name,
			Parent:       strings.ToLower(strings.TrimSpace(rd.get(f, colParentName))),
			Description:  rd.get(f, colDescr),
			Organization: rd.get(f, colOrg),
		})
	}
	if len(accts) == 0 {
		return nil, errorf(0, "no rows")
	}
	return accts, nil
}
