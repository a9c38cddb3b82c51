package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Pos is a position in a configuration file. Line and Column start at 1;
// a zero Line means the position is unknown.
type Pos struct {
	Filename string
	Line     int
	Column   int
}

// String formats p as "file:line:col", "file" when the line is unknown.
func (p Pos) String() string {
	if p.Line == 0 {
		return p.Filename
	}
	return fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)
}

func posOf(r hcl.Range) Pos {
	return Pos{Filename: r.Filename, Line: r.Start.Line, Column: r.Start.Column}
}

// Diagnostic is one problem found in a configuration file.
type Diagnostic struct {
	Pos     Pos
	Message string // one line, never a secret's content
}

// String formats d as "file:line:col: message".
func (d Diagnostic) String() string {
	if p := d.Pos.String(); p != "" {
		return p + ": " + d.Message
	}
	return d.Message
}

// Diagnostics is the error returned by Parse, Load and CheckSecrets. It is
// never returned empty: no problem is a literal nil error.
type Diagnostics []Diagnostic

// Error returns one line per diagnostic, "file:line:col: message".
func (ds Diagnostics) Error() string {
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(d.String())
	}
	return b.String()
}

// err returns ds as an error, or a literal nil when it is empty (so that a
// caller's err != nil test does not see a typed nil).
func (ds Diagnostics) err() error {
	if len(ds) == 0 {
		return nil
	}
	return ds
}

// sort orders ds by file, line and column, keeping the order of diagnostics
// at the same position.
func (ds Diagnostics) sort() {
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		return cmp.Or(
			cmp.Compare(a.Pos.Filename, b.Pos.Filename),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
		)
	})
}

// fromHCL converts HCL's error diagnostics; warnings are dropped. The
// message is the summary, followed by "; " and the detail when the detail
// says more than the summary, folded onto one line.
func fromHCL(filename string, hds hcl.Diagnostics) Diagnostics {
	var ds Diagnostics
	for _, hd := range hds {
		if hd.Severity != hcl.DiagError {
			continue
		}
		pos := Pos{Filename: filename}
		switch {
		case hd.Subject != nil:
			pos = posOf(*hd.Subject)
		case hd.Context != nil:
			pos = posOf(*hd.Context)
		}
		if pos.Filename == "" {
			pos.Filename = filename
		}
		ds = append(ds, Diagnostic{Pos: pos, Message: hclMessage(hd.Summary, hd.Detail)})
	}
	return ds
}

func hclMessage(summary, detail string) string {
	summary = oneLine(summary)
	detail = oneLine(detail)
	norm := func(s string) string { return strings.ToLower(strings.TrimRight(s, ".")) }
	if detail == "" || norm(detail) == norm(summary) {
		return summary
	}
	return summary + "; " + detail
}

// oneLine collapses runs of white space, newlines included, into one space.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
