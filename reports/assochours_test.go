package reports

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow"
)

// TestFromAssocHours: the tree under root in its order, an account gone
// from the tree under root as deleted, user associations in the tree's
// order then by user, hour/day/month rows summed in the time zone, and
// cluster rows for the ended hours served only.
func TestFromAssocHours(t *testing.T) {
	loc := time.FixedZone("UTC+1", 3600)
	h := func(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t.UTC() }
	tree := llmflow.Accounts{
		{Name: "root", Kind: llmflow.KindRoot},
		{Name: "EtabA", Kind: llmflow.KindOrg},
		{Name: "lab", Parent: "EtabA", Kind: llmflow.KindTeam},
	}
	rows := []llmflow.AssocHour{
		{Account: "lab", User: "zoe", Hour: h("2026-11-30T22:00:00Z"), AllocSecs: 100},
		{Account: "lab", User: "amy", Hour: h("2026-11-30T23:00:00Z"), AllocSecs: 50},
		{Account: "etaba", User: "amy", Hour: h("2026-11-30T23:00:00Z"), AllocSecs: 10},
		{Account: "gone", User: "bob", Hour: h("2026-11-30T23:00:00Z"), AllocSecs: 5},
	}
	p := Period{Start: h("2026-11-30T21:00:00Z"), End: h("2026-12-01T02:00:00Z"), Gran: Hour}
	now := h("2026-12-01T00:30:00Z")
	d := FromAssocHours(tree, rows, 2, "hgx", p, now, loc, h("2026-11-30T22:00:00Z"))

	wantAccts := []Account{{Name: "root"}, {Name: "etaba", Parent: "root"}, {Name: "lab", Parent: "etaba"}, {Name: "gone", Parent: "root", Deleted: true}}
	if diff := cmp.Diff(wantAccts, d.Accounts); diff != "" {
		t.Errorf("accounts (-want +got):\n%s", diff)
	}
	wantAssocs := []Assoc{{Account: "etaba", User: "amy"}, {Account: "lab", User: "amy"}, {Account: "lab", User: "zoe"}, {Account: "gone", User: "bob"}}
	if diff := cmp.Diff(wantAssocs, d.Assocs); diff != "" {
		t.Errorf("user associations (-want +got):\n%s", diff)
	}
	// hours: 22:00 (zoe 100) and 23:00 (three rows), each as gres/gpu and cpu
	if n := len(d.Usage[Hour]); n != 8 {
		t.Errorf("%d hour rows, want 8: %+v", n, d.Usage[Hour])
	}
	// in UTC+1, 22:00Z is 30 November and 23:00Z is 1 December: zoe's row
	// falls on another day and month than the others'
	zoe := 2 // d.Assocs index of lab/zoe
	for _, g := range []Granularity{Day, Month} {
		first := map[Granularity]time.Time{Day: time.Date(2026, 11, 30, 0, 0, 0, 0, loc), Month: time.Date(2026, 11, 1, 0, 0, 0, 0, loc)}[g]
		second := time.Date(2026, 12, 1, 0, 0, 0, 0, loc)
		for _, r := range d.Usage[g] {
			want := second
			if r.Assoc == zoe {
				want = first
			}
			if !r.Start.Equal(want) {
				t.Errorf("granularity %v: association %d's row starts %v, want %v", g, r.Assoc, r.Start, want)
			}
		}
		if n := len(d.Usage[g]); n != 8 {
			t.Errorf("granularity %v: %d rows, want 8", g, n)
		}
	}
	// cluster: 22:00 and 23:00 have ended and were served (21:00 was not
	// served yet, 00:00 has not ended): 2 GPUs = 7200 s an hour
	var got []ClusterRow
	for _, c := range d.ClusterUsage[Hour] {
		if c.TRES == "gres/gpu" {
			got = append(got, c)
		}
	}
	want := []ClusterRow{
		{Start: h("2026-11-30T22:00:00Z"), Count: 2, Alloc: 100, Idle: 7100, TRES: "gres/gpu"},
		{Start: h("2026-11-30T23:00:00Z"), Count: 2, Alloc: 65, Idle: 7135, TRES: "gres/gpu"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster hours (-want +got):\n%s", diff)
	}
}

// TestRunNoValidTRES: a -T list without one TRES of the cluster fails as
// sreport does; one valid name is enough (the others are dropped), and
// gres/gpu is valid without usage.
func TestRunNoValidTRES(t *testing.T) {
	now := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	p := Period{Start: now.AddDate(0, 0, -1), End: now, Gran: Hour}
	data := FromAssocHours(nil, nil, 4, "llm", p, now, time.UTC, p.Start)
	for _, tc := range []struct {
		tres []string
		err  error
	}{
		{[]string{"gpu"}, ErrNoValidTRES},
		{[]string{}, ErrNoValidTRES},
		{[]string{"gres/gpuz", "gpu"}, ErrNoValidTRES},
		{[]string{"gres/gpu"}, nil},
		{[]string{"GRES/GPU"}, nil},
		{[]string{"gpu", "cpu"}, nil},
		{[]string{"energy"}, nil},
		{[]string{"all"}, nil},
		{nil, nil},
	} {
		req, err := ParseArgs([]string{"cluster", "Utilization", "start=2026-11-02", "end=2026-11-03"})
		if err != nil {
			t.Fatal(err)
		}
		req.TRES = tc.tres
		var out strings.Builder
		if err := Run(&out, req, data); err != tc.err {
			t.Errorf("-T %q: %v, want %v", tc.tres, err, tc.err)
		}
	}
}

// TestWithoutUnwritten: the write-back's unwritten rows leave the report's
// rows (an hour partly, an hour wholly), summed per association.
func TestWithoutUnwritten(t *testing.T) {
	h := func(i int) time.Time { return time.Date(2026, 11, 2, i, 0, 0, 0, time.UTC) }
	row := func(i int, a, u string, s int64) llmflow.AssocHour {
		return llmflow.AssocHour{Account: a, User: u, Hour: h(i), AllocSecs: s}
	}
	rows := []llmflow.AssocHour{row(1, "gone", "svc", 100), row(1, "live", "alice", 50), row(2, "gone", "svc", 30), row(3, "gone", "svc", 10)}
	un := []llmflow.Unwritten{
		{AssocHour: row(1, "gone", "svc", 100), Reason: "r"},
		{AssocHour: row(2, "gone", "svc", 20), Reason: "r"},
		{AssocHour: row(5, "gone", "svc", 7), Reason: "r"}, // no such row: nothing to remove
	}
	got, gone := WithoutUnwritten(rows, un)
	if want := []llmflow.AssocHour{row(1, "live", "alice", 50), row(2, "gone", "svc", 10), row(3, "gone", "svc", 10)}; !cmp.Equal(got, want) {
		t.Errorf("rows: %s", cmp.Diff(want, got))
	}
	if want := []llmflow.Unwritten{{AssocHour: llmflow.AssocHour{Account: "gone", User: "svc", AllocSecs: 120}, Reason: "r"}}; !cmp.Equal(gone, want) {
		t.Errorf("removed: %s", cmp.Diff(want, gone))
	}
	if got, gone := WithoutUnwritten(rows, nil); !cmp.Equal(got, rows) || gone != nil {
		t.Errorf("nothing unwritten: %v %v", got, gone)
	}
}

// TestSortAssocs: the associations a write-back cluster has go in its lft
// order, the others after them in their order, and the usage rows follow
// their association.
func TestSortAssocs(t *testing.T) {
	h := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	tree := llmflow.Accounts{
		{Name: "org", Kind: llmflow.KindOrg, Shares: 1},
		{Name: "ta", Kind: llmflow.KindTeam, Parent: "org", Shares: 1},
		{Name: "tz", Kind: llmflow.KindTeam, Parent: "org", Shares: 1},
	}
	rows := []llmflow.AssocHour{{Account: "ta", User: "svc", Hour: h, AllocSecs: 10}, {Account: "tz", User: "svc", Hour: h, AllocSecs: 20},
		{Account: "ta", User: "new", Hour: h, AllocSecs: 30}}
	p := Period{Start: h, End: h.Add(time.Hour), Gran: Hour}
	d := FromAssocHours(tree, rows, 4, "llm", p, h.Add(2*time.Hour), time.UTC, h)
	d.SortAssocs([]llmflow.AssocLFT{{Account: "tz", User: "svc", LFT: 3}, {Account: "ta", User: "svc", LFT: 7}})
	var got []string
	for _, a := range d.Assocs {
		got = append(got, a.Account+"/"+a.User)
	}
	if want := []string{"tz/svc", "ta/svc", "ta/new"}; !cmp.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	secs := map[string]uint64{}
	for _, u := range d.Usage[Hour] {
		if u.TRES == "gres/gpu" {
			secs[d.Assocs[u.Assoc].Account+"/"+d.Assocs[u.Assoc].User] = u.Secs
		}
	}
	if want := map[string]uint64{"tz/svc": 20, "ta/svc": 10, "ta/new": 30}; !cmp.Equal(secs, want) {
		t.Errorf("usage by association %v, want %v", secs, want)
	}
}
