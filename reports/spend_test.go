package reports

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

var updateSpend = flag.Bool("update-spend", false, "rewrite the spend golden files")

func TestWriteSpend(t *testing.T) {
	rows := []llmflow.Rollup{
		{Org: "etaba", Team: "lab-nlp", Requests: 3, PromptTokens: 1200, CompletionTokens: 300, CachedTokens: 100, GPUHours: 0.0842, EstimatedRequests: 1},
		{Org: "etabb", Team: "lab|chem", Requests: 1, PromptTokens: 10, CompletionTokens: 5, GPUHours: 1.5e-5},
	}
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, format := range SpendFormats {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteSpend(&b, rows, []string{"org", "team"}, format, from, to); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "spend", "org-team."+format)
			if *updateSpend {
				os.MkdirAll(filepath.Dir(path), 0o755)
				os.WriteFile(path, b.Bytes(), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update-spend)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("got\n%s\nwant\n%s", b.Bytes(), want)
			}
		})
	}
	if err := WriteSpend(new(bytes.Buffer), rows, nil, "xml", from, to); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestParseGroupByAndTime(t *testing.T) {
	if g, err := ParseGroupBy(""); err != nil || len(g) != 2 || g[0] != "org" || g[1] != "team" {
		t.Errorf("default group-by %v %v", g, err)
	}
	if g, err := ParseGroupBy(" Org, tag ,pool"); err != nil || len(g) != 3 || g[1] != "tag" {
		t.Errorf("%v %v", g, err)
	}
	for _, bad := range []string{"org,org", "user", "org,,team"} {
		if _, err := ParseGroupBy(bad); err == nil {
			t.Errorf("group-by %q accepted", bad)
		}
	}
	for in, want := range map[string]string{
		"2026-10-01":                "2026-10-01T00:00:00Z",
		"2026-10-01T10:45:00Z":      "2026-10-01T10:00:00Z",
		"2026-10-01T10:45:00+02:00": "2026-10-01T08:00:00Z",
		"2026-10-01T10:45":          "2026-10-01T10:00:00Z",
	} {
		got, err := ParseSpendTime(in)
		if err != nil || got.Format(time.RFC3339) != want {
			t.Errorf("ParseSpendTime(%q) = %v %v, want %s", in, got, err, want)
		}
	}
	if _, err := ParseSpendTime("October"); err == nil {
		t.Error("a bad time was accepted")
	}
}

func TestCSVText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"lab-nlp", "lab-nlp"},
		{"=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"},
		{"+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"},
		{"-2+3", "'-2+3"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1", "'\t=1"},
		{"\r=1", "'\r=1"},
		{"a=1", "a=1"},
		{" =1", " =1"},
		{"'=1", "'=1"},
	} {
		if got := CSVText(c.in); got != c.want {
			t.Errorf("CSVText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestWriteSpend_Hostile: names made to be evaluated by a spreadsheet are
// neutralised in csv, and only there; numbers stay numbers.
func TestWriteSpend_Hostile(t *testing.T) {
	hostile := []string{"=cmd|' /C calc'!A0", "+1", "-1", "@SUM(1)", "\tx", "\rx", "a,=b", "ok"}
	var rows []llmflow.Rollup
	for i, h := range hostile {
		rows = append(rows, llmflow.Rollup{Org: h, Team: h, Project: h, KeyID: h, Owner: h, Model: h, Pool: h, Tag: h,
			Requests: int64(i), PromptTokens: 10, GPUHours: 0.25})
	}
	dims := llmflow.RollupDimensions()
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	out := map[string][]byte{}
	for _, format := range SpendFormats {
		var b bytes.Buffer
		if err := WriteSpend(&b, rows, dims, format, from, to); err != nil {
			t.Fatal(err)
		}
		out[format] = b.Bytes()
		path := filepath.Join("testdata", "spend", "hostile."+format)
		if *updateSpend {
			os.WriteFile(path, b.Bytes(), 0o644)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update-spend)", err)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("%s: got\n%s\nwant\n%s", format, b.Bytes(), want)
		}
	}

	recs, err := csv.NewReader(bytes.NewReader(out["csv"])).ReadAll()
	if err != nil {
		t.Fatalf("csv does not read back: %v", err)
	}
	if len(recs) != len(rows)+1 {
		t.Fatalf("%d csv records, want %d", len(recs), len(rows)+1)
	}
	for i, rec := range recs[1:] {
		for j, d := range dims {
			if want := CSVText(rows[i].Dimension(d)); rec[j] != want {
				t.Errorf("row %d %s = %q, want %q", i, d, rec[j], want)
			}
		}
		if nums := rec[len(dims):]; nums[0] != strconv.Itoa(i) || nums[4] != "0.250000" {
			t.Errorf("row %d numbers %q: want them unchanged", i, nums)
		}
	}

	var js struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(out["json"], &js); err != nil {
		t.Fatal(err)
	}
	for i, row := range js.Data {
		for _, d := range dims {
			if row[d] != rows[i].Dimension(d) {
				t.Errorf("json row %d %s = %q, want it exact: %q", i, d, row[d], rows[i].Dimension(d))
			}
		}
	}
	if !bytes.Contains(out["parsable2"], []byte("\n=cmd")) || bytes.Contains(out["parsable2"], []byte("'=")) {
		t.Errorf("parsable2 is not exact:\n%s", out["parsable2"])
	}
}
