package reports_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow/reports"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args string
		want reports.Request
	}{
		{"OptionsAfterWords", "-P cluster AccountUtilizationByUser start=2026-10-01 end=2026-11-01 -T gres/gpu -t hours",
			reports.Request{Report: reports.AccountUtilizationByUser, Start: "2026-10-01", End: "2026-11-01",
				TRES: []string{"gres/gpu"}, Time: reports.Hours, Output: reports.Parsable2}},
		{"Abbreviations", "-pn cl a S=2026-10-01 E=2026-10-02 ac=etaba,lab-chem u=bob tree --tres=cpu,gres/gpu -tHourPer",
			reports.Request{Report: reports.AccountUtilizationByUser, Start: "2026-10-01", End: "2026-10-02",
				Accounts: []string{"etaba", "lab-chem"}, Users: []string{"bob"}, Tree: true,
				TRES: []string{"cpu", "gres/gpu"}, Time: reports.HourPer, Output: reports.Parsable, NoHeader: true}},
		{"BareWordIsUser", "cluster UserUtilizationByAccount alice",
			reports.Request{Report: reports.UserUtilizationByAccount, Users: []string{"alice"}}},
		{"UA", "cluster ua", reports.Request{Report: reports.UserUtilizationByAccount}},
		{"UtilizationBareWordIsCluster", "cluster Utilization hgx --cluster other -t p",
			reports.Request{Report: reports.Utilization, Clusters: []string{"other", "hgx"}, Time: reports.Percent}},
		{"TopUsage", "user TopUsage TopCount=3 group format=Login,Used%12 -s name",
			reports.Request{Report: reports.TopUsage, TopCount: 3, Group: true, Format: []string{"Login", "Used%12"}, SortName: true}},
		{"TopCountNegative", "user top topcount=-1", reports.Request{Report: reports.TopUsage, TopCount: 4294967295}},
		{"Seconds", "cluster util -t s", reports.Request{Report: reports.Utilization, Time: reports.Seconds}},
		{"DoubleDash", "-P -- cluster Utilization", reports.Request{Report: reports.Utilization, Output: reports.Parsable2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := reports.ParseArgs(strings.Fields(tc.args))
			if err != nil {
				t.Fatalf("ParseArgs(%s): %v", tc.args, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseArgs(%s) (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}

func TestParseArgs_Errors(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"", "no command"},
		{"cluster", "too few arguments for keyword:cluster"},
		{"frobnicate x", "invalid keyword: frobnicate"},
		{"cluster Nope", "Not valid report Nope"},
		{"user Bottom", "Not valid report Bottom"},
		{"cluster AccountUtilizationByUser colour=red", "Unknown condition: colour=red\nUse keyword set to modify value"},
		{"cluster AccountUtilizationByUser -t fortnights", "unknown time format fortnights"},
		{"cluster AccountUtilizationByUser format=Account,Bogus", "Unknown field 'Bogus'"},
		{"cluster AccountUtilizationByUser start=yesterday-ish", "Invalid time specification: yesterday-ish"},
		{"cluster Utilization -T", "option requires an argument -- 'T'"},
		{"cluster Utilization --bogus", "unrecognized option '--bogus'"},
		{"cluster Utilization --par", "option '--par' is ambiguous"},
		{"cluster Utilization -x", "invalid option -- 'x'"},
		{"user TopUsage TopCount=abc", "Invalid value for TopCount (abc)"},
		{"cluster WCKeyUtilizationByUser", "not supported"},
	} {
		_, err := reports.ParseArgs(strings.Fields(tc.args))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArgs(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	now := time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC)
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse("2006-01-02T15:04:05", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		start, end         string
		wantStart, wantEnd string
		want               reports.Granularity
	}{
		{"2026-10-01", "2026-11-01", "2026-10-01T00:00:00", "2026-11-01T00:00:00", reports.Month},
		{"2026-10-05", "2026-10-08", "2026-10-05T00:00:00", "2026-10-08T00:00:00", reports.Day},
		{"2026-10-01", "2026-11-15", "2026-10-01T00:00:00", "2026-11-15T00:00:00", reports.Day},
		{"2026-10-05T10:00:00", "2026-10-05T15:00:00", "2026-10-05T10:00:00", "2026-10-05T15:00:00", reports.Hour},
		{"2026-10-12", "2026-10-13", "2026-10-12T00:00:00", "2026-10-13T00:00:00", reports.Day},
		// Rounding: 30 s rounds the minute up, 30 min the hour.
		{"2026-10-05T10:29:30", "2026-10-05T15:29:29", "2026-10-05T11:00:00", "2026-10-05T15:00:00", reports.Hour},
		// Span at least one hour.
		{"2026-10-05T10:00:00", "2026-10-05T10:10:00", "2026-10-05T10:00:00", "2026-10-05T11:00:00", reports.Hour},
		{"2026-10-05T10:00:00", "2026-10-04", "2026-10-05T10:00:00", "2026-10-05T11:00:00", reports.Hour},
		// End clamped to now (07:30, rounded to 08:00), hence the hour table.
		{"2026-11-01", "2026-12-01", "2026-11-01T00:00:00", "2026-11-30T08:00:00", reports.Hour},
		// Defaults: yesterday.
		{"", "", "2026-11-29T00:00:00", "2026-11-30T00:00:00", reports.Day},
		{"", "2026-11-30", "2026-11-29T00:00:00", "2026-11-30T00:00:00", reports.Day},
		// A single day on the 1st is a day, not a month.
		{"2026-10-01", "2026-10-02", "2026-10-01T00:00:00", "2026-10-02T00:00:00", reports.Day},
	} {
		p, err := reports.Resolve(reports.Request{Start: tc.start, End: tc.end}, now, time.UTC)
		if err != nil {
			t.Fatalf("Resolve(%s, %s): %v", tc.start, tc.end, err)
		}
		if !p.Start.Equal(at(tc.wantStart)) || !p.End.Equal(at(tc.wantEnd)) || p.Gran != tc.want {
			t.Errorf("Resolve(%s, %s) = %v – %v %v, want %s – %s %v", tc.start, tc.end,
				p.Start, p.End, p.Gran, tc.wantStart, tc.wantEnd, tc.want)
		}
	}
}

func TestResolve_TimeZone(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	now := time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC)
	p, err := reports.Resolve(reports.Request{Start: "2026-10-01", End: "2026-11-01"}, now, paris)
	if err != nil {
		t.Fatal(err)
	}
	// October in Paris: 31 days and one hour (DST ends on Oct 25).
	if got := p.End.Sub(p.Start); got != 31*24*time.Hour+time.Hour || p.Gran != reports.Month {
		t.Errorf("span %v %v, want 745h month", got, p.Gran)
	}
}

func TestGECOSName(t *testing.T) {
	for in, want := range map[string]string{
		"Alice Martin,,,": "Alice Martin",
		"Bob":             "Bob",
		",x,y":            "x",
		",,,":             ",,,",
		"":                "",
	} {
		if got := reports.GECOSName(in); got != want {
			t.Errorf("GECOSName(%q) = %q, want %q", in, got, want)
		}
	}
}
