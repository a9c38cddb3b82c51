package store

import (
	"strconv"
	"strings"
	"time"
)

// A dialect is what the SQL shared by the backends (keys.go, rollup.go)
// needs to know of a backend's SQL. Each backend has one value:
// sqliteDialect and postgresDialect, side by side below.
type dialect struct {
	// numbered: parameters are written $1, $2, … (PostgreSQL) instead of
	// ? (SQLite).
	numbered bool
	// nullHour is the hour of a row summed over a whole range: a NULL of
	// the hour column's type.
	nullHour string
	// sumCast is appended to the sum of an integer column to make it an
	// integer again (PostgreSQL's sum(bigint) is numeric).
	sumCast string
	// nestRollups sums the rollups in two steps when it helps a backend
	// without hash aggregation (see rollupQuery).
	nestRollups bool
	// hour converts a range bound to the hour column's type, rounded up to
	// the next microsecond so that a stored hour is ≥ the bound exactly
	// when it is at or after the time.
	hour func(time.Time) any
	// at converts a time to its column's type (whole microseconds).
	at func(time.Time) any
}

// sqliteDialect: ? parameters, hours as INTEGER unix microseconds, sums of
// integers are integers, no hash aggregation.
var sqliteDialect = dialect{
	nullHour:    "NULL",
	nestRollups: true,
	hour:        func(t time.Time) any { return ceilMicros(t) },
	at:          func(t time.Time) any { return toMicros(t) },
}

// postgresDialect: $n parameters, hours as timestamptz, sums of bigints
// are numeric.
var postgresDialect = dialect{
	numbered: true,
	nullHour: "NULL::timestamptz",
	sumCast:  "::bigint",
	hour:     func(t time.Time) any { return pgBound(t) },
	at:       func(t time.Time) any { return pgTime(t) },
}

// placeholder returns the n-th (1-based) query parameter.
func (d dialect) placeholder(n int) string {
	if d.numbered {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// placeholders returns the parameters from to to (1-based), comma-separated.
func (d dialect) placeholders(from, to int) string {
	var b strings.Builder
	for n := from; n <= to; n++ {
		if n > from {
			b.WriteString(", ")
		}
		b.WriteString(d.placeholder(n))
	}
	return b.String()
}

// sumInt returns the sum of the integer column col, as an integer.
func (d dialect) sumInt(col string) string {
	return "sum(" + col + ")" + d.sumCast
}

// ceilMicros rounds t up to the next microsecond, so that for a stored
// time us (whole microseconds) us >= ceilMicros(t) exactly when the stored
// time is at or after t.
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return us
}
