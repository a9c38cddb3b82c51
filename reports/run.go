package reports

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// Period is the time range a request covers once sreport's rules are
// applied, and the rollup granularity it reads.
type Period struct {
	Start, End time.Time // End is exclusive
	Gran       Granularity
}

// Resolve applies sreport's start/end rules to req at now in loc: parse,
// clamp End to now, round both to the nearest hour, default to yesterday,
// at least one hour, and pick the rollup table (slurmdbd's
// set_usage_information).
func Resolve(req Request, now time.Time, loc *time.Location) (Period, error) {
	if loc == nil {
		loc = time.UTC
	}
	var start, end time.Time
	var err error
	if req.Start != "" {
		if start, err = ParseTime(req.Start, now, loc); err != nil {
			return Period{}, err
		}
	}
	if req.End != "" {
		if end, err = ParseTime(req.End, now, loc); err != nil {
			return Period{}, err
		}
		if end.After(now) {
			end = now
		}
	}
	ln := now.In(loc)
	if end.IsZero() {
		end = time.Date(ln.Year(), ln.Month(), ln.Day(), 0, 0, 0, 0, loc)
	} else {
		end = roundHour(end, loc)
	}
	if start.IsZero() {
		start = time.Date(ln.Year(), ln.Month(), ln.Day()-1, 0, 0, 0, 0, loc)
	} else {
		start = roundHour(start, loc)
	}
	if end.Unix()-start.Unix() < 3600 {
		end = start.Add(time.Hour)
	}
	span := end.Unix() - start.Unix()
	st, en := start.In(loc), end.In(loc)
	p := Period{Start: start, End: end, Gran: Day}
	switch {
	case st.Hour() != 0 || en.Hour() != 0 || span < 86400 || end.After(now):
		p.Gran = Hour
	case st.Day() == 1 && en.Day() == 1 && span > 86400:
		p.Gran = Month
	}
	return p, nil
}

// roundHour is slurmdb_report_set_start_end_time's rounding: 30 s or more
// rounds the minute up, then 30 min or more rounds the hour up.
func roundHour(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	h, m := l.Hour(), l.Minute()
	if l.Second() >= 30 {
		m++
	}
	if m >= 30 {
		h++
	}
	return time.Date(l.Year(), l.Month(), l.Day(), h, 0, 0, 0, loc)
}

// ErrNoValidTRES is sreport's error when no name of -T is a TRES of the
// cluster ("-T gpu" rather than "-T gres/gpu").
var ErrNoValidTRES = errors.New("fatal: No valid TRES given")

// Run prints the report req asks for over data, exactly as sreport 22.05
// would print it.
func Run(w io.Writer, req Request, data Data) error {
	if data.Now.IsZero() {
		return errors.New("reports: Data.Now is not set")
	}
	if req.Report < AccountUtilizationByUser || req.Report > TopUsage {
		return fmt.Errorf("reports: unknown report %v", req.Report)
	}
	loc := data.Location
	if loc == nil {
		loc = time.UTC
	}
	fs, err := fields(req, true)
	if err != nil {
		return err
	}
	per, err := Resolve(req, data.Now, loc)
	if err != nil {
		return err
	}
	e, err := newEngine(req, &data, loc, per)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	p := &printer{w: bw, out: req.Output}
	switch req.Report {
	case AccountUtilizationByUser:
		e.accountByUser(p, fs)
	case UserUtilizationByAccount:
		e.userByAccount(p, fs)
	case Utilization:
		e.utilization(p, fs)
	case TopUsage:
		e.topUsage(p, fs)
	}
	return bw.Flush()
}

type engine struct {
	req  Request
	d    *Data
	loc  *time.Location
	per  Period
	tres []string
	sel  []int // selected TRES, in -T order (id order for the default and "all")
	cpu  int   // index of "cpu", -1 if none
	// sortT is the TRES users are sorted by (sreport's sort_user_tres_id):
	// cpu, except for TopUsage's final sort (the first selected TRES).
	sortT int
	nrg   int // index of "energy", -1 if none

	clusterSel bool // the cluster passes cluster=/-M
	clusterOK  bool // and has cluster usage rows in the period
	cl         []clusterSum

	nt    int
	asum  []uint64 // per association × TRES
	aseen []bool   // per association × TRES: a row exists
	ahas  []bool   // per association: any row in the period
}

