package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/config"
)

// marker is an expected diagnostic, written in a fixture as a comment on
// the offending line: "# ERROR: <substring of the message>", or
// "# ERROR@col=<n>: <substring>" to check the column as well. A line may
// carry several markers.
type marker struct {
	line, col int // col 0: not checked
	text      string
	hit       bool
}

// readMarkers returns the markers of a fixture, by line.
func readMarkers(t *testing.T, src []byte) map[int][]*marker {
	t.Helper()
	ms := map[int][]*marker{}
	for i, line := range strings.Split(string(src), "\n") {
		idx := strings.Index(line, "# ERROR")
		if idx < 0 {
			continue
		}
		for _, part := range strings.Split(line[idx:], "# ERROR")[1:] {
			m := regexp.MustCompile(`^(?:@col=(\d+))?:\s*(.*?)\s*$`).FindStringSubmatch(part)
			if m == nil {
				t.Fatalf("line %d: malformed marker %q", i+1, part)
			}
			mk := &marker{line: i + 1, text: m[2]}
			if m[1] != "" {
				mk.col, _ = strconv.Atoi(m[1])
			}
			ms[i+1] = append(ms[i+1], mk)
		}
	}
	return ms
}

// TestParse_BadFixtures parses every testdata/bad/*.hcl and checks that the
// diagnostics are exactly the ones marked in the file.
func TestParse_BadFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.hcl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			markers := readMarkers(t, src)
			if len(markers) == 0 {
				t.Fatal("fixture has no # ERROR marker")
			}
			cfg, err := config.Parse(file, src)
			if err == nil {
				t.Fatalf("Parse succeeded, want errors")
			}
			if cfg != nil {
				t.Errorf("Parse returned a config with errors")
			}
			var ds config.Diagnostics
			if !errors.As(err, &ds) {
				t.Fatalf("error %T is not Diagnostics: %v", err, err)
			}
			for _, d := range ds {
				if d.Pos.Filename != file {
					t.Errorf("%s: file name %q, want %q", d, d.Pos.Filename, file)
				}
				var found bool
				for _, m := range markers[d.Pos.Line] {
					if strings.Contains(d.Message, m.text) && (m.col == 0 || m.col == d.Pos.Column) {
						m.hit, found = true, true
						break
					}
				}
				if !found {
					t.Errorf("unexpected diagnostic %s", d)
				}
			}
			for _, ms := range markers {
				for _, m := range ms {
					if !m.hit {
						col := ""
						if m.col != 0 {
							col = " at column " + strconv.Itoa(m.col)
						}
						t.Errorf("%s:%d: no diagnostic%s matching %q", file, m.line, col, m.text)
					}
				}
			}
		})
	}
}
