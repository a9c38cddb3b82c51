package adminapi

import (
	"fmt"
	"math"
	"strconv"
)

// Value is a fair-share figure (AccountShare's LevelFS and FairShare): in
// JSON a number, the string "inf" (or "-inf"), or null for no value.
// String prints it as sshare -P prints doubles.
type Value float64

// String formats v like sshare -P: %f (6 decimals), "inf" for +Inf, empty
// for NaN (no value).
func (v Value) String() string {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return ""
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'f', 6, 64)
}

// MarshalJSON encodes v as a number, "inf" / "-inf", or null for NaN.
func (v Value) MarshalJSON() ([]byte, error) {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return []byte("null"), nil
	case math.IsInf(f, 0):
		return []byte(strconv.Quote(v.String())), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (v *Value) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "null":
		*v = Value(math.NaN())
	case `"inf"`:
		*v = Value(math.Inf(1))
	case `"-inf"`:
		*v = Value(math.Inf(-1))
	default:
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return fmt.Errorf("fair-share value %s: %w", b, err)
		}
		*v = Value(f)
	}
	return nil
}
