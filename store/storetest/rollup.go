package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// approx compares GPU-hour sums, whose last bits depend on the order of
// the additions.
var approx = cmpopts.EquateApprox(1e-12, 1e-15)

// ExpectRollups computes in Go what a store's rollups hold after rs were
// written in this order: the first record of a RequestID wins, owners maps
// key IDs to Key.Owner. With byTag, one rollup per distinct tag (untagged:
// ""). With total, every hour is summed (Hour zero). Rows are ordered as
// the stores order them.
func ExpectRollups(rs []llmflow.Record, owners map[string]string, byTag, total bool) []llmflow.Rollup {
	seen := map[string]bool{}
	type key struct {
		hour                                               time.Time
		tag, org, team, project, keyID, owner, model, pool string
	}
	sums := map[key]*llmflow.Rollup{}
	for _, r := range rs {
		if seen[r.RequestID] {
			continue
		}
		seen[r.RequestID] = true
		tags := []string{""}
		if byTag && len(r.Tags) > 0 {
			tags = nil
			for _, t := range r.Tags {
				if !slices.Contains(tags, t) {
					tags = append(tags, t)
				}
			}
		}
		for _, tag := range tags {
			k := key{r.Time.UTC().Truncate(time.Hour), tag, r.Org, r.Team, r.Project, r.KeyID, owners[r.KeyID], r.Model, r.Pool}
			if total {
				k.hour = time.Time{}
			}
			ru := sums[k]
			if ru == nil {
				ru = &llmflow.Rollup{Hour: k.hour, Tag: tag, Org: r.Org, Team: r.Team, Project: r.Project,
					KeyID: r.KeyID, Owner: k.owner, Model: r.Model, Pool: r.Pool}
				sums[k] = ru
			}
			ru.Requests++
			ru.PromptTokens += r.PromptTokens
			ru.CompletionTokens += r.CompletionTokens
			ru.CachedTokens += r.CachedTokens
			ru.GPUHours += r.GPUHours
			if r.Estimated {
				ru.EstimatedRequests++
			}
		}
	}
	var out []llmflow.Rollup
	for _, r := range sums {
		out = append(out, *r)
	}
	SortRollups(out)
	return out
}

// SortRollups sorts as the stores do: hour, tag, org, team, project, key,
// owner, model, pool.
func SortRollups(rs []llmflow.Rollup) {
	slices.SortFunc(rs, func(a, b llmflow.Rollup) int {
		return cmp.Or(a.Hour.Compare(b.Hour), cmp.Compare(a.Tag, b.Tag), cmp.Compare(a.Org, b.Org),
			cmp.Compare(a.Team, b.Team), cmp.Compare(a.Project, b.Project), cmp.Compare(a.KeyID, b.KeyID),
			cmp.Compare(a.Owner, b.Owner), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Pool, b.Pool))
	})
}

func mustRollups(t *testing.T, s Store, from, to time.Time, f llmflow.RollupFilter) []llmflow.Rollup {
	t.Helper()
	rs, err := s.Rollups(t.Context(), from, to, f)
	if err != nil {
		t.Fatalf("Rollups: %v", err)
	}
	for _, r := range rs {
		checkUTC(t, "Rollup.Hour", r.Hour)
	}
	return rs
}

func mustRollupsByTag(t *testing.T, s Store, from, to time.Time, f llmflow.RollupFilter) []llmflow.Rollup {
	t.Helper()
	rs, err := s.RollupsByTag(t.Context(), from, to, f)
	if err != nil {
		t.Fatalf("RollupsByTag: %v", err)
	}
	for _, r := range rs {
		checkUTC(t, "Rollup.Hour", r.Hour)
	}
	return rs
}

// rollupRequests is the number of requests the rollups count in the hours
// around [from, to).
func rollupRequests(t *testing.T, s Store, from, to time.Time) int {
	t.Helper()
	n := 0
	for _, r := range mustRollups(t, s, from.Truncate(time.Hour), to, llmflow.RollupFilter{Total: true}) {
		n += int(r.Requests)
	}
	return n
}