type clusterSum struct {
	seen                                      bool
	count, recs                               uint64
	alloc, down, pdown, idle, plan, over, rep uint64
}

func newEngine(req Request, d *Data, loc *time.Location, per Period) (*engine, error) {
	e := &engine{req: req, d: d, loc: loc, per: per, cpu: -1, sortT: -1, nrg: -1}
	base := d.TRES
	if base == nil {
		base = DefaultTRES
	}
	idx := make(map[string]int, len(base)+4)
	add := func(name string) int {
		if i, ok := idx[name]; ok {
			return i
		}
		idx[name] = len(e.tres)
		e.tres = append(e.tres, name)
		return len(e.tres) - 1
	}
	for _, t := range base {
		add(t)
	}
	lo, hi := per.Start.Unix(), per.End.Unix()
	in := func(t time.Time) bool { u := t.Unix(); return u >= lo && u < hi }

	e.clusterSel = req.AllClusters || len(req.Clusters) == 0
	for _, c := range req.Clusters {
		if strings.EqualFold(c, d.Cluster) {
			e.clusterSel = true
		}
	}
	type crow struct {
		t int
		r *ClusterRow
	}
	var crows []crow
	for i := range d.ClusterUsage[per.Gran] {
		r := &d.ClusterUsage[per.Gran][i]
		if in(r.Start) {
			crows = append(crows, crow{add(r.TRES), r})
		}
	}
	rows := d.Usage[per.Gran]
	if e.clusterSel {
		// First pass: the TRES names, so that the sums can be flat arrays.
		last := ""
		for i := range rows {
			r := &rows[i]
			if r.TRES == last || !in(r.Start) {
				continue
			}
			if r.Assoc < 0 || r.Assoc >= len(d.Assocs) {
				return nil, fmt.Errorf("reports: %s usage row %d: association %d out of range", per.Gran, i, r.Assoc)
			}
			last = r.TRES
			add(r.TRES)
		}
	}
	e.nt = len(e.tres)
	e.cl = make([]clusterSum, e.nt)
	if e.clusterSel {
		for _, c := range crows {
			s := &e.cl[c.t]
			s.seen = true
			s.recs++
			s.count += c.r.Count
			s.alloc += c.r.Alloc
			s.down += c.r.Down
			s.pdown += c.r.PlannedDown
			s.idle += c.r.Idle
			s.plan += c.r.Planned
			s.over += c.r.Over
			e.clusterOK = true
		}
	}
	for i := range e.cl {
		s := &e.cl[i]
		s.rep = s.alloc + s.down + s.pdown + s.idle + s.plan
		if s.recs > 0 {
			s.count /= s.recs
		}
	}
	e.asum = make([]uint64, len(d.Assocs)*e.nt)
	e.aseen = make([]bool, len(d.Assocs)*e.nt)
	e.ahas = make([]bool, len(d.Assocs))
	if e.clusterSel {
		last, lastIdx := "", -1
		for i := range rows {
			r := &rows[i]
			if !in(r.Start) {
				continue
			}
			if r.Assoc < 0 || r.Assoc >= len(d.Assocs) {
				return nil, fmt.Errorf("reports: %s usage row %d: association %d out of range", per.Gran, i, r.Assoc)
			}
			if lastIdx < 0 || r.TRES != last {
				last, lastIdx = r.TRES, idx[r.TRES]
			}
			k := r.Assoc*e.nt + lastIdx
			e.asum[k] += r.Secs
			e.aseen[k] = true
			e.ahas[r.Assoc] = true
		}
	}
	if i, ok := idx["cpu"]; ok {
		e.cpu = i
		e.sortT = i
	}
	if i, ok := idx["energy"]; ok {
		e.nrg = i
	}
	if req.TRES == nil {
		if e.cpu >= 0 {
			e.sel = []int{e.cpu}
		}
	} else if slices.ContainsFunc(req.TRES, func(s string) bool { return strings.EqualFold(s, "all") }) {
		for i := range e.tres { // every TRES, in id order
			e.sel = append(e.sel, i)
		}
	} else {
		// In -T's order, as sreport's tres_list (a real capture with
		// -T node,cpu prints node first, and TopUsage sorts by node).
		for _, want := range req.TRES {
			for i, t := range e.tres {
				if strings.EqualFold(want, t) && !slices.Contains(e.sel, i) {
					e.sel = append(e.sel, i)
					break
				}
			}
		}
		if len(e.sel) == 0 {
			// sreport drops the names its TRES table lacks, and with
			// none left fails (sreport -T gpu: exit 1)
			return nil, ErrNoValidTRES
		}
	}
	return e, nil
}

