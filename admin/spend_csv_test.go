package admin

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// TestSpendExportsNeutraliseFormulas: names that a spreadsheet would
// evaluate come out of /admin/spend?format=csv and /admin/usage.csv with a
// single quote in front (OWASP's rule), numbers unchanged; the json
// answer keeps them exact.
func TestSpendExportsNeutraliseFormulas(t *testing.T) {
	hostile := []string{"=HYPERLINK(\"http://evil\",\"x\")", "+1+1", "-1+1", "@SUM(A1)", "\t=1", "\r=1"}
	sp := fakeSpend{spend: func(_ context.Context, _, _ time.Time, f llmflow.RollupFilter) ([]llmflow.Rollup, error) {
		var rows []llmflow.Rollup
		for _, h := range hostile {
			rows = append(rows, llmflow.Rollup{Org: h, Team: h, Pool: h, Tag: h, Requests: 2, PromptTokens: 7, GPUHours: 0.5})
		}
		return rows, nil
	}}
	up := newRecordingUpstream(t, nil)
	e := newEnv(t, []string{up.srv.URL}, "", func(o *envOptions) { o.Spend = sp })

	get := func(path string) string {
		t.Helper()
		resp := adminDo(t, e, http.MethodGet, path, "")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	for _, path := range []string{
		"/admin/spend?from=2026-10-01&to=2026-11-01&group_by=org,team,tag&format=csv",
		"/admin/usage.csv?from=2026-10-01&to=2026-11-01",
	} {
		t.Run(path, func(t *testing.T) {
			recs, err := csv.NewReader(strings.NewReader(get(path))).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != len(hostile)+1 {
				t.Fatalf("%d records, want %d", len(recs), len(hostile)+1)
			}
			names := len(recs[0]) - 6 // the six number columns follow the names
			for i, rec := range recs[1:] {
				for j := range names {
					if want := "'" + hostile[i]; rec[j] != want {
						t.Errorf("row %d cell %d = %q, want %q", i, j, rec[j], want)
					}
				}
				if got := strings.Join(rec[names:], ","); got != "2,7,0,0,0.500000,0" {
					t.Errorf("row %d numbers %q, want them unchanged", i, got)
				}
			}
		})
	}

	var js struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(get("/admin/spend?from=2026-10-01&to=2026-11-01&group_by=org,tag&format=json")), &js); err != nil {
		t.Fatal(err)
	}
	for i, row := range js.Data {
		if row["org"] != hostile[i] || row["tag"] != hostile[i] {
			t.Errorf("json row %d = %v: want the names exact", i, row)
		}
	}
	if p := get("/admin/spend?from=2026-10-01&to=2026-11-01&group_by=org&format=parsable2"); !strings.Contains(p, "\n=HYPERLINK") {
		t.Errorf("parsable2 not exact:\n%s", p)
	}
}
