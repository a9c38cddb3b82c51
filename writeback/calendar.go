package writeback

import (
	"fmt"
	"time"
)

// slurmdbd buckets usage by its own local time zone (localtime_r and
// mktime in as_mysql_rollup.c): an hour row starts at a local hour, a day
// row at local midnight, a month row at local midnight of the 1st. The
// functions here do the same in a given *time.Location, which must be
// slurmdbd's zone (TZ of the slurmdbd process).

// dayStart returns the local midnight starting t's day in loc.
func dayStart(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, loc)
}

// monthStart returns local midnight of the 1st of t's month in loc.
func monthStart(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), 1, 0, 0, 0, 0, loc)
}

// nextDay and nextMonth step a day or month start (23, 24 or 25 hours
// across daylight-saving changes, as mktime does).
func nextDay(d time.Time) time.Time   { return d.AddDate(0, 0, 1) }
func nextMonth(m time.Time) time.Time { return m.AddDate(0, 1, 0) }

// checkZone fails when loc's offset is not a whole number of hours at some
// hour in [from, to): slurmdbd's hours are then not UTC hours, and
// llmflow's UTC hourly rollups cannot be placed in them.
func checkZone(from, to time.Time, loc *time.Location) error {
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		if _, off := h.In(loc).Zone(); off%3600 != 0 {
			return fmt.Errorf("time zone %s is %+d minutes from UTC at %s: slurmdbd's hours would not be UTC hours (only whole-hour offsets are supported)",
				loc, off/60, h.Format(time.RFC3339))
		}
	}
	return nil
}