// headerBlock prints the 4 lines above the column names.
func (e *engine) headerBlock(p *printer, title string, secs bool) {
	if e.req.NoHeader {
		return
	}
	const dashes = "--------------------------------------------------------------------------------\n"
	const layout = "2006-01-02T15:04:05"
	p.w.WriteString(dashes)
	p.w.WriteString(title)
	p.w.WriteByte(' ')
	p.w.WriteString(e.per.Start.In(e.loc).Format(layout))
	p.w.WriteString(" - ")
	p.w.WriteString(e.per.End.Add(-time.Second).In(e.loc).Format(layout))
	if secs {
		fmt.Fprintf(p.w, " (%d secs)", int32(e.per.End.Unix()-e.per.Start.Unix()))
	}
	p.w.WriteByte('\n')
	if e.req.Time == Percent {
		p.w.WriteString("Usage reported in " + e.req.Time.name() + "\n")
	} else {
		unit := "CPU"
		if e.req.TRES != nil {
			unit = "TRES"
		}
		p.w.WriteString("Usage reported in " + unit + " " + e.req.Time.name() + "\n")
	}
	p.w.WriteString(dashes)
}

func (e *engine) columns(p *printer, fs []field) {
	if !e.req.NoHeader {
		p.header(fs)
	}
}

// setUsageWidths is sreport_set_usage_column_width: the width of the
// (last) Used and Energy columns from one record's TRES.
func (e *engine) setUsageWidths(fs []field, secs func(t int) (uint64, bool)) {
	var used, energy *field
	for i := range fs {
		switch fs[i].kind {
		case fUsed:
			used = &fs[i]
		case fEnergy:
			energy = &fs[i]
		}
	}
	var maxUsage, maxEnergy uint64
	if secs != nil {
		if energy != nil {
			if e.cpu >= 0 {
				if v, ok := secs(e.cpu); ok {
					maxUsage = v
				}
			}
			if e.nrg >= 0 {
				if v, ok := secs(e.nrg); ok {
					maxEnergy = v
				}
			}
		} else {
			for _, t := range e.sel {
				if v, ok := secs(t); ok && v > maxUsage {
					maxUsage = v
				}
			}
		}
	}
	if used != nil {
		used.len = usageWidth(maxUsage, e.req.Time)
	}
	if energy != nil {
		energy.len = usageWidth(maxEnergy, e.req.Time)
	}
}

func (e *engine) clusterSecs(t int) (uint64, bool) {
	if !e.cl[t].seen {
		return 0, false
	}
	return e.cl[t].rep, true
}

func (e *engine) properName(login string) (string, bool) {
	if login == "" || e.d.ProperName == nil {
		return "", true
	}
	return e.d.ProperName(login), false
}

// node is an association in sreport's hierarchical order.
type node struct {
	acct  int // index in Data.Accounts, or -1 for a user association
	assoc int // index in Data.Assocs, or -1 for an account
}