// hour0 is a whole UTC hour.
var hour0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// rollupKeys creates two keys, one with an owner, and returns the owners
// by key ID.
func rollupKeys(t *testing.T, s Store) (alice, noOwner llmflow.Key, owners map[string]string) {
	alice = NewKey("alice", base)
	alice.Owner = "alice"
	alice.Org, alice.Team, alice.Project = "uni-x", "physics", "qcd"
	noOwner = NewKey("service", base)
	noOwner.Org, noOwner.Team = "uni-y", "chem"
	mustCreate(t, s, alice, noOwner)
	return alice, noOwner, map[string]string{alice.ID: "alice"}
}

// rollupRecords returns n varied records over hours hours from hour0,
// spread over the two keys, a record without a key and one whose key is
// unknown, two models and pools, some estimated, some tagged.
func rollupRecords(prefix string, n, hours int, alice, other llmflow.Key) []llmflow.Record {
	rs := make([]llmflow.Record, n)
	for i := range rs {
		r := llmflow.Record{
			RequestID:        fmt.Sprintf("%s-%05d", prefix, i),
			Time:             hour0.Add(time.Duration(i) * time.Duration(hours) * time.Hour / time.Duration(n)),
			Model:            []string{"llama-70b", "qwen-7b"}[i%2],
			Pool:             []string{"h100", "a100", "h100"}[i%3],
			Upstream:         "u",
			PromptTokens:     int64(100 + i),
			CompletionTokens: int64(2*i + 1),
			CachedTokens:     int64(i % 7),
			GPUHours:         0.0001*float64(i%13) + 1e-7,
			Estimated:        i%5 == 0,
			Status:           200,
			Outcome:          llmflow.OutcomeOK,
		}
		switch i % 4 {
		case 0, 1:
			r.KeyID, r.Org, r.Team, r.Project = alice.ID, alice.Org, alice.Team, alice.Project
		case 2:
			r.KeyID, r.Org, r.Team = other.ID, other.Org, other.Team
		case 3:
			if i%8 == 3 {
				r.KeyID = "" // rejected before authentication
			} else {
				r.KeyID, r.Org = "key_unknown", "uni-z"
			}
		}
		switch i % 6 {
		case 1:
			r.Tags = []string{"teaching"}
		case 2:
			r.Tags = []string{"research", "teaching"}
		case 4:
			r.Tags = []string{"research", "research"}
		}
		rs[i] = r
	}
	return rs
}

func testRollupsBasic(t *testing.T, s Store) {
	alice, other, owners := rollupKeys(t, s)
	rs := rollupRecords("r", 300, 5, alice, other)
	mustWrite(t, s, rs[:120])
	mustWrite(t, s, rs[120:])

	from, to := hour0.Add(-time.Hour), hour0.Add(24*time.Hour)
	got := mustRollups(t, s, from, to, llmflow.RollupFilter{})
	if diff := gocmp.Diff(ExpectRollups(rs, owners, false, false), got, approx); diff != "" {
		t.Errorf("Rollups (-want +got):\n%s", diff)
	}
	if len(got) < 20 {
		t.Errorf("only %d rollups: the generated records are not varied enough", len(got))
	}
	gotTag := mustRollupsByTag(t, s, from, to, llmflow.RollupFilter{})
	if diff := gocmp.Diff(ExpectRollups(rs, owners, true, false), gotTag, approx); diff != "" {
		t.Errorf("RollupsByTag (-want +got):\n%s", diff)
	}
	total := mustRollups(t, s, from, to, llmflow.RollupFilter{Total: true})
	if diff := gocmp.Diff(ExpectRollups(rs, owners, false, true), total, approx); diff != "" {
		t.Errorf("Rollups total (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if r.KeyID == alice.ID && r.Owner != "alice" {
			t.Errorf("rollup of alice's key has owner %q", r.Owner)
		}
		if r.KeyID != alice.ID && r.Owner != "" {
			t.Errorf("rollup of key %q has owner %q", r.KeyID, r.Owner)
		}
	}
}

