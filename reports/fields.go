package reports

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

type fieldKind int

const (
	fNone fieldKind = iota
	fAcct
	fAlloc
	fCluster
	fDown
	fIdle
	fLogin
	fOver
	fPlan
	fPDown
	fProper
	fQOS
	fQOSID
	fReported
	fCount
	fTRESName
	fUsed
	fWCKey
	fEnergy
)

// field is sreport's print_field_t: a column, its header and its width
// (negative: left-aligned).
type field struct {
	kind fieldKind
	name string
	len  int
}

// fields returns the columns of req: its format= list or the report's
// default, with sreport's names and widths.
func fields(req Request, strict bool) ([]field, error) {
	format := req.Format
	if len(format) == 0 {
		withTRES := req.TRES != nil
		switch req.Report {
		case AccountUtilizationByUser:
			format = pick(withTRES, "Cluster,Ac,Login,Proper,TresName,Used", "Cluster,Ac,Login,Proper,Used,Energy")
		case UserUtilizationByAccount:
			format = pick(withTRES, "Cluster,Login,Proper,Ac,TresName,Used", "Cluster,Login,Proper,Ac,Used,Energy")
		case Utilization:
			format = pick(withTRES, "Cl,TresName,al,d,planneddown,i,res,rep", "Cl,al,d,planneddown,i,res,rep")
		case TopUsage:
			format = pick(withTRES, "Cl,L,P,A,TresName,Used", "Cl,L,P,A,U,Energy")
		}
	}
	per := req.Time.per()
	w := func(plain, withPer int) int {
		if per {
			return withPer
		}
		return plain
	}
	var out []field
	for _, obj := range format {
		newlen := 0
		if i := strings.IndexByte(obj, '%'); i >= 0 {
			newlen = atoi(obj[i+1:])
			obj = obj[:i]
		}
		var f field
		if req.Report == TopUsage {
			switch {
			case prefixFold(obj, "Accounts", 1):
				f = field{fAcct, "Account", 15}
			case prefixFold(obj, "Cluster", 1):
				f = field{fCluster, "Cluster", 9}
			case prefixFold(obj, "Energy", 1):
				f = field{fEnergy, "Energy", w(10, 18)}
			case prefixFold(obj, "Login", 1):
				f = field{fLogin, "Login", 9}
			case prefixFold(obj, "Proper", 1):
				f = field{fProper, "Proper Name", 15}
			case prefixFold(obj, "TresName", 5):
				f = field{fTRESName, "TRES Name", 14}
			case prefixFold(obj, "Used", 1):
				f = field{fUsed, "Used", w(10, 18)}
			}
		} else {
			switch {
			case prefixFold(obj, "Accounts", 2):
				f = field{fAcct, "Account", 15}
				if req.Tree {
					f.len = -20
				}
			case prefixFold(obj, "allocated", 2):
				f = field{fAlloc, "Allocated", w(12, 20)}
			case prefixFold(obj, "Cluster", 2):
				f = field{fCluster, "Cluster", 9}
			case prefixFold(obj, "down", 1):
				f = field{fDown, "Down", w(10, 18)}
			case prefixFold(obj, "idle", 1):
				f = field{fIdle, "Idle", w(12, 20)}
			case prefixFold(obj, "Login", 1):
				f = field{fLogin, "Login", 9}
			case prefixFold(obj, "overcommitted", 1):
				f = field{fOver, "Over Comm", w(9, 18)}
			case prefixFold(obj, "planned", 2), prefixFold(obj, "reserved", 3):
				f = field{fPlan, "Planned", w(9, 18)}
			case prefixFold(obj, "PlannedDown", 2), prefixFold(obj, "PLNDDown", 2):
				f = field{fPDown, "PLND Down", w(10, 18)}
			case prefixFold(obj, "Proper", 2):
				f = field{fProper, "Proper Name", 15}
			case prefixFold(obj, "QOS", 1):
				f = field{fQOS, "QOS", 12}
			case prefixFold(obj, "QOSID", 4):
				f = field{fQOSID, "QOS ID", 8}
			case prefixFold(obj, "reported", 3):
				f = field{fReported, "Reported", w(12, 20)}
			case prefixFold(obj, "TresCount", 5), prefixFold(obj, "cpucount", 2), prefixFold(obj, "count", 2):
				f = field{fCount, "TRES Count", 10}
			case prefixFold(obj, "TresName", 5):
				f = field{fTRESName, "TRES Name", 14}
			case prefixFold(obj, "Used", 1):
				f = field{fUsed, "Used", w(10, 18)}
			case prefixFold(obj, "WCKey", 2):
				f = field{fWCKey, "WCKey", 15}
				if req.Tree {
					f.len = 20
				}
			case prefixFold(obj, "Energy", 1):
				f = field{fEnergy, "Energy", w(10, 18)}
			}
		}
		if f.kind == fNone {
			if strict {
				//lint:ignore ST1005 sreport's own message, byte for byte
				return nil, fmt.Errorf("Unknown field '%s'", obj)
			}
			continue
		}
		if newlen != 0 {
			f.len = newlen
		}
		out = append(out, f)
	}
	return out, nil
}

