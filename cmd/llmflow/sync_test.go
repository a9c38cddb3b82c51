package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/admin"
	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/gateway"
	"github.com/go-llmflow/llmflow/vllmsim"
	"github.com/go-sql-driver/mysql"

	"github.com/go-llmflow/llmflow/internal/slurmtest"
)

// syncConfig writes a configuration with a store in dir.
func syncConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	os.WriteFile(filepath.Join(dir, "master.key"), []byte("master-sync-0123456789abcdef0123456789\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "vllm.key"), []byte("sim-secret\n"), 0o600)
	path := filepath.Join(dir, "gateway.hcl")
	os.WriteFile(path, []byte(`
master_key_file = "master.key"
pool "p" { capacity = 16 }
model "m" {
  upstream_model = "sim/llama"
  pool           = "p"
  key_file       = "vllm.key"
  upstream "u" { base_url = "`+extra+`" }
}
store { path = "llmflow.db" }
`), 0o600)
	return path
}

// llmflow sync from a saved sacctmgr listing: dry run, apply, no change,
// history.
func TestSyncCommandFromFile(t *testing.T) {
	dir := t.TempDir()
	cfg := syncConfig(t, dir, "http://127.0.0.1:1")
	listing, _ := filepath.Abs("../../testdata/slurm/sacctmgr/assoc.format.psv")
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"sync", "-c", cfg}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	src := []string{"--from-sacctmgr", "--cluster", "hgx", "--file", listing}
	out, errs, code := run(append(src, "--dry-run")...)
	if code != 0 || !strings.Contains(out, "created     org      etaba") || !strings.Contains(out, "dry-run from file:") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = run(src...)
	if code != 0 || !strings.Contains(out, "applied from file:") || !strings.Contains(out, "created     project  nlp-llm") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errs)
	}
	out, _, code = run(src...)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "unchanged from file:") {
		t.Fatalf("second run changed something: exit %d\n%s", code, out)
	}
	out, _, code = run("--history")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !strings.Contains(lines[1], "unchanged") || !strings.Contains(lines[2], "applied") || !strings.Contains(lines[3], "dry-run (dry run)") {
		t.Fatalf("history: exit %d\n%s", code, out)
	}
	_, errs, code = run("--from-sacctmgr", "--cluster", "hgx", "--sacctmgr", filepath.Join(dir, "no-such-sacctmgr"))
	if code == 0 || !strings.Contains(errs, "no-such-sacctmgr") {
		t.Errorf("missing sacctmgr: exit %d %s", code, errs)
	}
	out, _, _ = run("--history", "--limit", "1")
	if !strings.Contains(out, "failed") {
		t.Errorf("the failed run is not recorded:\n%s", out)
	}
}

