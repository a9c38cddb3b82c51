package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/adminapi"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
)

// TestSyncCoordinatorsEndToEnd: Slurm is the source of who administers.
// A coordinator added with the real sacctmgr is, after `llmflow sync`,
// team_admin of its team: with an llma- token a proxy admin created
// through the admin API it manages its team's keys and not another
// team's. Both sources show the same role changes. The coordinator
// removed in sacctmgr and synced again, the same token gets 403 on the
// team's keys at the very next request (the sync bumps the admin
// generation the gateway's principal cache checks); the user deleted
// from Slurm and synced again is disabled and the token refused.
func TestSyncCoordinatorsEndToEnd(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 3)
	rand.Read(b)
	s := hex.EncodeToString(b)
	cluster := "llmt_c11" + s
	org, teamA, teamB := "c11o"+s, "c11a"+s, "c11b"+s
	lead, other := "c11lead"+s, "c11mem"+s
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() {
		exec.Command("sacctmgr", "-i", "delete", "user", lead, other).Run()
		exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run()
		exec.Command("sacctmgr", "-i", "delete", "account", teamA, teamB, org).Run()
	})
	sam(t, "add", "account", org, "cluster="+cluster)
	sam(t, "add", "account", teamA, "parent="+org, "cluster="+cluster)
	sam(t, "add", "account", teamB, "parent="+org, "cluster="+cluster)
	sam(t, "add", "user", lead, "account="+teamA, "cluster="+cluster)
	sam(t, "add", "user", other, "account="+teamB, "cluster="+cluster)
	sam(t, "add", "coordinator", "account="+teamA, "names="+lead)

	dir := t.TempDir()
	path := syncConfig(t, dir, "http://127.0.0.1:9")
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "slurm {\n  source   = \"sacctmgr\"\n  cluster  = %q\n  schedule = \"@every 1h\"\n}\n", cluster)
	f.Close()
	sync := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Run(context.Background(), append([]string{"sync", "-c", path}, args...), &out, &errb); code != 0 {
			t.Fatalf("sync %v: %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	dbd := []string{"--from-slurmdbd", "--dsn-file", "/etc/slurm/llmflow-slurmdbd.dsn"}

	// A dry run from each source: the same role changes.
	fromCmd, fromDB := sync("--dry-run"), sync(append(dbd, "--dry-run")...)
	for _, want := range []string{
		"user+       user     " + lead + " (Slurm user gaining a role)\n",
		"role+       role     " + lead + ": team_admin on team " + teamA + " (coordinator of " + teamA + ")\n",
		"role+       role     " + lead + ": member on team " + teamA + " (association in " + teamA + ")\n",
		"role+       role     " + other + ": member on team " + teamB + " (association in " + teamB + ")\n",
		"roles: 3 granted, 0 revoked; users: 2 created, 0 disabled, 0 re-enabled\n",
	} {
		if !strings.Contains(fromCmd, want) || !strings.Contains(fromDB, want) {
			t.Errorf("want %q in both dry runs:\nsacctmgr:\n%s\nslurmdbd:\n%s", want, fromCmd, fromDB)
		}
	}
	if strings.ReplaceAll(fromCmd, "sacctmgr:", "") != strings.ReplaceAll(fromDB, "slurmdbd:", "") {
		t.Errorf("the sources differ:\nsacctmgr:\n%s\nslurmdbd:\n%s", fromCmd, fromDB)
	}
	sync()
	if out := sync(append(dbd, "--dry-run")...); strings.Contains(out, "role") {
		t.Errorf("slurmdbd after sacctmgr wants role changes:\n%s", out)
	}

	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, "127.0.0.1:0", slog.New(slog.DiscardHandler), func(addr string, _ *gateway.Gateway, _ *admin.Handler) { ready <- "http://" + addr })
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	defer func() { cancel(); <-done }()
	master, _ := os.ReadFile(dir + "/master.key")
	call := func(token, method, route, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+route, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(token))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var v map[string]any
		json.Unmarshal(raw, &v)
		return resp.StatusCode, v
	}
	mustCall := func(token, method, route, body string, want int) map[string]any {
		t.Helper()
		code, v := call(token, method, route, body)
		if code != want {
			t.Fatalf("%s %s %s: %d %v, want %d", method, route, body, code, v, want)
		}
		return v
	}
	key := func(team, name string) string {
		v := mustCall(string(master), "POST", "/admin/keys", fmt.Sprintf(`{"team":%q,"name":%q}`, team, name), http.StatusCreated)
		return v["id"].(string)
	}
	keyA1, keyA2, keyB := key(teamA, "a1"), key(teamA, "a2"), key(teamB, "b")
	// a proxy admin (the master key) creates the coordinator's token
	tok := mustCall(string(master), "POST", "/admin/users/"+lead+"/tokens", `{"name":"laptop"}`, http.StatusCreated)["token"].(string)

	// the coordinator manages its team's keys, not another team's
	mustCall(tok, "POST", "/admin/keys", fmt.Sprintf(`{"team":%q,"name":"lab"}`, teamA), http.StatusCreated)
	mustCall(tok, "DELETE", "/admin/keys/"+keyA1, "", http.StatusOK)
	mustCall(tok, "POST", "/admin/keys", fmt.Sprintf(`{"team":%q,"name":"x"}`, teamB), http.StatusForbidden)
	mustCall(tok, "DELETE", "/admin/keys/"+keyB, "", http.StatusForbidden)
	if v := mustCall(tok, "GET", "/admin/keys?team="+teamB, "", http.StatusOK); len(v["data"].([]any)) != 0 {
		t.Errorf("the coordinator of %s lists %s's keys: %v", teamA, teamB, v)
	}
	if v := mustCall(tok, "GET", "/admin/keys?team="+teamA, "", http.StatusOK); len(v["data"].([]any)) != 2 {
		t.Errorf("the coordinator of %s lists %v", teamA, v) // a2 and its own (a1 revoked)
	}

	// coordinator removed in Slurm: after the sync, 403 at the next request
	sam(t, "remove", "coordinator", "account="+teamA, "names="+lead)
	out := sync()
	if want := "role-       role     " + lead + ": team_admin on team " + teamA + " (no longer in Slurm)\n"; !strings.Contains(out, want) {
		t.Fatalf("sync after the coordinator's removal lacks %q:\n%s", want, out)
	}
	mustCall(tok, "DELETE", "/admin/keys/"+keyA2, "", http.StatusForbidden)
	who := mustCall(tok, "GET", "/admin/whoami", "", http.StatusOK)
	if roles := fmt.Sprint(who["roles"]); roles != fmt.Sprintf("[map[org:%s role:member team:%s]]", org, teamA) {
		t.Errorf("whoami roles after removal: %s", roles)
	}

	// removed from Slurm altogether: disabled, the token refused
	sam(t, "delete", "user", lead)
	out = sync()
	if want := "disabled    user     " + lead + " (removed from Slurm, no role left; admin tokens revoked)\n"; !strings.Contains(out, want) {
		t.Fatalf("sync after the user's removal lacks %q:\n%s", want, out)
	}
	mustCall(tok, "GET", "/admin/whoami", "", http.StatusUnauthorized)
}

