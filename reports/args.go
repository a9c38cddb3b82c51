package reports

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Report is the report a Request asks for.
type Report int

const (
	AccountUtilizationByUser Report = iota + 1 // cluster AccountUtilizationByUser
	UserUtilizationByAccount                   // cluster UserUtilizationByAccount
	Utilization                                // cluster Utilization
	TopUsage                                   // user TopUsage
)

func (r Report) String() string {
	switch r {
	case AccountUtilizationByUser:
		return "AccountUtilizationByUser"
	case UserUtilizationByAccount:
		return "UserUtilizationByAccount"
	case Utilization:
		return "Utilization"
	case TopUsage:
		return "TopUsage"
	}
	return "Report(" + itoa(int64(r)) + ")"
}

// TimeFormat is sreport's -t: the unit of the usage columns.
type TimeFormat int

const (
	Minutes TimeFormat = iota // default
	Seconds
	Hours
	Percent
	SecPer  // seconds(percentage)
	MinPer  // minutes(percentage)
	HourPer // hours(percentage)
)

func (f TimeFormat) name() string {
	switch f {
	case Seconds:
		return "Seconds"
	case Hours:
		return "Hours"
	case Percent:
		return "Percentage of Total"
	case SecPer:
		return "Seconds/Percentage of Total"
	case MinPer:
		return "Minutes/Percentage of Total"
	case HourPer:
		return "Hours/Percentage of Total"
	}
	return "Minutes"
}

func (f TimeFormat) per() bool { return f == SecPer || f == MinPer || f == HourPer }

// Output is the output form: sreport's table, -p or -P.
type Output int

const (
	Table     Output = iota // fixed-width columns (default)
	Parsable                // -p: '|' after every field, the last one too
	Parsable2               // -P: '|' between fields
)

// Request is a parsed sreport command line. The zero value (with Report
// set) is sreport's defaults: yesterday, CPU minutes, table form.
type Request struct {
	Report Report

	// Start and End are the start= and end= values as given, parsed by
	// Run against Data.Now and Data.Location (see ParseTime). Empty means
	// sreport's default: yesterday 00:00 to today 00:00.
	Start, End string

	// TRES is -T/--tres: TRES names matched case-insensitively ("ALL"
	// selects every TRES). Nil means -T was not given: the cpu TRES only,
	// "CPU" in the header and an Energy column.
	TRES []string

	Time     TimeFormat
	Output   Output
	NoHeader bool // -n: no header block and no column names
	SortName bool // -s name: sort user lists by login only

	AllClusters bool     // -a / all_clusters
	Clusters    []string // -M and cluster=: nil means Data.Cluster

	Accounts []string // accounts=
	Users    []string // users= (or bare words)
	Format   []string // format=, as given (e.g. "Account", "Used%12")
	Tree     bool     // tree (AccountUtilizationByUser)
	TopCount int      // TopCount=; 0 means 10
	Group    bool     // group (TopUsage)
}

// ParseArgs parses sreport's arguments (without the program name), e.g.
//
//	-P cluster AccountUtilizationByUser start=2026-10-01 end=2026-11-01 -T gres/gpu -t hours
//
// Options may appear anywhere (GNU getopt permutes them); keywords are
// case-insensitive and may be abbreviated as sreport allows. Errors use
// sreport's wording where it has one.
func ParseArgs(args []string) (Request, error) {
	var req Request
	var words []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			words = append(words, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			words = append(words, a)
			continue
		}
		next := func(opt string) (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("option requires an argument -- '%s'", opt)
			}
			i++
			return args[i], nil
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			long, err := matchLong(name)
			if err != nil {
				return req, err
			}
			if long.arg && !hasVal {
				v, err := next(long.name)
				if err != nil {
					return req, err
				}
				val = v
			} else if !long.arg && hasVal {
				return req, fmt.Errorf("option '--%s' doesn't allow an argument", long.name)
			}
			if err := req.option(long.short, val); err != nil {
				return req, err
			}
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 'M', 's', 't', 'T':
				val := a[j+1:]
				if val == "" {
					v, err := next(string(c))
					if err != nil {
						return req, err
					}
					val = v
				}
				if err := req.option(c, val); err != nil {
					return req, err
				}
				j = len(a)
			default:
				if err := req.option(c, ""); err != nil {
					return req, err
				}
			}
		}
	}
	if len(words) == 0 {
		return req, errors.New("no command: sreport's interactive mode is not supported")
	}
	kw := words[0]
	switch {
	case prefixFold(kw, "cluster", 2):
		if len(words) < 2 {
			return req, fmt.Errorf("too few arguments for keyword:%s", kw)
		}
		rep := words[1]
		switch {
		case len(rep) >= 1 && strings.EqualFold(rep[:1], "a"):
			req.Report = AccountUtilizationByUser
		case hasPrefixFold(rep, "UserUtilizationByAccount", 18), hasPrefixFold(rep, "UA", 2):
			req.Report = UserUtilizationByAccount
		case hasPrefixFold(rep, "UserUtilizationByWckey", 18), hasPrefixFold(rep, "UW", 2),
			len(rep) >= 1 && strings.EqualFold(rep[:1], "w"):
			return req, fmt.Errorf("report %s: WCKey reports are not supported", rep)
		case hasPrefixFold(rep, "Utilization", 2):
			req.Report = Utilization
		default:
			//lint:ignore ST1005 sreport's own message, byte for byte
			return req, fmt.Errorf("Not valid report %s\nValid cluster reports are, \"AccountUtilizationByUser\", \"UserUtilizationByAccount\", \"UserUtilizationByWckey\", \"Utilization\", and \"WCKeyUtilizationByUser\"", rep)
		}
	case prefixFold(kw, "user", 1):
		if len(words) < 2 {
			return req, fmt.Errorf("too few arguments for keyword:%s", kw)
		}
		if rep := words[1]; len(rep) == 0 || !strings.EqualFold(rep[:1], "t") {
			//lint:ignore ST1005 sreport's own message, byte for byte
			return req, fmt.Errorf("Not valid report %s\nValid user reports are, \"Top\"", rep)
		}
		req.Report = TopUsage
	case prefixFold(kw, "job", 1), prefixFold(kw, "reservation", 2), prefixFold(kw, "resv", 2),
		prefixFold(kw, "association", 1):
		return req, fmt.Errorf("%s reports are not supported", kw)
	default:
		return req, fmt.Errorf("invalid keyword: %s", kw)
	}
	for _, w := range words[2:] {
		if err := req.condition(w); err != nil {
			return req, err
		}
	}
	if err := req.check(); err != nil {
		return req, err
	}
	return req, nil
}

