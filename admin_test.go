package llmflow_test

import (
	"strings"
	"testing"

	"github.com/go-llmflow/llmflow"
)

func TestAdminTokenSecret(t *testing.T) {
	s, h, hint := llmflow.NewAdminTokenSecret()
	s2, _, _ := llmflow.NewAdminTokenSecret()
	if len(s) != 69 || !llmflow.LooksLikeAdminToken(s) || llmflow.LooksLikeKey(s) || s == s2 {
		t.Errorf("secret %q", s)
	}
	if h != llmflow.HashKey(s) || hint != s[:9]+"…" || strings.Contains(hint, s[9:]) {
		t.Errorf("hash or hint %q", hint)
	}
}

func TestValidNames(t *testing.T) {
	for name, want := range map[string]bool{
		"alice": true, "a.b_c-d": true, "Alice2": true, strings.Repeat("a", 64): true,
		"": false, "master": false, "-x": false, ".x": false, "a b": false, "a,b": false, "a=b": false,
		"a'b": false, `a"b`: false, "a/b": false, "a\nb": false, "é": false, strings.Repeat("a", 65): false,
	} {
		if got := llmflow.ValidUserName(name); got != want {
			t.Errorf("ValidUserName(%q) = %v", name, got)
		}
	}
	if !llmflow.ValidAccountName("master") || llmflow.ValidAccountName("../x") {
		t.Error("ValidAccountName")
	}
}