func testRollupsIdempotent(t *testing.T, s Store) {
	alice, other, owners := rollupKeys(t, s)
	rs := rollupRecords("r", 200, 3, alice, other)
	from, to := hour0, hour0.Add(3*time.Hour)
	mustWrite(t, s, rs[:100])
	first := mustRollups(t, s, from, to, llmflow.RollupFilter{})
	firstTag := mustRollupsByTag(t, s, from, to, llmflow.RollupFilter{})

	// The same batch again, whole and in parts: nothing changes, to the bit.
	mustWrite(t, s, rs[:100])
	mustWrite(t, s, rs[50:100])
	if diff := gocmp.Diff(first, mustRollups(t, s, from, to, llmflow.RollupFilter{})); diff != "" {
		t.Errorf("Rollups changed by re-writing the batch (-before +after):\n%s", diff)
	}
	if diff := gocmp.Diff(firstTag, mustRollupsByTag(t, s, from, to, llmflow.RollupFilter{})); diff != "" {
		t.Errorf("RollupsByTag changed by re-writing the batch (-before +after):\n%s", diff)
	}

	// Overlapping batches, a record repeated inside a batch, and a repeat
	// with different values (the first write wins, in rollups too).
	changed := rs[10]
	changed.GPUHours, changed.PromptTokens, changed.Model = 99, 99, "other-model"
	batch := append(slices.Clone(rs[80:150]), rs[120], changed)
	mustWrite(t, s, batch)
	mustWrite(t, s, rs[140:])
	all := append(slices.Clone(rs), changed)
	if diff := gocmp.Diff(ExpectRollups(all, owners, false, false), mustRollups(t, s, from, to, llmflow.RollupFilter{}), approx); diff != "" {
		t.Errorf("Rollups (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(ExpectRollups(all, owners, true, false), mustRollupsByTag(t, s, from, to, llmflow.RollupFilter{}), approx); diff != "" {
		t.Errorf("RollupsByTag (-want +got):\n%s", diff)
	}
	if n := rollupRequests(t, s, from, to); n != len(rs) {
		t.Errorf("rollups count %d requests, want %d", n, len(rs))
	}
}

func testRollupsPurge(t *testing.T, s Store) {
	alice, other, owners := rollupKeys(t, s)
	rs := rollupRecords("r", 240, 6, alice, other) // 40 an hour
	mustWrite(t, s, rs)
	from, to := hour0.Add(-time.Hour), hour0.Add(7*time.Hour)
	before := mustRollups(t, s, from, to, llmflow.RollupFilter{})
	beforeTag := mustRollupsByTag(t, s, from, to, llmflow.RollupFilter{})

	cut := hour0.Add(3*time.Hour + 30*time.Minute)
	n, err := s.PurgeRecords(t.Context(), cut)
	if err != nil {
		t.Fatalf("PurgeRecords: %v", err)
	}
	var want []string
	var purged int64
	for _, r := range rs {
		if r.Time.Before(cut) {
			purged++
		} else {
			want = append(want, r.RequestID)
		}
	}
	if n != purged {
		t.Errorf("PurgeRecords = %d, want %d", n, purged)
	}
	if diff := gocmp.Diff(want, requestIDs(mustRecords(t, s, from, to))); diff != "" {
		t.Errorf("records after purge (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(before, mustRollups(t, s, from, to, llmflow.RollupFilter{})); diff != "" {
		t.Errorf("Rollups changed by the purge (-before +after):\n%s", diff)
	}
	if diff := gocmp.Diff(beforeTag, mustRollupsByTag(t, s, from, to, llmflow.RollupFilter{})); diff != "" {
		t.Errorf("RollupsByTag changed by the purge (-before +after):\n%s", diff)
	}
	if diff := gocmp.Diff(ExpectRollups(rs, owners, false, false), before, approx); diff != "" {
		t.Errorf("Rollups (-want +got):\n%s", diff)
	}
	if n, err := s.PurgeRecords(t.Context(), cut); err != nil || n != 0 {
		t.Errorf("second PurgeRecords = %d, %v; want 0, nil", n, err)
	}
	// Writing a purged record again would count it twice: that is the
	// retention's price, but records still present are never recounted.
	mustWrite(t, s, rs[len(rs)-10:])
	if diff := gocmp.Diff(before, mustRollups(t, s, from, to, llmflow.RollupFilter{})); diff != "" {
		t.Errorf("Rollups changed by re-writing kept records (-before +after):\n%s", diff)
	}
	// Everything.
	if n, err := s.PurgeRecords(t.Context(), to); err != nil || n != int64(len(want)) {
		t.Errorf("PurgeRecords(all) = %d, %v; want %d", n, err, len(want))
	}
	if got := mustRecords(t, s, from, to); len(got) != 0 {
		t.Errorf("records left: %v", requestIDs(got))
	}
}

func testRollupsHours(t *testing.T, s Store) {
	kolkata := time.FixedZone("IST", 5*3600+1800) // a zone whose hours are not UTC hours
	at := func(id string, tm time.Time) llmflow.Record {
		return llmflow.Record{RequestID: id, Time: tm.In(kolkata), Model: "m", PromptTokens: 1, GPUHours: 1}
	}
	midnight := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	mustWrite(t, s, []llmflow.Record{
		at("h-1-end", hour0.Add(-time.Microsecond)),
		at("h0-start", hour0),
		at("h0-start+1us", hour0.Add(time.Microsecond)),
		at("h0-middle", hour0.Add(30*time.Minute)),
		at("h0-end", hour0.Add(time.Hour-time.Microsecond)),
		at("h1-start", hour0.Add(time.Hour)),
		at("day-end", midnight.Add(-time.Microsecond)),
		at("day-start", midnight),
	})
	type hr struct {
		Hour time.Time
		N    int64
	}
	hours := func(rs []llmflow.Rollup) []hr {
		var out []hr
		for _, r := range rs {
			out = append(out, hr{r.Hour, r.Requests})
		}
		return out
	}
	all := []hr{
		{hour0.Add(-time.Hour), 1}, {hour0, 4}, {hour0.Add(time.Hour), 1},
		{midnight.Add(-time.Hour), 1}, {midnight, 1},
	}
	tests := []struct {
		name     string
		from, to time.Time
		want     []hr
	}{
		{"All", hour0.Add(-24 * time.Hour), midnight.Add(24 * time.Hour), all},
		{"OneHour", hour0, hour0.Add(time.Hour), all[1:2]},
		{"OtherZone", hour0.In(kolkata), hour0.Add(time.Hour).In(kolkata), all[1:2]},
		{"FromInsideAnHour", hour0.Add(-time.Minute), hour0.Add(time.Hour), all[1:2]},
		{"FromJustAfterTheHour", hour0.Add(time.Nanosecond), hour0.Add(2 * time.Hour), all[2:3]},
		{"ToAtTheHour", hour0.Add(-time.Hour), hour0, all[:1]},
		{"ToJustAfterTheHour", hour0.Add(-time.Hour), hour0.Add(time.Nanosecond), all[:2]},
		{"AroundMidnight", midnight.Add(-time.Hour), midnight.Add(time.Hour), all[3:]},
		{"Empty", hour0, hour0, nil},
		{"Reversed", hour0.Add(time.Hour), hour0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hours(mustRollups(t, s, tt.from, tt.to, llmflow.RollupFilter{}))
			if diff := gocmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Rollups(%v, %v) hours (-want +got):\n%s", tt.from, tt.to, diff)
			}
			gotTag := hours(mustRollupsByTag(t, s, tt.from, tt.to, llmflow.RollupFilter{}))
			if diff := gocmp.Diff(tt.want, gotTag); diff != "" {
				t.Errorf("RollupsByTag(%v, %v) hours (-want +got):\n%s", tt.from, tt.to, diff)
			}
		})
	}
}

