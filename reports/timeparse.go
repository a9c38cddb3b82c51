package reports

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseTime parses the start= and end= forms of Slurm's parse_time that
// reports use, in loc, relative to now:
//
//	YYYY-MM-DD[THH:MM[:SS]]   2026-10-01, 2026-10-05T10:00:00
//	MM/DD[/YY|/YYYY]          10/01/26 (current year when omitted)
//	MMDDYY                    100126
//	HH:MM[:SS]                today at that time
//	now[{+|-}N[seconds|minutes|hours|days|weeks]]   (default unit: seconds)
//	today, midnight           today 00:00
//	noon, fika, teatime       today 12:00, 15:00, 16:00
//	tomorrow                  tomorrow 00:00
func ParseTime(s string, now time.Time, loc *time.Location) (time.Time, error) {
	if loc == nil {
		loc = time.UTC
	}
	//lint:ignore ST1005 sreport's own message, byte for byte
	bad := fmt.Errorf("Invalid time specification: %s", s)
	now = now.In(loc)
	day := func(off int, h int) time.Time {
		return time.Date(now.Year(), now.Month(), now.Day()+off, h, 0, 0, 0, loc)
	}
	low := strings.ToLower(strings.TrimSpace(s))
	switch low {
	case "today", "midnight":
		return day(0, 0), nil
	case "noon":
		return day(0, 12), nil
	case "fika":
		return day(0, 15), nil
	case "teatime":
		return day(0, 16), nil
	case "tomorrow":
		return day(1, 0), nil
	}
	if rest, ok := strings.CutPrefix(low, "now"); ok {
		if rest == "" {
			return now, nil
		}
		sign := 1
		switch rest[0] {
		case '+':
		case '-':
			sign = -1
		default:
			return time.Time{}, bad
		}
		rest = rest[1:]
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i > 9 {
			return time.Time{}, bad
		}
		n, _ := strconv.Atoi(rest[:i])
		unit := time.Second
		switch u := rest[i:]; {
		case u == "" || strings.HasPrefix("seconds", u) && u[0] == 's':
		case strings.HasPrefix("minutes", u):
			unit = time.Minute
		case strings.HasPrefix("hours", u):
			unit = time.Hour
		case strings.HasPrefix("days", u):
			unit = 24 * time.Hour
		case strings.HasPrefix("weeks", u):
			unit = 7 * 24 * time.Hour
		default:
			return time.Time{}, bad
		}
		return now.Add(time.Duration(sign*n) * unit), nil
	}
	num := func(p string, lo, hi int) (int, bool) {
		if p == "" || len(p) > 4 {
			return 0, false
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return 0, false
			}
		}
		n, _ := strconv.Atoi(p)
		return n, n >= lo && n <= hi
	}
	clock := func(p string) (h, m, sec int, ok bool) {
		parts := strings.Split(p, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return 0, 0, 0, false
		}
		var ok1, ok2, ok3 bool
		h, ok1 = num(parts[0], 0, 23)
		m, ok2 = num(parts[1], 0, 59)
		ok3 = true
		if len(parts) == 3 {
			sec, ok3 = num(parts[2], 0, 59)
		}
		return h, m, sec, ok1 && ok2 && ok3
	}
	date := func(y, mo, d int) (time.Time, bool) {
		if mo < 1 || mo > 12 || d < 1 || d > 31 {
			return time.Time{}, false
		}
		t := time.Date(y, time.Month(mo), d, 0, 0, 0, 0, loc)
		return t, t.Day() == d
	}
	datePart, clockPart, hasClock := strings.Cut(low, "t")
	switch {
	case strings.Count(datePart, "-") == 2:
		p := strings.Split(datePart, "-")
		y, ok1 := num(p[0], 1970, 9999)
		mo, ok2 := num(p[1], 1, 12)
		d, ok3 := num(p[2], 1, 31)
		if len(p[0]) != 4 || !ok1 || !ok2 || !ok3 {
			return time.Time{}, bad
		}
		t, ok := date(y, mo, d)
		if !ok {
			return time.Time{}, bad
		}
		if hasClock {
			if clockPart == "" {
				return t, nil
			}
			h, m, sec, ok := clock(clockPart)
			if !ok {
				// YYYY-MM-DDTHH
				if hh, ok := num(clockPart, 0, 23); ok && len(clockPart) <= 2 {
					h, m, sec = hh, 0, 0
				} else {
					return time.Time{}, bad
				}
			}
			t = time.Date(y, time.Month(mo), d, h, m, sec, 0, loc)
		}
		return t, nil
	case !hasClock && strings.Contains(low, "/"):
		p := strings.Split(low, "/")
		if len(p) < 2 || len(p) > 3 {
			return time.Time{}, bad
		}
		mo, ok1 := num(p[0], 1, 12)
		d, ok2 := num(p[1], 1, 31)
		y := now.Year()
		ok3 := true
		if len(p) == 3 {
			y, ok3 = num(p[2], 0, 9999)
			if len(p[2]) <= 2 {
				y += 2000
			}
		}
		t, ok := date(y, mo, d)
		if !ok1 || !ok2 || !ok3 || !ok {
			return time.Time{}, bad
		}
		return t, nil
	case !hasClock && strings.Contains(low, ":"):
		h, m, sec, ok := clock(low)
		if !ok {
			return time.Time{}, bad
		}
		return time.Date(now.Year(), now.Month(), now.Day(), h, m, sec, 0, loc), nil
	case !hasClock && len(low) == 6:
		mo, ok1 := num(low[0:2], 1, 12)
		d, ok2 := num(low[2:4], 1, 31)
		y, ok3 := num(low[4:6], 0, 99)
		t, ok := date(2000+y, mo, d)
		if !ok1 || !ok2 || !ok3 || !ok {
			return time.Time{}, bad
		}
		return t, nil
	}
	return time.Time{}, bad
}
