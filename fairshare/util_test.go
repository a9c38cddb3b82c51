package fairshare

import "strconv"

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
func itoa(v int64) string { return strconv.FormatInt(v, 10) }
