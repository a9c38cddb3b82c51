package config_test

import (
	"errors"
	"testing"

	"github.com/go-llmflow/llmflow/config"
)

func TestDiagnostics_Error(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   config.Diagnostics
		want string
	}{
		{"one", config.Diagnostics{
			{Pos: config.Pos{Filename: "gw.hcl", Line: 3, Column: 14}, Message: `unknown pool "x"`},
		}, `gw.hcl:3:14: unknown pool "x"`},
		{"several", config.Diagnostics{
			{Pos: config.Pos{Filename: "gw.hcl", Line: 1, Column: 1}, Message: "a"},
			{Pos: config.Pos{Filename: "/etc/llmflow/gw.hcl", Line: 10, Column: 2}, Message: "b; c"},
		}, "gw.hcl:1:1: a\n/etc/llmflow/gw.hcl:10:2: b; c"},
		{"unknown line", config.Diagnostics{
			{Pos: config.Pos{Filename: "gw.hcl"}, Message: "m"},
		}, "gw.hcl: m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ds.Error(); got != tc.want {
				t.Errorf("Error() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestParse_DiagnosticsFormat checks Parse's error text exactly: one
// "file:line:col: message" line per problem, in file order, the HCL detail
// folded in after "; ".
func TestParse_DiagnosticsFormat(t *testing.T) {
	src := `pool "p" {
  capacity = 0
}
model "m" {
  pool = "q"
  upstream "u" { base_url = "http://a" }
}
retries = 3
`
	_, err := config.Parse("dir/gw.hcl", []byte(src))
	want := `dir/gw.hcl:2:14: capacity must be between 1 and 1048576
dir/gw.hcl:5:10: unknown pool "q"
dir/gw.hcl:8:1: Unsupported argument; An argument named "retries" is not expected here.`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse error =\n%v\nwant\n%s", err, want)
	}
	var ds config.Diagnostics
	if !errors.As(err, &ds) || len(ds) != 3 {
		t.Fatalf("error is %T with %d diagnostics", err, len(ds))
	}
	if got := ds[1]; got.Pos != (config.Pos{Filename: "dir/gw.hcl", Line: 5, Column: 10}) || got.Message != `unknown pool "q"` {
		t.Errorf("ds[1] = %+v", got)
	}
}

// TestParse_NilError guards against the typed-nil trap: a valid file gives
// an error interface that is nil itself, not an empty Diagnostics.
func TestParse_NilError(t *testing.T) {
	cfg, err := config.Parse("c.hcl", []byte(`pool "p" { capacity = 1 }`))
	if err != nil {
		t.Fatalf("err = %#v, want nil", err)
	}
	if cfg == nil {
		t.Fatal("nil config")
	}
}