// needSlurm fails unless the real Slurm lab runs, or skips when asked.
func needSlurm(t *testing.T) {
	t.Helper()
	if os.Getenv("LLMFLOW_SKIP_SLURM") == "1" {
		t.Skip("LLMFLOW_SKIP_SLURM=1: skipping the real-Slurm test as asked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "sacctmgr", "-n", "-P", "show", "cluster").CombinedOutput(); err != nil {
		t.Fatalf("Slurm is not reachable (%v: %s): run scripts/slurm/setup.sh, or set LLMFLOW_SKIP_SLURM=1 to skip", err, bytes.TrimSpace(out))
	}
}

func sam(t *testing.T, args ...string) {
	t.Helper()
	slurmtest.Sacctmgr(t, args...)
}

// serve follows a real Slurm: the tree and shares it imports on its
// schedule change reservations without a restart, and a team deleted in
// Slurm stops its keys at once.
func TestServeFollowsSlurm(t *testing.T) {
	needSlurm(t)
	b := make([]byte, 4)
	rand.Read(b)
	cluster := "llmt_" + hex.EncodeToString(b)
	orgA, orgB := "ea"+hex.EncodeToString(b), "eb"+hex.EncodeToString(b)
	teamA, teamB := "ta"+hex.EncodeToString(b), "tb"+hex.EncodeToString(b)
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() { exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run() })
	sam(t, "add", "account", orgA, "cluster="+cluster, "fairshare=3")
	sam(t, "add", "account", orgB, "cluster="+cluster, "fairshare=1")
	sam(t, "add", "account", teamA, "parent="+orgA, "cluster="+cluster, "fairshare=1")
	sam(t, "add", "account", teamB, "parent="+orgB, "cluster="+cluster, "fairshare=1")

	sim := vllmsim.New(vllmsim.Config{APIKey: "sim-secret", StepInterval: time.Millisecond})
	simSrv := httptest.NewServer(sim)
	defer func() { simSrv.Close(); sim.Close() }()
	dir := t.TempDir()
	path := syncConfig(t, dir, simSrv.URL)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "slurm {\n  source   = \"sacctmgr\"\n  cluster  = %q\n  schedule = \"@every 1s\"\n}\n", cluster)
	f.Close()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// the first import before serving, as an admin would
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"sync", "-c", path}, &out, &errb); code != 0 {
		t.Fatalf("sync: %d %s%s", code, out.String(), errb.String())
	}
	// the other source sees the same Slurm state: no change
	out.Reset()
	if code := Run(context.Background(), []string{"sync", "-c", path, "--from-slurmdbd", "--dsn-file", "/etc/slurm/llmflow-slurmdbd.dsn", "--dry-run"}, &out, &errb); code != 0 ||
		!strings.HasPrefix(out.String(), "dry-run from slurmdbd:"+cluster+": 0 created, 0 shares changed, 0 re-parented, 0 disabled, 0 re-enabled, 0 members changed") {
		t.Fatalf("slurmdbd after sacctmgr: %d\n%s%s", code, out.String(), errb.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *gateway.Gateway, 1)
	var base string
	var readyAdm *admin.Handler // set before ready is sent
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, "127.0.0.1:0", slog.New(slog.DiscardHandler), func(addr string, gw *gateway.Gateway, adm *admin.Handler) {
			base = "http://" + addr
			readyAdm = adm
			ready <- gw
		})
	}()
	var gw *gateway.Gateway
	select {
	case gw = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	defer func() { cancel(); <-done }()

	reserved := func(acct string) int {
		for _, p := range gw.FairshareReport().Pools {
			for _, a := range p.Accounts {
				if a.Account == acct {
					return a.Reserved
				}
			}
		}
		return -1
	}
	if r := reserved(orgA); r != 12 {
		t.Fatalf("%s reserved %d, want 12 (3/4 of 16)", orgA, r)
	}
	_, keyB, err := readyAdm.CreateKey(ctx, admin.KeyRequest{Team: teamB, Name: "t"},
		admin.Principal{Name: "t", Role: admin.RoleProxyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	call := func() int {
		req, _ := http.NewRequest("POST", base+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x","max_tokens":1}`))
		req.Header.Set("Authorization", "Bearer "+keyB)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := call(); code != 200 {
		t.Fatalf("key of %s: %d", teamB, code)
	}
	// re-share in Slurm: the running gateway follows
	sam(t, "modify", "account", orgA, "where", "cluster="+cluster, "set", "fairshare=1")
	waitUntil(t, 15*time.Second, func() bool { return reserved(orgA) == 8 })
	// delete the team in Slurm: its key stops working
	sam(t, "delete", "account", teamB, "cluster="+cluster)
	waitUntil(t, 15*time.Second, func() bool { return call() == http.StatusForbidden })
	// the history shows the runs, /healthz the last one
	req, _ := http.NewRequest("GET", base+"/admin/sync", nil)
	req.Header.Set("Authorization", "Bearer master-sync-0123456789abcdef0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"outcome":"applied"`) || !strings.Contains(string(body), `"disabled":1`) {
		t.Errorf("GET /admin/sync: %d %s", resp.StatusCode, body)
	}
	// the details need an operator secret (the status alone does not)
	hreq, _ := http.NewRequest("GET", base+"/healthz", nil)
	hreq.Header.Set("Authorization", "Bearer master-sync-0123456789abcdef0123456789")
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if !strings.Contains(string(hb), `"slurm_sync":{"source":"sacctmgr:`+cluster) {
		t.Errorf("healthz lacks the Slurm import: %s", hb)
	}
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Every form of sacctmgr output an admin may have saved is accepted by
// --file: the plain listing, the plain and the withdeleted listing (either
// order), a -n listing with --columns, the dump file. An account deleted
// in Slurm is never announced as created: it is absent unless llmflow knew
// it, then disabled.
func TestSyncFileForms(t *testing.T) {
	caps, _ := filepath.Abs("../../sacctmgr/testdata/slurm")
	f := func(name string) string { return filepath.Join(caps, name) }
	cols := "Cluster,Account,User,Partition,Share,ParentName,ParentID,ID,LFT,RGT,QOS,DefaultQOS,GrpTRES,MaxTRES,GrpTRESMins,MaxTRESMins,GrpJobs,MaxJobs,MaxSubmitJobs,MaxWall,Priority"
	for _, tc := range []struct {
		name       string
		args       []string
		ok         bool
		out, noOut []string // in stdout / not in stdout
		errs       []string // in stderr
	}{
		{"plain listing", []string{"--file", f("assoc.format.psv")}, true,
			[]string{"created     org      etaba", "7 created", `etabb (parent "", shares 3), limits GrpTRES=gres/gpu=16`}, []string{"lab-old"}, nil},
		{"both listings", []string{"--file", f("assoc.format.psv"), "--file", f("assoc.format.withdeleted.psv")}, true,
			[]string{"created     team     lab-chem", "7 created"}, []string{"lab-old"}, nil},
		{"both listings, withdeleted first", []string{"--file", f("assoc.format.withdeleted.psv"), "--file", f("assoc.format.psv")}, true,
			[]string{"7 created"}, []string{"lab-old"}, nil},
		{"two unrelated listings", []string{"--file", f("assoc.format.psv"), "--file", f("assoc.cluster-hgx.psv")}, false,
			nil, nil, []string{"neither listing holds every row of the other"}},
		{"withdeleted alone warns (its content cannot tell)", []string{"--file", f("assoc.format.withdeleted.psv")}, true,
			[]string{"lab-old"}, nil, []string{"its content cannot tell"}},
		{"-n with --columns", []string{"--file", f("assoc.format.noheader.psv"), "--columns", cols}, true,
			[]string{"created     org      etaba", "7 created"}, nil, nil},
		{"-n without --columns", []string{"--file", f("assoc.format.noheader.psv")}, false,
			nil, nil, []string{"--noheader (-n)", "--columns"}},
		{"dump file", []string{"--file", f("dump-hgx.cfg")}, true,
			[]string{"created     org      etaba", "created     project  nlp-llm", `etabb (parent "", shares 3), limits GrpTRES=gres/gpu=16`}, []string{"lab-old"}, nil},
		{"show account listing", []string{"--file", f("account.psv")}, false,
			nil, nil, []string{`use "sacctmgr show assoc"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := syncConfig(t, dir, "http://127.0.0.1:1")
			var out, errb bytes.Buffer
			code := Run(context.Background(), append([]string{"sync", "-c", cfg, "--from-sacctmgr", "--cluster", "hgx", "--dry-run"}, tc.args...), &out, &errb)
			if (code == 0) != tc.ok {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
			}
			for _, s := range tc.out {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, out.String())
				}
			}
			for _, s := range tc.noOut {
				if strings.Contains(out.String(), s) {
					t.Errorf("stdout has %q:\n%s", s, out.String())
				}
			}
			for _, s := range tc.errs {
				if !strings.Contains(errb.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, errb.String())
				}
			}
			for _, s := range []string{"Options.", "ParseAccounts", "ParseAssociations"} {
				if strings.Contains(errb.String(), s) {
					t.Errorf("stderr speaks Go (%q):\n%s", s, errb.String())
				}
			}
		})
	}
	// An account llmflow knew and Slurm deleted since is disabled, never
	// created again.
	dir := t.TempDir()
	cfg := syncConfig(t, dir, "http://127.0.0.1:1")
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := Run(context.Background(), append([]string{"sync", "-c", cfg, "--from-sacctmgr", "--cluster", "hgx"}, args...), &out, &errb); code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
		}
		return out.String()
	}
	run("--file", f("assoc.format.withdeleted.psv")) // lab-old looks live
	out := run("--file", f("assoc.format.psv"), "--file", f("assoc.format.withdeleted.psv"))
	if !strings.Contains(out, "disabled    team     lab-old") || strings.Contains(out, "created     ") || !strings.Contains(out, "1 disabled") {
		t.Errorf("known account deleted in Slurm:\n%s", out)
	}
}

// TestSyncListingByContent: a single --file listing is told by its
// content, never its name, with a real sacctmgr's listings of a cluster
// with a deleted account: the plain listing with LFT,RGT is known plain
// whatever its name (no false warning); a withdeleted listing renamed
// assoc.psv is never imported silently (a warning; refused when said to
// be withdeleted, as alone it cannot tell deleted rows from live ones).
func TestSyncListingByContent(t *testing.T) {
	needSlurm(t)
	mc, err := mysql.ParseDSN(cmp.Or(os.Getenv("LLMFLOW_WRITEBACK_TEST_DSN"), "root@unix(/run/mysqld/mysqld.sock)/slurm_acct_db"))
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := mysql.NewConnector(mc)
	db := sql.OpenDB(conn)
	defer db.Close()
	b := make([]byte, 4)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	cluster, org, team, gone := "llmt_ls"+sfx, "lso"+sfx, "lst"+sfx, "lsg"+sfx
	sam(t, "add", "cluster", cluster)
	t.Cleanup(func() {
		exec.Command("sacctmgr", "-i", "delete", "cluster", cluster).Run()
		db.Exec("DROP TABLE IF EXISTS `" + cluster + "_job_env_table`, `" + cluster + "_job_script_table`")
	})
	sam(t, "add", "account", org, "cluster="+cluster)
	sam(t, "add", "account", team+","+gone, "parent="+org, "cluster="+cluster)
	// slurmdbd hard-deletes a young association that never had jobs:
	// backdate it so that the delete leaves a deleted row, as on a real
	// cluster
	old := time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC).Unix()
	if _, err := db.Exec("UPDATE `"+cluster+"_assoc_table` SET creation_time = ?, mod_time = ? WHERE acct = ?", old, old, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE acct_table SET creation_time = ?, mod_time = ? WHERE name = ?", old, old, gone); err != nil {
		t.Fatal(err)
	}
	sam(t, "delete", "account", gone, "cluster="+cluster)

	dir := t.TempDir()
	list := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command("sacctmgr", append([]string{"-P", "show", "assoc", "where", "cluster=" + cluster}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, out, 0o600)
		return p
	}
	nested := "format=Cluster,Account,User,Partition,Share,ParentName,LFT,RGT"
	plainNamedWD := list("withdeleted-assoc.psv", nested)
	renamedWD := list("assoc.psv", "withdeleted", nested)
	plainShort := list("short.psv", "format=Cluster,Account,User,Partition,Share,ParentName")
	if b, _ := os.ReadFile(renamedWD); !strings.Contains(string(b), gone) {
		t.Fatalf("setup: the withdeleted listing lacks %s:\n%s", gone, b)
	}

	cfg := syncConfig(t, dir, "http://127.0.0.1:1")
	for _, tc := range []struct {
		name      string
		args      []string
		ok        bool
		warn      bool // a warning on stderr
		errs      string
		importsGo bool // gone is created (imported as live)
	}{
		{"plain named withdeleted: plain by its holes, no warning", []string{"--file", plainNamedWD}, true, false, "", false},
		{"withdeleted renamed: not silent", []string{"--file", renamedWD}, true, true, "its content cannot tell", true},
		{"withdeleted renamed, said so: refused", []string{"--file", renamedWD, "--listing", "withdeleted"}, false, false, "cannot tell deleted associations", false},
		{"the plain listing said withdeleted: refused", []string{"--file", plainNamedWD, "--listing", "withdeleted"}, false, false, "it is the plain listing", false},
		{"plain without LFT,RGT: a warning", []string{"--file", plainShort}, true, true, "its content cannot tell", false},
		{"plain without LFT,RGT, said plain: silent", []string{"--file", plainShort, "--listing", "plain"}, true, false, "", false},
		{"both, named anyhow", []string{"--file", renamedWD, "--file", plainNamedWD}, true, false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Run(context.Background(), append([]string{"sync", "-c", cfg, "--from-sacctmgr", "--cluster", cluster, "--dry-run"}, tc.args...), &out, &errb)
			switch {
			case (code == 0) != tc.ok:
				t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
			case tc.warn != strings.Contains(errb.String(), "warning:"):
				t.Errorf("warning %v, want %v:\n%s", !tc.warn, tc.warn, errb.String())
			case !strings.Contains(errb.String(), tc.errs):
				t.Errorf("stderr lacks %q:\n%s", tc.errs, errb.String())
			case tc.ok && strings.Contains(out.String(), "created     team     "+gone) != tc.importsGo:
				t.Errorf("%s imported as live: %v, want %v:\n%s", gone, !tc.importsGo, tc.importsGo, out.String())
			}
		})
	}
}