func pick(cond bool, a, b string) []string {
	if cond {
		return strings.Split(a, ",")
	}
	return strings.Split(b, ",")
}

// atoi is C's atoi: optional sign and leading digits, 0 otherwise.
func atoi(s string) int {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' && j-i < 9 {
		j++
	}
	n, _ := strconv.Atoi(s[:j])
	return n
}

// usageWidth is sreport_set_usage_col_width: 8, plus one per decimal
// digit of the raw seconds above 10^8, plus 9 for the */Percentage formats.
func usageWidth(number uint64, tf TimeFormat) int {
	n := 8
	const maxOrder = uint64(100000000) * 100000000000
	for order := uint64(100000000); order < maxOrder; order *= 10 {
		if number < order {
			break
		}
		n++
	}
	if tf.per() {
		n += 9
	}
	return n
}

// timeStr is sreport_get_time_str: value in the request's unit.
func timeStr(value, total uint64, tf TimeFormat) string {
	if total == 0 {
		total = 1
	}
	pct := float64(value) / float64(total) * 100
	switch tf {
	case Seconds:
		return strconv.FormatUint(value, 10)
	case Hours:
		return strconv.FormatFloat(float64(value)/3600, 'f', 0, 64)
	case Percent:
		return strconv.FormatFloat(pct, 'f', 2, 64) + "%"
	case SecPer:
		return strconv.FormatUint(value, 10) + "(" + strconv.FormatFloat(pct, 'f', 2, 64) + "%)"
	case MinPer:
		return strconv.FormatFloat(float64(value)/60, 'f', 0, 64) + "(" + strconv.FormatFloat(pct, 'f', 2, 64) + "%)"
	case HourPer:
		return strconv.FormatFloat(float64(value)/3600, 'f', 0, 64) + "(" + strconv.FormatFloat(pct, 'f', 2, 64) + "%)"
	}
	return strconv.FormatFloat(float64(value)/60, 'f', 0, 64)
}

// printer writes fields as print_fields_str and print_fields_header do.
type printer struct {
	w   *bufio.Writer
	out Output
}

func (p *printer) header(fs []field) {
	for i, f := range fs {
		last := i == len(fs)-1
		switch {
		case p.out == Parsable2 && last:
			p.w.WriteString(f.name)
		case p.out != Table:
			p.w.WriteString(f.name)
			p.w.WriteByte('|')
		default:
			p.pad(f.len, f.name)
		}
	}
	p.w.WriteByte('\n')
	if p.out != Table {
		return
	}
	for _, f := range fs {
		for range abs(f.len) {
			p.w.WriteByte('-')
		}
		p.w.WriteByte(' ')
	}
	p.w.WriteByte('\n')
}

// str prints one value; null is C's NULL (" " in a table).
func (p *printer) str(f field, v string, null, last bool) {
	switch {
	case p.out == Parsable2 && last:
		p.w.WriteString(v)
		return
	case p.out != Table:
		p.w.WriteString(v)
		p.w.WriteByte('|')
		return
	}
	n := abs(f.len)
	if null {
		v = " "
	} else if len(v) > n && n > 0 {
		v = v[:n-1] + "+"
	}
	p.pad(f.len, v)
}

// pad is printf("%*.*s ", len, abs(len), v).
func (p *printer) pad(width int, v string) {
	n := abs(width)
	if len(v) > n {
		v = v[:n]
	}
	if width >= 0 {
		for range n - len(v) {
			p.w.WriteByte(' ')
		}
		p.w.WriteString(v)
	} else {
		p.w.WriteString(v)
		for range n - len(v) {
			p.w.WriteByte(' ')
		}
	}
	p.w.WriteByte(' ')
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