// hierarchy returns the selected associations in sreport's tree order
// (slurmdb_get_hierarchical_sorted_assoc_list): an association whose parent
// is not selected is at the top level; siblings are user associations
// first, by login (ties keep Data.Assocs order), then accounts by name.
func (e *engine) hierarchy(accSel, userSel func(int) bool) []node {
	d := e.d
	byName := make(map[string]int, len(d.Accounts))
	for i, a := range d.Accounts {
		if accSel(i) {
			if _, dup := byName[a.Name]; !dup {
				byName[a.Name] = i
			}
		}
	}
	kids := make(map[int][]node) // parent account index (or -1) -> children
	for i, a := range d.Accounts {
		if !accSel(i) || byName[a.Name] != i {
			continue
		}
		par := -1
		if p, ok := byName[a.Parent]; ok && a.Parent != "" && p != i {
			par = p
		}
		kids[par] = append(kids[par], node{acct: i, assoc: -1})
	}
	for i, a := range d.Assocs {
		if !userSel(i) {
			continue
		}
		par := -1
		if p, ok := byName[a.Account]; ok {
			par = p
		}
		kids[par] = append(kids[par], node{acct: -1, assoc: i})
	}
	less := func(x, y node) bool {
		if (x.assoc >= 0) != (y.assoc >= 0) {
			return x.assoc >= 0
		}
		if x.assoc >= 0 {
			return d.Assocs[x.assoc].User < d.Assocs[y.assoc].User
		}
		return d.Accounts[x.acct].Name < d.Accounts[y.acct].Name
	}
	for _, ks := range kids {
		sort.SliceStable(ks, func(i, j int) bool { return less(ks[i], ks[j]) })
	}
	out := make([]node, 0, len(d.Assocs)+len(d.Accounts))
	visited := make([]bool, len(d.Accounts))
	var walk func(par int)
	walk = func(par int) {
		for _, n := range kids[par] {
			out = append(out, n)
			if n.acct >= 0 && !visited[n.acct] {
				visited[n.acct] = true
				walk(n.acct)
			}
		}
	}
	walk(-1)
	return out
}

// subtreeSums returns, per account, the usage of every user association
// below it (the lft/rgt join slurmdbd does) and whether it has any row.
func (e *engine) subtreeSums() ([]uint64, []bool) {
	d := e.d
	nt := e.nt
	sum := make([]uint64, len(d.Accounts)*nt)
	has := make([]bool, len(d.Accounts))
	byName := make(map[string]int, len(d.Accounts))
	for i, a := range d.Accounts {
		if _, dup := byName[a.Name]; !dup {
			byName[a.Name] = i
		}
	}
	// Add each user association's usage to its account and every ancestor.
	depthGuard := len(d.Accounts) + 1
	for i, a := range d.Assocs {
		if !e.ahas[i] {
			continue
		}
		src := e.asum[i*nt : (i+1)*nt]
		name := a.Account
		for step := 0; step < depthGuard; step++ {
			ai, ok := byName[name]
			if !ok {
				break
			}
			has[ai] = true
			dst := sum[ai*nt : (ai+1)*nt]
			for t, v := range src {
				dst[t] += v
			}
			name = d.Accounts[ai].Parent
			if name == "" {
				break
			}
		}
	}
	return sum, has
}

