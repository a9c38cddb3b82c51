// Package examples holds the example configuration files. They are parsed
// by the config tests, and quickstart.hcl is embedded in the binary for
// `llmflow quickstart`.
package examples

import _ "embed"

// Quickstart is examples/quickstart.hcl.
//
//go:embed quickstart.hcl
var Quickstart []byte
