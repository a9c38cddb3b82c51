package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminTable checks the sacctmgr-like layouts: fixed width right
// aligned with long values cut by '+', -P, -p and -n.
func TestAdminTable(t *testing.T) {
	tb := &table{cols: []string{"User", "Org", "Roles"}, widths: []int{10, 10, 12}}
	tb.add("alice", "etabA", "org_admin@etabA")
	tb.add("bob-the-very-long", "", "")
	for _, tc := range []struct {
		f    listFormat
		want string
	}{
		{listFormat{}, "      User        Org        Roles\n---------- ---------- ------------\n     alice      etabA org_admin@e+\nbob-the-v+                        \n"},
		{listFormat{parsable2: true}, "User|Org|Roles\nalice|etabA|org_admin@etabA\nbob-the-very-long||\n"},
		{listFormat{parsable: true}, "User|Org|Roles|\nalice|etabA|org_admin@etabA|\nbob-the-very-long|||\n"},
		{listFormat{parsable2: true, noHeader: true}, "alice|etabA|org_admin@etabA\nbob-the-very-long||\n"},
	} {
		var b bytes.Buffer
		tb.write(&b, tc.f)
		if b.String() != tc.want {
			t.Errorf("%+v:\n%q\nwant\n%q", tc.f, b.String(), tc.want)
		}
	}
}

// TestAdminCLI administers a running gateway as a new admin would: the
// operator creates a user with the master key and gives them an org admin
// role and a token; the org admin creates a team, a key and a model list,
// and sees only their organisation; the audit trail shows it all, without
// secrets.
func TestAdminCLI(t *testing.T) {
	e := startE2E(t)
	master := filepath.Join(e.dir, "master.key")
	run := func(tokenFile string, args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"admin", "--url", e.base, "--token-file", tokenFile}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	ok := func(tokenFile string, args ...string) string {
		t.Helper()
		out, errb, code := run(tokenFile, args...)
		if code != 0 {
			t.Fatalf("llmflow admin %s: exit %d: %s", strings.Join(args, " "), code, errb)
		}
		return out
	}
	ok(master, "users", "add", "alice", "--org", "etabA")
	ok(master, "roles", "grant", "alice", "org_admin", "--org", "etabA")
	tok := strings.TrimSpace(ok(master, "tokens", "add", "alice", "--name", "laptop"))
	if !strings.HasPrefix(tok, "llma-") || len(tok) != 69 {
		t.Fatalf("token %q", tok)
	}
	alice := filepath.Join(e.dir, "alice.token")
	if err := os.WriteFile(alice, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ok(alice, "whoami", "-P", "-n"); got != "alice|user|org_admin|etabA|\n" {
		t.Errorf("whoami: %q", got)
	}
	if got := ok(master, "roles", "list", "alice", "-P"); got != "User|Role|Org|Team|Source\nalice|org_admin|etabA||admin\n" {
		t.Errorf("roles list: %q", got)
	}
	// a fraction of etabA, as in the configuration (issue 21 item 14): 2 is refused
	if _, errb, code := run(alice, "teams", "add", "lab-x", "--org", "etabA", "--share", "2"); code != 1 || !strings.Contains(errb, "at most 1 is left") {
		t.Errorf("teams add --share 2: exit %d %s", code, errb)
	}
	ok(alice, "teams", "add", "lab-x", "--org", "etabA", "--share", "0.75")
	key := strings.TrimSpace(ok(alice, "keys", "add", "--team", "lab-x", "--name", "ci", "--owner", "bob"))
	if !strings.HasPrefix(key, "llmf-") {
		t.Fatalf("key %q", key)
	}
	ok(alice, "models", "set", "lab-nlp", "sim-llama")
	if got := ok(alice, "models", "show", "lab-nlp", "-P", "-n"); got != "lab-nlp|sim-llama\n" {
		t.Errorf("models show: %q", got)
	}
	// lab-nlp (no share given) takes what lab-x leaves
	teams := ok(alice, "teams", "list", "-P")
	if teams != "Team|Org|Share|Disabled|Source\nlab-nlp|etabA|0.25|no|config\nlab-x|etabA|0.75|no|admin\n" {
		t.Errorf("teams list: %q", teams)
	}
	if got := ok(alice, "teams", "share", "lab-x", "0.5"); got != "team lab-x: share 0.5\n" {
		t.Errorf("teams share: %q", got)
	}
	if _, errb, code := run(alice, "teams", "share", "lab-nlp", "3"); code != 1 || !strings.Contains(errb, "its share is set there") {
		t.Errorf("share of a configured team: exit %d %s", code, errb)
	}
	if keys := ok(alice, "keys", "list", "-P"); strings.Contains(keys, "lab-chem") || !strings.Contains(keys, "|lab-x||bob||ci") {
		t.Errorf("keys list: %q", keys)
	}
	// disabled by mistake, enabled again: its old key stays revoked
	if got := ok(alice, "teams", "disable", "lab-x"); got != "team lab-x disabled, 1 keys revoked\n" {
		t.Errorf("teams disable: %q", got)
	}
	if got := ok(alice, "teams", "enable", "lab-x"); !strings.HasPrefix(got, "team lab-x enabled") {
		t.Errorf("teams enable: %q", got)
	}
	if _, errb, code := run(alice, "teams", "enable", "lab-x"); code != 1 || !strings.Contains(errb, "is not disabled") {
		t.Errorf("enable a team that is not disabled: exit %d %s", code, errb)
	}
	key = strings.TrimSpace(ok(alice, "keys", "add", "--team", "lab-x", "--name", "ci", "--owner", "bob"))
	// out of scope: a 403 with the gateway's reason, exit 1
	if _, errb, code := run(alice, "teams", "add", "lab-y", "--org", "etabB"); code != 1 || !strings.Contains(errb, "403") {
		t.Errorf("team in another organisation: exit %d %s", code, errb)
	}
	if _, errb, code := run(alice, "roles", "grant", "alice", "proxy_admin"); code != 1 || !strings.Contains(errb, "above their own scope") {
		t.Errorf("escalation: exit %d %s", code, errb)
	}
	// the audit trail, from the store, and filtered over the API
	var out, errb bytes.Buffer
	cfg := filepath.Join(e.dir, "gateway.hcl")
	if code := Run(context.Background(), []string{"audit", "-c", cfg, "-P", "--actor", "alice"}, &out, &errb); code != 0 {
		t.Fatalf("audit: exit %d %s", code, errb.String())
	}
	trail := out.String()
	for _, want := range []string{"|alice|team.create|etabA|lab-x|127.0.0.1/32|team lab-x|", "|alice|key.create|", "|alice|team.models|"} {
		if !strings.Contains(trail, want) {
			t.Errorf("audit lacks %q:\n%s", want, trail)
		}
	}
	if viaAPI := ok(alice, "audit", "-P"); strings.Contains(viaAPI, "etabB") || !strings.Contains(viaAPI, "team.create") {
		t.Errorf("admin audit: %s", viaAPI)
	}
	for _, secret := range []string{tok, tok[5:], key, key[5:]} {
		if strings.Contains(trail, secret) {
			t.Errorf("audit trail holds a secret")
		}
	}
	// a token file open to others is refused, like every secret file
	os.Chmod(alice, 0o644)
	if _, errb, code := run(alice, "whoami"); code == 0 {
		t.Errorf("token file 0644 accepted: %s", errb)
	}
}