func (e *engine) accountByUser(p *printer, fs []field) {
	d := e.d
	req := e.req
	e.headerBlock(p, "Cluster/Account/User Utilization", true)
	nt := e.nt
	inSub := make([]bool, len(d.Accounts))
	if len(req.Accounts) > 0 {
		children := make(map[string][]int)
		for i, a := range d.Accounts {
			children[a.Parent] = append(children[a.Parent], i)
		}
		var mark func(i, depth int)
		mark = func(i, depth int) {
			if inSub[i] || depth > len(d.Accounts) {
				return
			}
			inSub[i] = true
			for _, c := range children[d.Accounts[i].Name] {
				mark(c, depth+1)
			}
		}
		for i, a := range d.Accounts {
			if inList(req.Accounts, a.Name) {
				mark(i, 0)
			}
		}
	}
	subOK := make(map[string]bool)
	for i, a := range d.Accounts {
		if len(req.Accounts) == 0 || inSub[i] {
			subOK[a.Name] = true
		}
	}
	accSel := func(i int) bool { return len(req.Users) == 0 && subOK[d.Accounts[i].Name] }
	userSel := func(i int) bool {
		a := d.Assocs[i]
		if len(req.Users) > 0 && !inList(req.Users, a.User) {
			return false
		}
		return len(req.Accounts) == 0 || subOK[a.Account]
	}
	var order []node
	var accSum []uint64
	var accHas []bool
	if e.clusterOK {
		order = e.hierarchy(accSel, userSel)
		accSum, accHas = e.subtreeSums()
	}
	secsOf := func(n node) []uint64 {
		if n.assoc >= 0 {
			return e.asum[n.assoc*nt : (n.assoc+1)*nt]
		}
		return accSum[n.acct*nt : (n.acct+1)*nt]
	}
	rows := order[:0]
	for _, n := range order {
		if (n.assoc >= 0 && e.ahas[n.assoc]) || (n.acct >= 0 && accHas[n.acct]) {
			rows = append(rows, n)
		}
	}
	switch {
	case len(rows) > 0:
		s := secsOf(rows[0])
		var seen []bool
		if rows[0].assoc >= 0 {
			seen = e.aseen[rows[0].assoc*nt : (rows[0].assoc+1)*nt]
		}
		e.setUsageWidths(fs, func(t int) (uint64, bool) {
			if seen != nil {
				return s[t], seen[t]
			}
			return s[t], true
		})
	case e.clusterOK:
		e.setUsageWidths(fs, e.clusterSecs)
	default:
		e.setUsageWidths(fs, nil)
	}
	e.columns(p, fs)
	spaces := make(map[string]int)
	for _, n := range rows {
		var acct, user, treeName string
		if n.assoc >= 0 {
			a := d.Assocs[n.assoc]
			acct, user = a.Account, a.User
		} else {
			acct = d.Accounts[n.acct].Name
		}
		if req.Tree {
			if n.assoc >= 0 {
				sp := 0
				if s, ok := spaces[acct]; ok {
					sp = s + 1
				}
				treeName = strings.Repeat(" ", sp) + acct
			} else if s, ok := spaces[acct]; ok {
				treeName = strings.Repeat(" ", s) + acct
			} else {
				sp := 0
				if s, ok := spaces[d.Accounts[n.acct].Parent]; ok && d.Accounts[n.acct].Parent != "" {
					sp = s + 1
				}
				spaces[acct] = sp
				treeName = strings.Repeat(" ", sp) + acct
			}
		} else {
			treeName = acct
		}
		secs := secsOf(n)
		for _, t := range e.sel {
			for i, f := range fs {
				last := i == len(fs)-1
				switch f.kind {
				case fAcct:
					p.str(f, treeName, false, last)
				case fCluster:
					p.str(f, d.Cluster, false, last)
				case fLogin:
					p.str(f, user, user == "", last)
				case fProper:
					name, null := e.properName(user)
					p.str(f, name, null, last)
				case fUsed:
					p.str(f, timeStr(secs[t], e.cl[t].rep, e.req.Time), false, last)
				case fEnergy:
					var v, c uint64
					if e.nrg >= 0 {
						v, c = secs[e.nrg], e.cl[e.nrg].rep
					}
					p.str(f, timeStr(v, c, e.req.Time), false, last)
				case fTRESName:
					p.str(f, e.tres[t], false, last)
				default:
					p.str(f, "", true, last)
				}
			}
			p.w.WriteByte('\n')
		}
	}
}

// urec is sreport's slurmdb_report_user_rec_t.
type urec struct {
	name  string
	acct  string   // UserUtilizationByAccount
	accts []string // TopUsage
	secs  []uint64
	seen  []bool
	any   bool
}

func (r *urec) add(e *engine, assoc int) {
	nt := e.nt
	for t := 0; t < nt; t++ {
		k := assoc*nt + t
		if e.aseen[k] {
			r.secs[t] += e.asum[k]
			r.seen[t] = true
			r.any = true
		}
	}
}

// cmpUser is sreport's sort_user_dec: seconds of the TRES e.sortT
// (sort_user_tres_id, cpu unless TopUsage set it) descending (records
// without that TRES sort after, as its comparator says), then login.
func (e *engine) cmpUser(a, b *urec) int {
	if !e.req.SortName {
		if !a.any || !b.any {
			return 0
		}
		t := e.sortT
		if t < 0 || !a.seen[t] {
			return 1
		}
		if !b.seen[t] {
			return -1
		}
		if a.secs[t] > b.secs[t] {
			return -1
		} else if a.secs[t] < b.secs[t] {
			return 1
		}
	}
	return strings.Compare(a.name, b.name)
}

func (e *engine) sortUsers(recs []*urec) {
	msort(recs, e.cmpUser)
}

func (e *engine) userWidths(fs []field, recs []*urec) {
	switch {
	case len(recs) > 0:
		r := recs[0]
		e.setUsageWidths(fs, func(t int) (uint64, bool) { return r.secs[t], r.seen[t] })
	case e.clusterOK:
		e.setUsageWidths(fs, e.clusterSecs)
	default:
		e.setUsageWidths(fs, nil)
	}
}

