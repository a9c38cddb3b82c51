package config_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
)

func TestConfig_Accounts(t *testing.T) {
	src := `
org "uni-a" {
  share = 0.75
  team "lab-x" { share = 0.5 }
  team "lab-y" {}
  team "lab-z" {}
}
org "uni-b" {
  share = 0.25
  team "lab-w" { share = 1 }
  team "lab-v" {}
}
pool "p" { capacity = 8 }
model "m" {
  pool = "p"
  upstream "u" { base_url = "http://127.0.0.1:8000" }
}
`
	cfg, err := config.Parse("t.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := llmflow.Accounts{
		{Name: "uni-a", Kind: llmflow.KindOrg, Shares: 0.75, Source: "config"},
		{Name: "lab-x", Kind: llmflow.KindTeam, Parent: "uni-a", Shares: 0.5, Source: "config"},
		{Name: "lab-y", Kind: llmflow.KindTeam, ShareRest: true, Parent: "uni-a", Shares: 0.25, Source: "config"},
		{Name: "lab-z", Kind: llmflow.KindTeam, ShareRest: true, Parent: "uni-a", Shares: 0.25, Source: "config"},
		{Name: "uni-b", Kind: llmflow.KindOrg, Shares: 0.25, Source: "config"},
		{Name: "lab-w", Kind: llmflow.KindTeam, Parent: "uni-b", Shares: 1, Source: "config"},
		{Name: "lab-v", Kind: llmflow.KindTeam, ShareRest: true, Parent: "uni-b", Shares: 0, Source: "config"},
	}
	if d := cmp.Diff(want, cfg.Accounts()); d != "" {
		t.Fatalf("Accounts() (-want +got):\n%s", d)
	}
}
