package admin

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// fakeSpend is a SpendReader made of a func field.
type fakeSpend struct {
	spend func(ctx context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error)
}

func (f fakeSpend) Spend(ctx context.Context, from, to time.Time, flt llmflow.RollupFilter) ([]llmflow.Rollup, error) {
	return f.spend(ctx, from, to, flt)
}

func TestSpendReport(t *testing.T) {
	var got []llmflow.RollupFilter
	var gotFrom, gotTo time.Time
	sp := fakeSpend{spend: func(_ context.Context, from, to time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
		got = append(got, f)
		gotFrom, gotTo = from, to
		return []llmflow.Rollup{{Org: "etabA", Tag: "teaching", Requests: 3, GPUHours: 0.5}}, nil
	}}
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *envOptions) { o.Spend = sp })

	resp := adminDo(t, e, http.MethodGet, "/admin/spend?from=2026-10-01&to=2026-11-01&group_by=org,tag&format=csv", "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin/spend: %d %s", resp.StatusCode, b)
	}
	want := "org,tag,requests,prompt_tokens,completion_tokens,cached_tokens,gpu_hours,estimated_requests\netabA,teaching,3,0,0,0,0.500000,0\n"
	if string(b) != want {
		t.Errorf("body:\n%s\nwant\n%s", b, want)
	}
	if len(got) != 1 || !slices.Equal(got[0].GroupBy, []string{"org", "tag"}) || !got[0].Total || !got[0].NeedsTags() {
		t.Errorf("filter = %+v, want org,tag summed over the range", got)
	}
	if !gotFrom.Equal(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)) || !gotTo.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("range = [%v, %v)", gotFrom, gotTo)
	}

	resp = adminDo(t, e, http.MethodGet, "/admin/usage.csv?from=2026-10-01&to=2026-11-01", "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(got) != 2 || !slices.Equal(got[1].GroupBy, []string{"team", "pool"}) || got[1].NeedsTags() {
		t.Errorf("GET /admin/usage.csv: %d, filter %+v", resp.StatusCode, got)
	}

	resp = adminDo(t, e, http.MethodGet, "/admin/spend?from=2026-10-01&to=2026-11-01&group_by=cluster", "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || len(got) != 2 {
		t.Errorf("unknown dimension: %d (store called %d times)", resp.StatusCode, len(got))
	}
}

func TestSpendReport_NoStore(t *testing.T) {
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "")
	resp := adminDo(t, e, http.MethodGet, "/admin/spend?from=2026-10-01&to=2026-11-01", "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /admin/spend without a store: %d, want 503", resp.StatusCode)
	}
}