func testRollupsTags(t *testing.T, s Store) {
	rec := func(id string, gpu float64, tags ...string) llmflow.Record {
		return llmflow.Record{RequestID: id, Time: hour0.Add(time.Minute), Org: "o", PromptTokens: 10, GPUHours: gpu, Tags: tags}
	}
	rs := []llmflow.Record{
		rec("two-tags", 1, "a", "b"),
		rec("one-tag", 2, "b"),
		rec("untagged", 4),
		rec("empty-tags", 8, []string{}...),
		rec("repeated", 16, "a", "a"),
		rec("three", 32, "c", "a", "b"),
		rec("special", 64, "ünï ✓", `"q",x`),
	}
	mustWrite(t, s, rs)
	mustWrite(t, s, rs[:3]) // again: nothing changes

	got := mustRollupsByTag(t, s, hour0, hour0.Add(time.Hour), llmflow.RollupFilter{GroupBy: []string{"tag"}, Total: true})
	type tg struct {
		Tag string
		N   int64
		GPU float64
	}
	var gotT []tg
	for _, r := range got {
		gotT = append(gotT, tg{r.Tag, r.Requests, r.GPUHours})
		if r.Org != "" {
			t.Errorf("org %q kept when grouping by tag only", r.Org)
		}
	}
	want := []tg{{"", 2, 12}, {`"q",x`, 1, 64}, {"a", 3, 49}, {"b", 3, 35}, {"c", 1, 32}, {"ünï ✓", 1, 64}}
	if diff := gocmp.Diff(want, gotT); diff != "" {
		t.Errorf("per tag (-want +got):\n%s", diff)
	}
	// Each request once in the plain rollups, whatever its tags.
	total := mustRollups(t, s, hour0, hour0.Add(time.Hour), llmflow.RollupFilter{Total: true})
	if len(total) != 1 || total[0].Requests != int64(len(rs)) || total[0].GPUHours != 127 || total[0].PromptTokens != 70 {
		t.Errorf("Rollups total = %+v, want one row of %d requests, 127 GPU-hours", total, len(rs))
	}
	// Filter by tag.
	a := mustRollupsByTag(t, s, hour0, hour0.Add(time.Hour), llmflow.RollupFilter{Tag: "a", Total: true})
	if len(a) != 1 || a[0].Tag != "a" || a[0].Requests != 3 || a[0].Org != "o" {
		t.Errorf("tag a = %+v", a)
	}
	// Records keep their tags as given.
	byID := map[string][]string{}
	for _, r := range mustRecords(t, s, hour0, hour0.Add(time.Hour)) {
		byID[r.RequestID] = r.Tags
	}
	wantTags := map[string][]string{
		"two-tags": {"a", "b"}, "one-tag": {"b"}, "untagged": nil, "empty-tags": nil,
		"repeated": {"a", "a"}, "three": {"c", "a", "b"}, "special": {"ünï ✓", `"q",x`},
	}
	if diff := gocmp.Diff(wantTags, byID); diff != "" {
		t.Errorf("record tags (-want +got):\n%s", diff)
	}
	if byID["untagged"] != nil || byID["empty-tags"] != nil {
		t.Errorf("no tags read back as %#v and %#v, want nil", byID["untagged"], byID["empty-tags"])
	}
}

