package llmflow_test

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
)

func TestCost_GPUHours(t *testing.T) {
	c := llmflow.Cost{InputPerMTok: 0.02, OutputPerMTok: 0.2, CachedPerMTok: 0.002}
	for _, tc := range []struct {
		name                       string
		prompt, completion, cached int64
		want                       float64
	}{
		{"zero", 0, 0, 0, 0},
		{"prompt only", 1_000_000, 0, 0, 0.02},
		{"completion only", 0, 1_000_000, 0, 0.2},
		{"cached part of the prompt", 1_000_000, 0, 500_000, 0.01 + 0.001},
		{"cached beyond the prompt counts as prompt", 1_000, 0, 5_000, 1_000 * 0.002 / 1e6},
		{"all", 2_000_000, 1_000_000, 1_000_000, 0.02 + 0.002 + 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.GPUHours(tc.prompt, tc.completion, tc.cached)
			if d := got - tc.want; d > 1e-12 || d < -1e-12 {
				t.Errorf("GPUHours(%d, %d, %d) = %g, want %g", tc.prompt, tc.completion, tc.cached, got, tc.want)
			}
		})
	}
}

func TestKey_Validate(t *testing.T) {
	long := strings.Repeat("x", llmflow.MaxKeyFieldBytes+1)
	for _, tc := range []struct {
		name  string
		key   llmflow.Key
		param string // "" = valid
	}{
		{"ok", llmflow.Key{Name: "a", Project: "p", Owner: "u", RPM: 1, TPM: 2, MaxInFlight: 3, Tags: []string{"x"}}, ""},
		{"zero value", llmflow.Key{}, ""},
		{"field at the bound", llmflow.Key{Name: long[1:]}, ""},
		{"negative rpm", llmflow.Key{RPM: -1}, "rpm"},
		{"negative tpm", llmflow.Key{TPM: -1}, "tpm"},
		{"negative max_inflight", llmflow.Key{MaxInFlight: -1}, "max_inflight"},
		{"long name", llmflow.Key{Name: long}, "name"},
		{"long project", llmflow.Key{Project: long}, "project"},
		{"long owner", llmflow.Key{Owner: long}, "owner"},
		{"empty tag", llmflow.Key{Tags: []string{"a", ""}}, "tags"},
		{"long tag", llmflow.Key{Tags: []string{strings.Repeat("t", llmflow.MaxTagBytes+1)}}, "tags"},
		{"NUL in name", llmflow.Key{Name: "x\x00y"}, "name"},
		{"newline in owner", llmflow.Key{Owner: "alice\nkey_id=forged"}, "owner"},
		{"escape in project", llmflow.Key{Project: "p\x1b[2J"}, "project"},
		{"tab in tag", llmflow.Key{Tags: []string{"a\tb"}}, "tags"},
		{"non-ASCII name", llmflow.Key{Name: "équipe Ω"}, ""},
		{"owner naming two users", llmflow.Key{Owner: "alice,root"}, "owner"},
		{"owner with an sacctmgr option", llmflow.Key{Owner: "alice account=etabb"}, "owner"},
		{"owner with an equals sign", llmflow.Key{Owner: "cluster=hgx"}, "owner"},
		{"owner with a quote", llmflow.Key{Owner: `a"b`}, "owner"},
		{"owner of a realm", llmflow.Key{Owner: "alice.martin@univ.example"}, ""},
		{"name with a comma", llmflow.Key{Name: "alice, notebook"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.key.Validate()
			if tc.param == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			e, ok := err.(*llmflow.Error)
			if !ok || e.Code != llmflow.EINVALID || e.Param != tc.param {
				t.Fatalf("Validate() = %#v, want EINVALID on %q", err, tc.param)
			}
		})
	}
}

func TestNewKeySecret(t *testing.T) {
	s, h, hint := llmflow.NewKeySecret()
	if !llmflow.LooksLikeKey(s) || len(s) != len(llmflow.KeyPrefix)+64 {
		t.Fatalf("secret %q: want %s and 64 hex digits", s, llmflow.KeyPrefix)
	}
	if h != sha256.Sum256([]byte(s)) || h != llmflow.HashKey(s) {
		t.Fatal("hash is not the SHA-256 of the secret")
	}
	if !strings.HasPrefix(s, strings.TrimSuffix(hint, "…")) || len(hint) >= len(s) {
		t.Fatalf("hint %q reveals too much or is not a prefix", hint)
	}
	if s2, _, _ := llmflow.NewKeySecret(); s2 == s {
		t.Fatal("two secrets are equal")
	}
	if id := llmflow.NewID("key_"); !strings.HasPrefix(id, "key_") || len(id) != 4+16 {
		t.Fatalf("NewID = %q", id)
	}
}

func TestAccounts_SlurmNames(t *testing.T) {
	in := llmflow.Accounts{
		{Name: "Uni-A", Kind: llmflow.KindOrg, Members: []string{"alice"}},
		{Name: "Lab-X", Kind: llmflow.KindTeam, Parent: "Uni-A"},
	}
	out := in.SlurmNames()
	if out[0].Name != "uni-a" || out[1].Name != "lab-x" || out[1].Parent != "uni-a" {
		t.Fatalf("SlurmNames = %+v", out)
	}
	out[0].Members[0] = "bob"
	if in[0].Name != "Uni-A" || in[0].Members[0] != "alice" {
		t.Fatal("SlurmNames changed its input")
	}
}
