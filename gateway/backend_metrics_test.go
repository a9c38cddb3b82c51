package gateway

import (
	"io"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
)

// /metrics shows each upstream, configured and runtime, once; a runtime
// upstream removed disappears from it.
func TestUpstreamGaugesOnce(t *testing.T) {
	u0, u1, rt := newRecordingUpstream(t, nil), newRecordingUpstream(t, nil), newRecordingUpstream(t, nil)
	e := newEnv(t, []string{u0.srv.URL, u1.srv.URL}, "")
	scrape := func() string {
		t.Helper()
		resp, err := e.srv.Client().Get(e.srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("metrics: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	apply := func(ups []llmflow.RuntimeUpstream) { e.gw.ApplyRouting(ups, nil) }
	check := func(text string, want map[string]int) {
		t.Helper()
		for _, m := range []string{"llmflow_upstream_healthy", "llmflow_upstream_inflight"} {
			for up, n := range want {
				series := m + `{pool="p",upstream="` + up + `"} `
				if got := strings.Count(text, series); got != n {
					t.Errorf("%s appears %d times, want %d", series, got, n)
				}
			}
		}
	}
	check(scrape(), map[string]int{"u0": 1, "u1": 1, "rt": 0})
	apply([]llmflow.RuntimeUpstream{{Model: "m", Name: "rt", BaseURL: rt.srv.URL}})
	check(scrape(), map[string]int{"u0": 1, "u1": 1, "rt": 1})
	apply(nil)
	check(scrape(), map[string]int{"u0": 1, "u1": 1, "rt": 0})
}