func (e *engine) printUser(p *printer, fs []field, r *urec, acct string) {
	for _, t := range e.sel {
		for i, f := range fs {
			last := i == len(fs)-1
			switch f.kind {
			case fAcct:
				p.str(f, acct, false, last)
			case fCluster:
				p.str(f, e.d.Cluster, false, last)
			case fLogin:
				p.str(f, r.name, false, last)
			case fProper:
				name, null := e.properName(r.name)
				p.str(f, name, null, last)
			case fUsed:
				p.str(f, timeStr(r.secs[t], e.cl[t].rep, e.req.Time), false, last)
			case fEnergy:
				var v, c uint64
				if e.nrg >= 0 {
					v, c = r.secs[e.nrg], e.cl[e.nrg].rep
				}
				p.str(f, timeStr(v, c, e.req.Time), false, last)
			case fTRESName:
				p.str(f, e.tres[t], false, last)
			default:
				p.str(f, "", true, last)
			}
		}
		p.w.WriteByte('\n')
	}
}

func (e *engine) newRec(name string) *urec {
	return &urec{name: name, secs: make([]uint64, e.nt), seen: make([]bool, e.nt)}
}

func (e *engine) userByAccount(p *printer, fs []field) {
	d := e.d
	req := e.req
	e.headerBlock(p, "Cluster/User/Account Utilization", true)
	var recs []*urec
	if e.clusterOK {
		accSel := func(i int) bool {
			return len(req.Users) == 0 && (len(req.Accounts) == 0 || inList(req.Accounts, d.Accounts[i].Name))
		}
		userSel := func(i int) bool {
			a := d.Assocs[i]
			return (len(req.Users) == 0 || inList(req.Users, a.User)) &&
				(len(req.Accounts) == 0 || inList(req.Accounts, a.Account))
		}
		type key struct{ user, acct string }
		byKey := make(map[key]*urec)
		for _, n := range e.hierarchy(accSel, userSel) {
			if n.assoc < 0 || !e.ahas[n.assoc] {
				continue
			}
			a := d.Assocs[n.assoc]
			k := key{a.User, a.Account}
			r := byKey[k]
			if r == nil {
				r = e.newRec(a.User)
				r.acct = a.Account
				byKey[k] = r
				recs = append(recs, r)
			}
			r.add(e, n.assoc)
		}
		e.sortUsers(recs)
	}
	e.userWidths(fs, recs)
	e.columns(p, fs)
	for _, r := range recs {
		e.printUser(p, fs, r, r.acct)
	}
}

func (e *engine) topUsage(p *printer, fs []field) {
	d := e.d
	req := e.req
	top := req.TopCount
	if top == 0 {
		top = 10
	}
	e.headerBlock(p, fmt.Sprintf("Top %d Users", uint32(top)), true)
	byUser := make(map[string][]int)
	var logins []string
	for i, a := range d.Assocs {
		if _, ok := byUser[a.User]; !ok {
			logins = append(logins, a.User)
		}
		byUser[a.User] = append(byUser[a.User], i)
	}
	sort.Strings(logins)
	var recs []*urec
	for _, u := range logins {
		if u == "" || (len(req.Users) > 0 && !inList(req.Users, u)) {
			continue
		}
		var grp *urec
		for _, i := range byUser[u] {
			a := d.Assocs[i]
			if !e.ahas[i] || (len(req.Accounts) > 0 && !inList(req.Accounts, a.Account)) {
				continue
			}
			var r *urec
			if req.Group {
				if grp == nil {
					grp = e.newRec(u)
					recs = append(recs, grp)
				}
				r = grp
			} else {
				r = e.newRec(u)
				recs = append(recs, r)
			}
			if !inListExact(r.accts, a.Account) {
				r.accts = append(r.accts, a.Account)
			}
			r.add(e, i)
		}
	}
	// sreport sorts the list once by cpu to size the Used column, and
	// once more before printing by the first TRES of its list (the first
	// of -T): user_top sets sort_user_tres_id to it.
	e.sortUsers(recs)
	e.userWidths(fs, recs)
	e.columns(p, fs)
	if len(e.sel) > 0 {
		e.sortT = e.sel[0]
	}
	e.sortUsers(recs)
	e.sortT = e.cpu
	for n, r := range recs {
		e.printUser(p, fs, r, strings.Join(r.accts, ", "))
		if n+1 >= top {
			break
		}
	}
}

