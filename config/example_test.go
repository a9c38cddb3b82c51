package config_test

import (
	"fmt"

	"github.com/go-llmflow/llmflow/config"
)

func ExampleParse() {
	src := `
org "etabA" { share = 0.8125 }
org "etabB" { share = 0.1875 }
pool "b300" { capacity = 256 }
model "llama" {
  pool = "b300"
  upstream "gpu01" { base_url = "http://10.0.0.11:8000/" }
}
limits { retries = 0 }
`
	cfg, err := config.Parse("/etc/llmflow/gateway.hcl", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, _ := cfg.Model("llama")
	fmt.Println(m.UpstreamModel, m.Class, m.Upstreams[0].BaseURL)
	fmt.Println(cfg.Limits.Retries, cfg.Limits.AuthFailuresPerMinute, cfg.Store.Path)
	// Output:
	// llama interactive http://10.0.0.11:8000
	// 0 60 /etc/llmflow/llmflow.db
}

func ExampleParse_diagnostics() {
	src := `
pool "b300" { capacity = 1.5 }
model "llama" {
  pool = "h100"
  upstream "gpu01" { base_url = "http://${host}:8000" }
}
`
	_, err := config.Parse("gateway.hcl", []byte(src))
	fmt.Println(err)
	// Output:
	// gateway.hcl:2:26: capacity must be a whole number
	// gateway.hcl:4:10: unknown pool "h100"
	// gateway.hcl:5:43: Variables not allowed; Variables may not be used here.
}
