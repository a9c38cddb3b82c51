package reports_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow/reports"
)

// FuzzParseArgs checks that ParseArgs never panics, and that whatever it
// accepts Run can print over the lab data without panicking.
func FuzzParseArgs(f *testing.F) {
	for _, c := range captures(f) {
		f.Add(strings.Join(c.args, "\x00"))
	}
	for _, s := range []string{
		"-pn\x00cl\x00a\x00S=2026-10-01T10:29:30\x00E=now-3days\x00tree\x00--tres=ALL\x00-tHourPer",
		"user\x00top\x00TopCount=-1\x00group\x00format=A%-3,U%2",
		"cluster\x00Utilization\x00start=10/01/26\x00end=noon\x00format=count,over,energy,pl,rep",
		"cluster\x00UA\x00start=100126\x00end=13:45\x00-s\x00name\x00-t\x00minper",
		"--\x00cluster\x00AccountUtilizationByUser\x00users=bob,alice\x00accounts=etaba",
	} {
		f.Add(s)
	}
	data := loadLab(f)
	f.Fuzz(func(t *testing.T, s string) {
		req, err := reports.ParseArgs(strings.Split(s, "\x00"))
		if err != nil {
			return
		}
		for _, fm := range req.Format {
			if strings.Contains(fm, "%") {
				return // a width such as Used%999999999 prints that many spaces
			}
		}
		// a TRES that exists nowhere fails as sreport does ("fatal: No valid
		// TRES given"), once the report's TRES are known
		if err := reports.Run(io.Discard, req, data); err != nil && req.Start == "" && req.End == "" && !errors.Is(err, reports.ErrNoValidTRES) {
			t.Errorf("Run(%q): %v", s, err)
		}
	})
}