type longOpt struct {
	name  string
	short byte
	arg   bool
}

var longOpts = []longOpt{
	{"all_clusters", 'a', false},
	{"cluster", 'M', true},
	{"help", 'h', false},
	{"noheader", 'n', false},
	{"parsable", 'p', false},
	{"parsable2", 'P', false},
	{"quiet", 'Q', false},
	{"sort", 's', true},
	{"tres", 'T', true},
	{"usage", 'h', false},
	{"verbose", 'v', false},
	{"version", 'V', false},
}

// matchLong resolves a long option or an unambiguous prefix of one.
func matchLong(name string) (longOpt, error) {
	var found []longOpt
	for _, o := range longOpts {
		if o.name == name {
			return o, nil
		}
		if name != "" && strings.HasPrefix(o.name, name) {
			found = append(found, o)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if len(found) > 1 {
		return longOpt{}, fmt.Errorf("option '--%s' is ambiguous", name)
	}
	return longOpt{}, fmt.Errorf("unrecognized option '--%s'\nTry \"sreport --help\" for more information", name)
}

func (r *Request) option(c byte, val string) error {
	switch c {
	case 'a':
		r.AllClusters = true
	case 'M':
		r.Clusters = addList(r.Clusters, val)
	case 'n':
		r.NoHeader = true
	case 'p':
		r.Output = Parsable
	case 'P':
		r.Output = Parsable2
	case 'Q', 'v':
		// quiet / verbose: no effect on the report
	case 's':
		switch {
		case prefixFold(val, "Name", 1):
			r.SortName = true
		case prefixFold(val, "Time", 6):
			r.SortName = false
		default:
			return fmt.Errorf("unknown timesort format %s", val)
		}
	case 't':
		f, err := parseTimeFormat(val)
		if err != nil {
			return err
		}
		r.Time = f
	case 'T':
		r.TRES = []string{}
		for _, t := range strings.Split(val, ",") {
			if t != "" {
				r.TRES = append(r.TRES, t)
			}
		}
	case 'h':
		return errors.New("sreport --help is not a report")
	case 'V':
		return errors.New("sreport --version is not a report")
	default:
		return fmt.Errorf("invalid option -- '%c'\nTry \"sreport --help\" for more information", c)
	}
	return nil
}

func parseTimeFormat(s string) (TimeFormat, error) {
	switch {
	case prefixFold(s, "SecPer", 6):
		return SecPer, nil
	case prefixFold(s, "MinPer", 6):
		return MinPer, nil
	case prefixFold(s, "HourPer", 6):
		return HourPer, nil
	case prefixFold(s, "Seconds", 1):
		return Seconds, nil
	case prefixFold(s, "Minutes", 1):
		return Minutes, nil
	case prefixFold(s, "Hours", 1):
		return Hours, nil
	case prefixFold(s, "Percent", 1):
		return Percent, nil
	}
	return 0, fmt.Errorf("unknown time format %s", s)
}

// condition parses one report condition as sreport's _set_assoc_cond,
// _set_cluster_cond and (user) _set_cond do.
func (r *Request) condition(arg string) error {
	name, val, hasEq := strings.Cut(arg, "=")
	if !hasEq {
		name = arg
	}
	//lint:ignore ST1005 sreport's own message, byte for byte
	unknown := fmt.Errorf("Unknown condition: %s\nUse keyword set to modify value", arg)
	if !hasEq && prefixFold(name, "all_clusters", 1) {
		r.AllClusters = true
		return nil
	}
	switch r.Report {
	case Utilization:
		switch {
		case !hasEq || prefixFold(name, "Clusters", 1):
			r.Clusters = addList(r.Clusters, val0(hasEq, val, arg))
		case prefixFold(name, "End", 1):
			r.End = val
		case prefixFold(name, "Format", 1):
			r.Format = addList(r.Format, val)
		case prefixFold(name, "Start", 1):
			r.Start = val
		default:
			return unknown
		}
	case TopUsage:
		switch {
		case !hasEq && prefixFold(name, "group", 1):
			r.Group = true
		case !hasEq || prefixFold(name, "Users", 1):
			r.Users = addList(r.Users, val0(hasEq, val, arg))
		case prefixFold(name, "Accounts", 2), prefixFold(name, "Acct", 4):
			r.Accounts = addList(r.Accounts, val)
		case prefixFold(name, "Clusters", 1):
			r.Clusters = addList(r.Clusters, val)
		case prefixFold(name, "End", 1):
			r.End = val
		case prefixFold(name, "Format", 1):
			r.Format = addList(r.Format, val)
		case prefixFold(name, "Start", 1):
			r.Start = val
		case prefixFold(name, "TopCount", 1):
			n, err := getUint(val, "TopCount")
			if err != nil {
				return err
			}
			r.TopCount = n
		default:
			return unknown
		}
	default:
		switch {
		case !hasEq && prefixFold(name, "Tree", 4):
			r.Tree = true
		case !hasEq || prefixFold(name, "Users", 1):
			r.Users = addList(r.Users, val0(hasEq, val, arg))
		case prefixFold(name, "Accounts", 2), prefixFold(name, "Acct", 4):
			r.Accounts = addList(r.Accounts, val)
		case prefixFold(name, "Clusters", 1):
			r.Clusters = addList(r.Clusters, val)
		case prefixFold(name, "End", 1):
			r.End = val
		case prefixFold(name, "Format", 1):
			r.Format = addList(r.Format, val)
		case prefixFold(name, "QosLevel", 1):
			return errors.New("QosLevel is not supported")
		case prefixFold(name, "Start", 1):
			r.Start = val
		default:
			return unknown
		}
	}
	return nil
}

// check validates what sreport would only discover while running: time
// specifications and format fields.
func (r *Request) check() error {
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []string{r.Start, r.End} {
		if s == "" {
			continue
		}
		if _, err := ParseTime(s, now, time.UTC); err != nil {
			return err
		}
	}
	if len(r.Format) > 0 {
		if _, err := fields(*r, true); err != nil {
			return err
		}
	}
	return nil
}

func val0(hasEq bool, val, arg string) string {
	if hasEq {
		return val
	}
	return arg
}

// getUint is sreport's get_uint: strtol, an error only when nothing was a
// number; a negative value means "unlimited" (INFINITE).
func getUint(s, what string) (int, error) {
	s = strings.Trim(s, "\"'")
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		if s[:i] == "" || s[:i] == "-" || s[:i] == "+" {
			if s == "" {
				return 0, nil
			}
			//lint:ignore ST1005 sreport's own message, byte for byte
			return 0, fmt.Errorf("Invalid value for %s (%s)", what, s)
		}
		//lint:ignore ST1005 sreport's own message, byte for byte
		return 0, fmt.Errorf("Invalid value for %s (%s)", what, s)
	}
	if n < 0 {
		return 4294967295, nil
	}
	if n > 4294967295 {
		n &= 0xFFFFFFFF
	}
	return int(n), nil
}

// addList is slurm_addto_char_list: comma-separated, quotes stripped,
// duplicates (case-insensitive) dropped.
func addList(list []string, s string) []string {
	if len(s) > 0 && (s[0] == '"' || s[0] == '\'') {
		s = s[1:]
	}
	if i := strings.IndexAny(s, "\"'"); i >= 0 {
		s = s[:i]
	}
	for _, name := range strings.Split(s, ",") {
		if name == "" {
			continue
		}
		dup := false
		for _, have := range list {
			if strings.EqualFold(have, name) {
				dup = true
				break
			}
		}
		if !dup {
			list = append(list, name)
		}
	}
	if list == nil {
		list = []string{}
	}
	return list
}

// prefixFold is strncasecmp(s, full, MAX(len(s), min)) == 0: s is a
// case-insensitive prefix of full at least min bytes long (or all of it).
func prefixFold(s, full string, min int) bool {
	n := max(len(s), min)
	if n > len(full) {
		return false
	}
	if len(s) < n {
		return false
	}
	return strings.EqualFold(s[:n], full[:n])
}

// hasPrefixFold is strncasecmp(s, full, n) == 0 for a fixed n.
func hasPrefixFold(s, full string, n int) bool {
	if len(s) < n {
		return strings.EqualFold(s, full[:min(n, len(full))]) && len(s) == len(full)
	}
	return strings.EqualFold(s[:n], full[:n])
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