func (e *engine) utilization(p *printer, fs []field) {
	e.headerBlock(p, "Cluster Utilization", false)
	var tot clusterSum
	var shown []int
	if e.clusterOK {
		for _, t := range e.sel {
			s := e.cl[t]
			if !s.seen {
				continue
			}
			shown = append(shown, t)
			tot.alloc = max(tot.alloc, s.alloc)
			tot.down = max(tot.down, s.down)
			tot.idle = max(tot.idle, s.idle)
			tot.plan = max(tot.plan, s.plan)
			tot.over = max(tot.over, s.over)
			tot.pdown = max(tot.pdown, s.pdown)
			tot.rep = max(tot.rep, s.rep)
		}
	}
	tf := e.req.Time
	for i := range fs {
		switch fs[i].kind {
		case fAlloc, fEnergy:
			fs[i].len = usageWidth(tot.alloc, tf)
		case fDown:
			fs[i].len = usageWidth(tot.down, tf)
		case fIdle:
			fs[i].len = usageWidth(tot.idle, tf)
		case fPlan:
			fs[i].len = usageWidth(tot.plan, tf)
		case fOver:
			fs[i].len = usageWidth(tot.over, tf)
		case fPDown:
			fs[i].len = usageWidth(tot.pdown, tf)
		case fReported:
			fs[i].len = usageWidth(tot.rep, tf)
		}
	}
	e.columns(p, fs)
	total := uint64(e.per.End.Unix() - e.per.Start.Unix())
	for _, t := range shown {
		s := e.cl[t]
		for i, f := range fs {
			last := i == len(fs)-1
			switch f.kind {
			case fCluster:
				p.str(f, e.d.Cluster, false, last)
			case fCount:
				p.str(f, itoa(int64(s.count)), false, last)
			case fAlloc:
				p.str(f, timeStr(s.alloc, s.rep, tf), false, last)
			case fDown:
				p.str(f, timeStr(s.down, s.rep, tf), false, last)
			case fIdle:
				p.str(f, timeStr(s.idle, s.rep, tf), false, last)
			case fPlan:
				p.str(f, timeStr(s.plan, s.rep, tf), false, last)
			case fOver:
				p.str(f, timeStr(s.over, s.rep, tf), false, last)
			case fPDown:
				p.str(f, timeStr(s.pdown, s.rep, tf), false, last)
			case fReported:
				p.str(f, timeStr(s.rep, total*s.count, tf), false, last)
			case fEnergy:
				var c uint64
				if e.nrg >= 0 {
					c = e.cl[e.nrg].count
				}
				p.str(f, timeStr(c, c, tf), false, last)
			case fTRESName:
				p.str(f, e.tres[t], false, last)
			default:
				p.str(f, "", true, last)
			}
		}
		p.w.WriteByte('\n')
	}
}

func inList(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func inListExact(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// msort is glibc's qsort for arrays that fit in memory: a top-down merge
// sort that takes from the left run while cmp(left, right) <= 0. sreport's
// comparators are not always consistent, so the algorithm decides where
// ties and incomparable records land; this reproduces it.
func msort[T any](a []T, cmp func(x, y T) int) {
	if len(a) < 2 {
		return
	}
	tmp := make([]T, len(a))
	msortRec(a, tmp, cmp)
}

func msortRec[T any](b, tmp []T, cmp func(x, y T) int) {
	n := len(b)
	if n <= 1 {
		return
	}
	n1 := n / 2
	msortRec(b[:n1], tmp, cmp)
	msortRec(b[n1:], tmp, cmp)
	i, j, k := 0, n1, 0
	for i < n1 && j < n {
		if cmp(b[i], b[j]) <= 0 {
			tmp[k] = b[i]
			i++
		} else {
			tmp[k] = b[j]
			j++
		}
		k++
	}
	k += copy(tmp[k:], b[i:n1])
	copy(b, tmp[:k])
}