func testRollupsGroupBy(t *testing.T, s Store) {
	alice, other, owners := rollupKeys(t, s)
	rs := rollupRecords("r", 300, 4, alice, other)
	mustWrite(t, s, rs)
	from, to := hour0, hour0.Add(4*time.Hour)

	// Group the expected finest rollups in Go, keeping some fields.
	regroup := func(in []llmflow.Rollup, total bool, keep func(r *llmflow.Rollup)) []llmflow.Rollup {
		m := map[llmflow.Rollup]*llmflow.Rollup{}
		var order []llmflow.Rollup
		for _, r := range in {
			k := llmflow.Rollup{Hour: r.Hour}
			if total {
				k.Hour = time.Time{}
			}
			k.Tag, k.Org, k.Team, k.Project, k.KeyID, k.Owner, k.Model, k.Pool = r.Tag, r.Org, r.Team, r.Project, r.KeyID, r.Owner, r.Model, r.Pool
			keep(&k)
			g := m[k]
			if g == nil {
				g = new(llmflow.Rollup)
				*g = k
				m[k] = g
				order = append(order, k)
			}
			g.Requests += r.Requests
			g.PromptTokens += r.PromptTokens
			g.CompletionTokens += r.CompletionTokens
			g.CachedTokens += r.CachedTokens
			g.GPUHours += r.GPUHours
			g.EstimatedRequests += r.EstimatedRequests
		}
		var out []llmflow.Rollup
		for _, k := range order {
			out = append(out, *m[k])
		}
		SortRollups(out)
		return out
	}
	fine := ExpectRollups(rs, owners, false, false)
	fineTag := ExpectRollups(rs, owners, true, false)
	tests := []struct {
		name  string
		byTag bool
		f     llmflow.RollupFilter
		keep  func(r *llmflow.Rollup)
	}{
		{"OrgTeamTotal", false, llmflow.RollupFilter{GroupBy: []string{"org", "team"}, Total: true},
			func(r *llmflow.Rollup) { r.Project, r.KeyID, r.Owner, r.Model, r.Pool = "", "", "", "", "" }},
		{"TeamOrgSameAsOrgTeam", false, llmflow.RollupFilter{GroupBy: []string{"team", "org"}, Total: true},
			func(r *llmflow.Rollup) { r.Project, r.KeyID, r.Owner, r.Model, r.Pool = "", "", "", "", "" }},
		{"PoolHourly", false, llmflow.RollupFilter{GroupBy: []string{"pool"}},
			func(r *llmflow.Rollup) { r.Org, r.Team, r.Project, r.KeyID, r.Owner, r.Model = "", "", "", "", "", "" }},
		{"KeyOwnerTotal", false, llmflow.RollupFilter{GroupBy: []string{"key", "owner"}, Total: true},
			func(r *llmflow.Rollup) { r.Org, r.Team, r.Project, r.Model, r.Pool = "", "", "", "", "" }},
		{"ModelTagTotal", true, llmflow.RollupFilter{GroupBy: []string{"model", "tag"}, Total: true},
			func(r *llmflow.Rollup) { r.Org, r.Team, r.Project, r.KeyID, r.Owner, r.Pool = "", "", "", "", "", "" }},
		{"TagOrgHourly", true, llmflow.RollupFilter{GroupBy: []string{"org", "tag"}},
			func(r *llmflow.Rollup) { r.Team, r.Project, r.KeyID, r.Owner, r.Model, r.Pool = "", "", "", "", "", "" }},
		{"ByTagWithoutTag", true, llmflow.RollupFilter{GroupBy: []string{"org"}, Total: true},
			func(r *llmflow.Rollup) {
				r.Tag, r.Team, r.Project, r.KeyID, r.Owner, r.Model, r.Pool = "", "", "", "", "", "", ""
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got, want []llmflow.Rollup
			if tt.byTag {
				got, want = mustRollupsByTag(t, s, from, to, tt.f), regroup(fineTag, tt.f.Total, tt.keep)
			} else {
				got, want = mustRollups(t, s, from, to, tt.f), regroup(fine, tt.f.Total, tt.keep)
			}
			if diff := gocmp.Diff(want, got, approx); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func testRollupsFilters(t *testing.T, s Store) {
	alice, other, owners := rollupKeys(t, s)
	rs := rollupRecords("r", 200, 2, alice, other)
	mustWrite(t, s, rs)
	from, to := hour0, hour0.Add(2*time.Hour)
	fine := ExpectRollups(rs, owners, false, false)
	fineTag := ExpectRollups(rs, owners, true, false)
	filter := func(in []llmflow.Rollup, ok func(r llmflow.Rollup) bool) []llmflow.Rollup {
		var out []llmflow.Rollup
		for _, r := range in {
			if ok(r) {
				out = append(out, r)
			}
		}
		return out
	}
	tests := []struct {
		name  string
		byTag bool
		f     llmflow.RollupFilter
		ok    func(r llmflow.Rollup) bool
	}{
		{"Org", false, llmflow.RollupFilter{Org: "uni-x"}, func(r llmflow.Rollup) bool { return r.Org == "uni-x" }},
		{"OrgTeamProject", false, llmflow.RollupFilter{Org: "uni-x", Team: "physics", Project: "qcd"},
			func(r llmflow.Rollup) bool { return r.Org == "uni-x" && r.Team == "physics" && r.Project == "qcd" }},
		{"Owner", false, llmflow.RollupFilter{Owner: "alice"}, func(r llmflow.Rollup) bool { return r.Owner == "alice" }},
		{"Key", false, llmflow.RollupFilter{KeyID: other.ID}, func(r llmflow.Rollup) bool { return r.KeyID == other.ID }},
		{"ModelPool", false, llmflow.RollupFilter{Model: "qwen-7b", Pool: "a100"},
			func(r llmflow.Rollup) bool { return r.Model == "qwen-7b" && r.Pool == "a100" }},
		{"NoMatch", false, llmflow.RollupFilter{Org: "UNI-X"}, func(llmflow.Rollup) bool { return false }},
		{"Tag", true, llmflow.RollupFilter{Tag: "research"}, func(r llmflow.Rollup) bool { return r.Tag == "research" }},
		{"TagAndOrg", true, llmflow.RollupFilter{Tag: "teaching", Org: "uni-y"},
			func(r llmflow.Rollup) bool { return r.Tag == "teaching" && r.Org == "uni-y" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got, want []llmflow.Rollup
			if tt.byTag {
				got, want = mustRollupsByTag(t, s, from, to, tt.f), filter(fineTag, tt.ok)
			} else {
				got, want = mustRollups(t, s, from, to, tt.f), filter(fine, tt.ok)
			}
			if diff := gocmp.Diff(want, got, approx); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func testRollupsInvalid(t *testing.T, s Store) {
	from, to := hour0, hour0.Add(time.Hour)
	_, err := s.Rollups(t.Context(), from, to, llmflow.RollupFilter{GroupBy: []string{"org", "bogus"}})
	checkCode(t, err, llmflow.EINVALID)
	_, err = s.Rollups(t.Context(), from, to, llmflow.RollupFilter{GroupBy: []string{"tag"}})
	checkCode(t, err, llmflow.EINVALID)
	_, err = s.Rollups(t.Context(), from, to, llmflow.RollupFilter{Tag: "a"})
	checkCode(t, err, llmflow.EINVALID)
	_, err = s.RollupsByTag(t.Context(), from, to, llmflow.RollupFilter{GroupBy: []string{"key_id"}})
	checkCode(t, err, llmflow.EINVALID)
	if got := mustRollups(t, s, from, to, llmflow.RollupFilter{}); got != nil {
		t.Errorf("Rollups on an empty store: %v", got)
	}
}

// testRollupsSpend checks that Spend reads the per-tag rollups exactly
// when the filter needs the tags, and the plain rollups otherwise.
func testRollupsSpend(t *testing.T, s Store) {
	rec := func(id, org string, tags ...string) llmflow.Record {
		return llmflow.Record{RequestID: id, Time: hour0.Add(time.Minute), Org: org, GPUHours: 1, Tags: tags}
	}
	mustWrite(t, s, []llmflow.Record{
		rec("r1", "o1", "a", "b"),
		rec("r2", "o1", "b"),
		rec("r3", "o2"),
	})
	from, to := hour0, hour0.Add(time.Hour)
	for _, f := range []llmflow.RollupFilter{
		{GroupBy: []string{"org"}, Total: true},
		{GroupBy: []string{"org", "tag"}, Total: true},
		{GroupBy: []string{"tag"}},
		{Tag: "b", Total: true},
		{Org: "o1", Tag: "a", GroupBy: []string{"org"}, Total: true},
		{},
	} {
		got, err := s.Spend(t.Context(), from, to, f)
		if err != nil {
			t.Fatalf("Spend(%+v): %v", f, err)
		}
		var want []llmflow.Rollup
		if f.NeedsTags() {
			want = mustRollupsByTag(t, s, from, to, f)
		} else {
			want = mustRollups(t, s, from, to, f)
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("Spend(%+v) (-want +got):\n%s", f, diff)
		}
	}
	// Grouped without tags, each request counts once; by tag, once under
	// each of its tags.
	org, err := s.Spend(t.Context(), from, to, llmflow.RollupFilter{GroupBy: []string{"org"}, Total: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(org) != 2 || org[0].Requests != 2 || org[1].Requests != 1 {
		t.Errorf("Spend by org = %+v, want o1: 2, o2: 1", org)
	}
	tag, err := s.Spend(t.Context(), from, to, llmflow.RollupFilter{GroupBy: []string{"tag"}, Total: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(tag) != 3 || tag[0].Tag != "" || tag[1].Tag != "a" || tag[2].Tag != "b" || tag[2].Requests != 2 {
		t.Errorf("Spend by tag = %+v, want \"\": 1, a: 1, b: 2", tag)
	}
	_, err = s.Spend(t.Context(), from, to, llmflow.RollupFilter{GroupBy: []string{"bogus"}})
	checkCode(t, err, llmflow.EINVALID)
}

// testRollupsConcurrent writes the same records from several goroutines
// at once, each also with records of its own: whichever write wins, every
// request is counted exactly once.
func testRollupsConcurrent(t *testing.T, s Store) {
	alice, other, owners := rollupKeys(t, s)
	shared := rollupRecords("shared", 100, 2, alice, other)
	const writers = 6
	all := slices.Clone(shared)
	var batches [writers][][]llmflow.Record
	for w := range writers {
		own := rollupRecords(fmt.Sprintf("w%d", w), 60, 2, alice, other)
		all = append(all, own...)
		// Different orders and batch cuts in every writer.
		mixed := append(slices.Clone(own), shared...)
		if w%2 == 1 {
			slices.Reverse(mixed)
		}
		for len(mixed) > 0 {
			n := min(len(mixed), 23+w*7)
			batches[w] = append(batches[w], mixed[:n])
			mixed = mixed[n:]
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for _, b := range batches[w] {
				if err := s.WriteRecords(t.Context(), b); err != nil {
					errc <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	from, to := hour0, hour0.Add(2*time.Hour)
	if diff := gocmp.Diff(ExpectRollups(all, owners, false, false), mustRollups(t, s, from, to, llmflow.RollupFilter{}), approx); diff != "" {
		t.Errorf("Rollups (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(ExpectRollups(all, owners, true, false), mustRollupsByTag(t, s, from, to, llmflow.RollupFilter{}), approx); diff != "" {
		t.Errorf("RollupsByTag (-want +got):\n%s", diff)
	}
}
