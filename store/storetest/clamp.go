package storetest

import (
	"fmt"
	"math"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow"
)

// testRecordClamped writes, in one batch with ten innocent records, records
// whose usage a broken or hostile engine could have produced. The batch
// must go in whole, the bad records clamped and marked, the hour's rollups
// and spend must still be readable, and a later batch adding more of the
// same to the same rollup row must not overflow it.
func testRecordClamped(t *testing.T, s Store) {
	hour := base.Truncate(time.Hour)
	rec := func(id string, prompt, completion, cached int64, gpu float64) llmflow.Record {
		return llmflow.Record{
			RequestID: id, Time: hour.Add(time.Minute), KeyID: "key_clamp", Org: "org", Team: "team",
			Model: "m", Pool: "p", Status: 200, Outcome: llmflow.OutcomeOK,
			PromptTokens: prompt, CompletionTokens: completion, CachedTokens: cached, GPUHours: gpu,
		}
	}
	var batch []llmflow.Record
	for i := range 10 {
		batch = append(batch, rec(fmt.Sprintf("ok-%02d", i), 100, 10, 5, 0.001))
	}
	bad := []struct {
		in   llmflow.Record
		want llmflow.Record // usage after clamping
	}{
		{rec("bad-negative", -5, -1, -3, 0.001), rec("", 0, 0, 0, 0.001)},
		{rec("bad-huge", 5e18, 5e18, 5e18, 0.001), rec("", llmflow.MaxRecordTokens, llmflow.MaxRecordTokens, llmflow.MaxRecordTokens, 0.001)},
		{rec("bad-max", math.MaxInt64, math.MaxInt64, 0, 0.001), rec("", llmflow.MaxRecordTokens, llmflow.MaxRecordTokens, 0, 0.001)},
		{rec("bad-cached", 10, 1, 11, 0.001), rec("", 10, 1, 10, 0.001)},
		{rec("bad-nan", 1, 1, 0, math.NaN()), rec("", 1, 1, 0, 0)},
		{rec("bad-inf", 1, 1, 0, math.Inf(1)), rec("", 1, 1, 0, llmflow.MaxRecordGPUHours)},
		{rec("bad-neg-gpu", 1, 1, 0, math.Inf(-1)), rec("", 1, 1, 0, 0)},
	}
	for _, b := range bad {
		batch = append(batch, b.in)
	}
	before := s.ClampedRecords()
	mustWrite(t, s, batch)
	if got, want := s.ClampedRecords()-before, int64(len(bad)); got != want {
		t.Errorf("ClampedRecords grew by %d, want %d", got, want)
	}
	if !math.IsNaN(batch[10+4].GPUHours) {
		t.Errorf("WriteRecords changed its argument: GPUHours = %v, want NaN", batch[10+4].GPUHours)
	}

	got := mustRecords(t, s, hour, hour.Add(time.Hour))
	byID := map[string]llmflow.Record{}
	for _, r := range got {
		byID[r.RequestID] = r
	}
	if len(byID) != len(batch) {
		t.Fatalf("read %d records back, want %d", len(byID), len(batch))
	}
	for i := range 10 {
		if r := byID[fmt.Sprintf("ok-%02d", i)]; r.Estimated || r.EstimateReason != "" || r.PromptTokens != 100 {
			t.Errorf("innocent record changed: %+v", r)
		}
	}
	for _, b := range bad {
		r := byID[b.in.RequestID]
		type usage struct {
			P, C, K int64
			G       float64
			E       bool
			R       llmflow.EstimateReason
		}
		gotU := usage{r.PromptTokens, r.CompletionTokens, r.CachedTokens, r.GPUHours, r.Estimated, r.EstimateReason}
		wantU := usage{b.want.PromptTokens, b.want.CompletionTokens, b.want.CachedTokens, b.want.GPUHours, true, llmflow.EstimateInvalidUsage}
		if gotU != wantU {
			t.Errorf("%s stored as %+v, want %+v", b.in.RequestID, gotU, wantU)
		}
	}

	// More of the worst into the same rollup row, batch after batch.
	for i := range 3 {
		mustWrite(t, s, []llmflow.Record{
			rec(fmt.Sprintf("again-%d-a", i), 5e18, 5e18, 5e18, math.Inf(1)),
			rec(fmt.Sprintf("again-%d-b", i), math.MaxInt64, math.MaxInt64, math.MaxInt64, 1e300),
		})
	}
	n := int64(len(batch) + 6)
	for _, f := range []llmflow.RollupFilter{{}, {Total: true}} {
		rs := mustRollups(t, s, hour, hour.Add(time.Hour), f)
		if len(rs) != 1 {
			t.Fatalf("Rollups(%+v): %d rows, want 1: %+v", f, len(rs), rs)
		}
		r := rs[0]
		if r.Requests != n || r.EstimatedRequests != int64(len(bad)+6) {
			t.Errorf("Rollups(%+v): %d requests, %d estimated; want %d, %d", f, r.Requests, r.EstimatedRequests, n, len(bad)+6)
		}
		if r.PromptTokens < 0 || r.CompletionTokens < 0 || r.CachedTokens < 0 || !(r.GPUHours >= 0) {
			t.Errorf("Rollups(%+v): negative or NaN sums: %+v", f, r)
		}
		wantPrompt := int64(10*100+0+2*llmflow.MaxRecordTokens+10+1+1+1) + 6*llmflow.MaxRecordTokens
		if r.PromptTokens != wantPrompt {
			t.Errorf("Rollups(%+v): prompt tokens %d, want %d", f, r.PromptTokens, wantPrompt)
		}
	}
	spend, err := s.Spend(t.Context(), hour, hour.Add(time.Hour), llmflow.RollupFilter{Total: true})
	if err != nil {
		t.Fatalf("Spend: %v", err)
	}
	tagged := mustRollupsByTag(t, s, hour, hour.Add(time.Hour), llmflow.RollupFilter{Total: true})
	if diff := gocmp.Diff(spend, tagged, approx); diff != "" {
		t.Errorf("Spend and RollupsByTag differ (-spend +by tag):\n%s", diff)
	}
}
