// Package gatewaytest is test support for the gateway and admin tests:
// the test configuration, a fake key store, a settable clock and small
// HTTP helpers, written once for both. Only _test.go files import it. It
// imports neither gateway nor admin (their tests import it): only the
// root package and the standard library.
package gatewaytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The secrets WriteConfig writes beside the configuration.
const (
	MasterKey   = "master-secret-for-tests-0123456789abcdef"
	UpstreamKey = "internal-upstream-key"
)

// WriteConfig writes an HCL file naming upstreams and returns its path.
// extra is appended inside the file (limits, health …). The file has two
// orgs (etabA: team lab-nlp, share 0.75; etabB: team lab-chem, 0.25),
// pool p, models m and batchm (class batch) on every upstream, and a
// SQLite store unless extra has a store block.
func WriteConfig(t testing.TB, upstreams []string, extra string) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "master.key"), []byte(MasterKey+"\n"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "vllm.key"), []byte(UpstreamKey+"\n"), 0o600))
	var ups strings.Builder
	for i, u := range upstreams {
		fmt.Fprintf(&ups, "  upstream \"u%d\" { base_url = %q }\n", i, u)
	}
	src := fmt.Sprintf(`
master_key_file = "master.key"
org "etabA" {
  share = 0.75
  team "lab-nlp" {}
}
org "etabB" {
  share = 0.25
  team "lab-chem" {}
}
pool "p" { capacity = 16 }
model "m" {
  upstream_model = "sim/llama"
  pool           = "p"
  key_file       = "vllm.key"
  cost {
    input_per_mtok  = 1
    output_per_mtok = 10
    cached_per_mtok = 0.1
  }
%s}
model "batchm" {
  upstream_model = "sim/llama"
  pool           = "p"
  class          = "batch"
  key_file       = "vllm.key"
%s}
%s
`, ups.String(), ups.String(), extra)
	if !strings.Contains(extra, "store {") {
		src += "store {\n  path = \"test.db\"\n  flush_interval = \"10ms\"\n}\n"
	}
	path := filepath.Join(dir, "gateway.hcl")
	must(os.WriteFile(path, []byte(src), 0o600))
	return path
}