// TestFairshareScopedViews: with a tree from a real Slurm (a team with a
// project and user associations), GET /admin/fairshare shows a team's
// coordinator (team_admin) the team's whole subtree, its project and
// every user association in it (only the team row before), and a member
// their own user associations (nothing before); nobody sees the
// organisation's row or another team.
func TestFairshareScopedViews(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	cluster, org, team, proj, other := "llmt_fs"+sfx, "fso"+sfx, "fst"+sfx, "fsp"+sfx, "fsx"+sfx
	alice, bob, carol := "fsa"+sfx, "fsb"+sfx, "fsc"+sfx
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() {
		exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run()
		exec.Command("sacctmgr", "-i", "delete", "user", alice+","+bob+","+carol).Run()
	})
	sam(t, "add", "account", org, "cluster="+cluster)
	sam(t, "add", "account", team+","+other, "parent="+org, "cluster="+cluster)
	sam(t, "add", "account", proj, "parent="+team, "cluster="+cluster)
	sam(t, "add", "user", alice, "account="+proj, "cluster="+cluster)
	sam(t, "add", "user", bob+","+carol, "account="+team, "cluster="+cluster)
	sam(t, "add", "user", bob, "account="+other, "cluster="+cluster)
	sam(t, "add", "coordinator", "account="+team, "names="+carol)

	dir := t.TempDir()
	cfg := syncConfig(t, dir, startSim(t, time.Millisecond))
	f, _ := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "slurm {\n  source   = \"slurmdbd\"\n  cluster  = %q\n  dsn_file = \"/etc/slurm/llmflow-slurmdbd.dsn\"\n  schedule = \"@every 1h\"\n}\n", cluster)
	f.Close()
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"sync", "-c", cfg}, &out, &errb); code != 0 {
		t.Fatalf("sync: %d %s%s", code, out.String(), errb.String())
	}
	srv := startServe(t, cfg, "LLMFLOW_SPOOL_DIR="+filepath.Join(dir, "spool"))
	do := func(method, path, token, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, srv.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	token := func(user string) string {
		var tok struct{ Token string }
		json.Unmarshal(do("POST", "/admin/users/"+user+"/tokens", "master-sync-0123456789abcdef0123456789", `{"name":"t"}`), &tok)
		return tok.Token
	}
	rows := func(tok string) []string {
		var rep adminapi.FairshareReport
		if err := json.Unmarshal(do("GET", "/admin/fairshare", tok, ""), &rep); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range rep.Pools {
			for _, a := range p.Accounts {
				out = append(out, strings.TrimSuffix(a.Account+"/"+a.User, "/"))
			}
		}
		return out
	}
	if got, want := rows(token(carol)), []string{team, team + "/" + bob, team + "/" + carol, proj, proj + "/" + alice}; !slices.Equal(got, want) {
		t.Errorf("team admin %s sees %v, want the team's subtree %v", carol, got, want)
	}
	if got, want := rows(token(alice)), []string{proj + "/" + alice}; !slices.Equal(got, want) {
		t.Errorf("member %s sees %v, want their own association %v", alice, got, want)
	}
	if got, want := rows(token(bob)), []string{team + "/" + bob, other + "/" + bob}; !slices.Equal(got, want) { // a member of both teams
		t.Errorf("member %s sees %v, want their own associations %v", bob, got, want)
	}
}
