// Package reports is the engine behind "llmflow report": Slurm's sreport
// (22.05) command-line grammar and output, byte for byte, computed from
// usage rollups held in memory. It is pure: no network, database or
// process; the caller loads [Data] from wherever it lives (slurmdbd's
// tables, llmflow's own rollups) and passes an io.Writer. TestDeps enforces
// it.
//
// # Reports
//
//	cluster AccountUtilizationByUser   tree of accounts, account rows = subtree sums
//	cluster UserUtilizationByAccount   one row per (user, account), partitions merged
//	cluster Utilization                cluster totals: allocated, down, idle, …
//	user TopUsage                      top users (TopCount=, group)
//
// [ParseArgs] reads sreport's command line (options may come before or after
// the report words, as with GNU getopt); [Run] prints the report.
//
// # What sreport does, and so does Run
//
//   - Start and End are rounded to the nearest hour (a time with 30 s or
//     more rounds the minute up, then 30 min or more rounds the hour up),
//     End is first clamped to Data.Now, the span is at least one hour, and
//     the default period is yesterday 00:00 to today 00:00 (local time).
//   - The rollup table read for a period (slurmdbd's set_usage_information):
//     hour rows if start or end is not at 00:00 local, the span is under a
//     day, or end is after now; month rows if both are on the 1st of a month
//     and the span is over a day; day rows otherwise. Rows are those with
//     start <= row start < end.
//   - Cluster reports print no rows when the cluster has no cluster-usage
//     rows in the period (TopUsage does not check).
//   - An association is printed when it has at least one usage row of any
//     TRES in the period, even if the selected TRES rounds to 0 or is absent;
//     account rows are the sum of every user association below them (deleted
//     ones included).
//   - Tree order: under each account, user rows first (by login; rows of one
//     login keep their order in Data.Assocs, which should be slurmdbd's lft
//     order), then sub-accounts by name.
//   - UserUtilizationByAccount and TopUsage are sorted the way sreport sorts
//     them: by the "cpu" TRES seconds, descending, then login, whatever -T
//     selects (sreport's sort_user_dec "only works for CPUs"), with glibc's
//     merge sort so that ties and records without cpu usage land exactly
//     where sreport puts them.
//   - Numbers: seconds as integers, minutes and hours as C's "%.0f" (round
//     half to even on the binary value), percent "%.2f%%" of the cluster's
//     reported time (alloc+down+planned down+idle+planned).
//   - Table form: sreport's column widths, right-aligned (Account in tree
//     mode is 20 wide, left-aligned), headers truncated to the width, values
//     longer than the width cut with a trailing '+'; the usage columns are 8
//     wide plus one per decimal digit of the largest raw seconds above 10^8
//     (plus 9 for the */Percentage formats).
package reports
