package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/server"
	"github.com/go-llmflow/llmflow/vllmsim"
)

const (
	masterKey    = "master-secret-for-console-tests-0123456789"
	clientID     = "llmflow" // the README's
	clientSecret = "console-client-secret"
)

// chromium returns Debian's chromium (or LLMFLOW_CHROMIUM), skipping the
// test when there is none; scripts/test.sh installs it and sets
// LLMFLOW_REQUIRE_CHROMIUM=1, so that in CI a missing browser fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LLMFLOW_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no chromium on PATH (apt-get install chromium; scripts/test.sh installs it)"
	if os.Getenv("LLMFLOW_REQUIRE_CHROMIUM") == "1" {
		t.Fatal(msg + ", and LLMFLOW_REQUIRE_CHROMIUM=1")
	}
	t.Skip(msg + ": the console's browser test is skipped")
	return ""
}

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startOP starts a real OpenID Connect provider (zitadel/oidc's op
// package with its example storage and login page) on loopback, with
// the users given (username → password) and the console registered as a
// confidential web client whose redirect URI is redirect.
func startOP(t *testing.T, redirect string, users map[string]string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + l.Addr().String()
	byID := map[string]*storage.User{}
	i := 0
	for name, pw := range users {
		i++
		id := "id" + strconv.Itoa(i)
		byID[id] = &storage.User{ID: id, Username: name, Password: pw, FirstName: name, LastName: "Test", Email: name + "@example.org", EmailVerified: true}
	}
	file := filepath.Join(t.TempDir(), "users.json")
	b, _ := json.Marshal(byID)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	us, err := storage.StoreFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	storage.RegisterClients(storage.WebClient(clientID, clientSecret, redirect))
	router := exampleop.SetupServer(issuer, storage.NewStorage(us), slog.New(slog.DiscardHandler), false)
	srv := httptest.NewUnstartedServer(router)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return issuer
}

// readmeOIDC is the README's oidc and self_service configuration, verbatim
// but for the provider's and the console's addresses and the secret
// file's place: the registration the README shows is the one tested.
func readmeOIDC(t *testing.T, addr, issuer string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```hcl\noidc {\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```hcl block starting with oidc {")
	}
	block = "oidc {\n" + block
	for _, r := range [][2]string{
		{`"https://keycloak.example.org/realms/hpc"`, strconv.Quote(issuer)},
		{`"https://llmflow.example.org/console/callback"`, strconv.Quote("http://" + addr + "/console/callback")},
		{`"/etc/llmflow/oidc.secret"`, `"oidc.secret"`},
	} {
		if !strings.Contains(block, r[0]) {
			t.Fatalf("README.md's oidc block no longer has %s:\n%s", r[0], block)
		}
		block = strings.ReplaceAll(block, r[0], r[1])
	}
	return block
}

// gateway runs llmflow serve (server.Run) with the console and single
// sign-on through issuer (the README's oidc block), in front of a
// simulated vLLM; it returns the gateway's base URL.
func startGateway(t *testing.T, addr, issuer, extra string) string {
	t.Helper()
	sim := vllmsim.New(vllmsim.Config{APIKey: "upstream-key", Sched: vllmsim.SchedConfig{MaxNumSeqs: 64, KVBlocks: 1 << 14}})
	up := httptest.NewServer(sim)
	t.Cleanup(func() { up.CloseClientConnections(); sim.Close(); up.Close() })
	dir := t.TempDir()
	for name, v := range map[string]string{"master.key": masterKey, "vllm.key": "upstream-key", "oidc.secret": clientSecret} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
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
    input_per_mtok  = 100
    output_per_mtok = 1000
  }
  upstream "u" { base_url = %q }
}
store {
  path           = "llmflow.db"
  flush_interval = "10ms"
}
%s
%s
`, up.URL, readmeOIDC(t, addr, issuer), extra)
	file := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := config.CheckSecrets(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- server.Run(ctx, cfg, server.Options{Listen: addr, Log: slog.New(slog.DiscardHandler), Ready: func(server.Started) { close(ready) }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start in 30 s")
	}
	return "http://" + addr
}

// call sends a request to the gateway: bearer token tok ("" for none),
// extra headers as pairs. It returns the status and the body.
func call(t *testing.T, method, url, tok, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func must(t *testing.T, want int, method, url, tok, body string) string {
	t.Helper()
	code, b := call(t, method, url, tok, body)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, code, b, want)
	}
	return b
}

// TestConsoleInBrowser drives the console in Debian's chromium, headless:
// a researcher (alice, a member of lab-nlp as a Slurm association makes
// her) signs in through a real OpenID Connect provider, sees the
// remaining budget of her team that the API also returns and only her
// scopes, creates a key (its secret shown once, and it works), revokes it
// (and it stops), and the page's screenshot is not blank. With her
// session's cookie, a write without the CSRF token, from another origin,
// or after signing out is refused.
func TestConsoleInBrowser(t *testing.T) {
	chrome := chromium(t)
	addr := freeAddr(t)
	issuer := startOP(t, "http://"+addr+"/console/callback", map[string]string{"alice": "alice-password", "mallory": "mallory-password"})
	base := startGateway(t, addr, issuer, "")

	// the tree as Slurm would give it: alice has an association in lab-nlp
	must(t, 201, "POST", base+"/admin/users", masterKey, `{"name":"alice"}`)
	must(t, 200, "PUT", base+"/admin/users/alice/roles", masterKey, `{"role":"member","team":"lab-nlp"}`)
	must(t, 200, "PUT", base+"/admin/budgets", masterKey, `{"kind":"team","name":"lab-nlp","period":"month","max_cost":10}`)
	must(t, 200, "PUT", base+"/admin/budgets", masterKey, `{"kind":"team","name":"lab-chem","period":"month","max_cost":77}`)
	var k struct{ Key string }
	json.Unmarshal([]byte(must(t, 201, "POST", base+"/admin/keys", masterKey, `{"team":"lab-nlp","name":"batch","owner":"alice"}`)), &k)
	must(t, 200, "POST", base+"/v1/chat/completions", k.Key, `{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"hello there"}]}`)
	var budgets struct {
		Data []struct {
			Name      string  `json:"name"`
			Spent     float64 `json:"spent"`
			Held      float64 `json:"held"`
			Remaining float64 `json:"remaining"`
		} `json:"data"`
	}
	remaining := ""
	deadline := time.Now().Add(10 * time.Second)
	for remaining == "" {
		json.Unmarshal([]byte(must(t, 200, "GET", base+"/admin/budgets?kind=team&name=lab-nlp", masterKey, "")), &budgets)
		if len(budgets.Data) == 1 && budgets.Data[0].Spent > 0 && budgets.Data[0].Held == 0 {
			remaining = strconv.FormatFloat(budgets.Data[0].Remaining, 'f', 4, 64)
		} else if time.Now().After(deadline) {
			t.Fatalf("the request's cost never settled: %+v", budgets)
		}
	}
	if remaining == "10.0000" {
		t.Fatalf("remaining %s: the request cost nothing", remaining)
	}
	// and its record is in the store (the chart's source)
	spent := strconv.FormatFloat(budgets.Data[0].Spent, 'f', 4, 64)
	day := time.Now().UTC().Format(time.DateOnly)
	next := time.Now().UTC().Add(24 * time.Hour).Format(time.DateOnly)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(must(t, 200, "GET", base+"/admin/spend?from="+day+"&to="+next, masterKey, ""), `"requests":1`); {
		if time.Now().After(deadline) {
			t.Fatal("the request's record is not in the store after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	// the browser starts with ctx (a step's shorter context must not own it)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// step runs actions, each step within 20 s; on failure it shows the
	// page's text
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%s: %v\nthe page:\n%s", what, err, page)
		}
	}
	text := func(what string, a chromedp.Action[string]) string {
		t.Helper()
		s, err := chromedp.Run(ctx, a)
		if err != nil {
			t.Fatalf("text of %s: %v", what, err)
		}
		return s
	}
	step("sign in through the provider",
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.ID("sso")),
		chromedp.Click(chromedp.ID("sso")),
		// the provider's login page
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), "alice"),
		chromedp.SendKeys(chromedp.ID("password"), "alice-password"),
		chromedp.Submit(chromedp.ID("password")),
		// back in the console, signed in
		chromedp.WaitVisible(chromedp.ID("self-budget-team-lab-nlp-remaining")),
	)
	who, shown := text("#who", chromedp.Text(chromedp.ID("who"))), text("the remaining budget", chromedp.Text(chromedp.ID("self-budget-team-lab-nlp-remaining")))
	others, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#tab-share, #tab-audit, #tab-users, #self-budget-team-lab-chem").length`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(who, "alice") || !strings.Contains(who, "member@lab-nlp") {
		t.Errorf("signed in as %q", who)
	}
	if shown != remaining {
		t.Errorf("the console shows %s GPU-hours left on lab-nlp; the API says %s", shown, remaining)
	}
	if others != 0 {
		t.Errorf("a member sees %d elements of other scopes or admin tabs", others)
	}

	// the screenshot: the overview with its chart
	step("the chart", chromedp.WaitVisible(chromedp.ID("usage-total")))
	if total := text("the chart's total", chromedp.Text(chromedp.ID("usage-total"))); total != "Total: "+spent+" GPU-hours" {
		t.Errorf("the chart's total is %q; the API says %s GPU-hours were spent", total, spent)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	checkNotBlank(t, shot)
	if p := os.Getenv("LLMFLOW_CONSOLE_SCREENSHOT"); p != "" {
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// a key of her own: the secret shown once; it works; revoked, it stops
	step("create a key",
		chromedp.Click(chromedp.ID("tab-keys")),
		chromedp.WaitVisible(chromedp.ID("key-name")),
		chromedp.SendKeys(chromedp.ID("key-name"), "from-the-console"),
		chromedp.Click(chromedp.ID("key-create")),
		chromedp.WaitVisible(chromedp.ID("new-secret")),
	)
	secret := text("#new-secret", chromedp.Text(chromedp.ID("new-secret")))
	if !strings.HasPrefix(secret, "llmf-") {
		t.Fatalf("secret shown %q", secret)
	}
	var me struct {
		Key    struct{ ID, Owner string }
		Scopes struct{ Team string }
	}
	json.Unmarshal([]byte(must(t, 200, "GET", base+"/v1/me", secret, "")), &me)
	if me.Key.Owner != "alice" || me.Scopes.Team != "lab-nlp" {
		t.Errorf("/v1/me of the new key: %+v", me)
	}
	// rotated: a new secret shown once, the old one still working (1h grace)
	rotate := chromedp.ID("rotate-" + me.Key.ID)
	step("rotate the key", chromedp.Click(rotate), chromedp.WaitVisible(rotate), chromedp.Click(rotate))
	rotated := text("the rotated key's secret", chromedp.Poll[string](
		`(s => s && s.startsWith("llmf-") && s !== `+strconv.Quote(secret)+` ? s : null)(document.getElementById("new-secret")?.textContent)`))
	for _, s := range []string{secret, rotated} {
		if code, body := call(t, "GET", base+"/v1/me", s, ""); code != 200 || !strings.Contains(body, `"previous_valid_until"`) {
			t.Errorf("a secret of the rotated key: %d %s", code, body)
		}
	}
	revoke := chromedp.ID("revoke-" + me.Key.ID)
	step("revoke the key",
		chromedp.Click(revoke),
		// armed ("Confirm revoke") before the second click: a listing
		// re-rendered between the clicks would otherwise only arm it again
		chromedp.WaitVisible(chromedp.CSS("#revoke-"+me.Key.ID+"[data-armed='1']")),
		chromedp.Click(revoke),
		// the listing of active keys no longer has it
		chromedp.WaitNotPresent(chromedp.ID("key-"+me.Key.ID)),
	)
	for _, s := range []string{secret, rotated} {
		if code, body := call(t, "GET", base+"/v1/me", s, ""); code != http.StatusUnauthorized {
			t.Errorf("revoked key: %d %s", code, body)
		}
	}

	// her session's cookie outside the page
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	cookies := res.Cookies
	var cookie string
	for _, c := range cookies {
		if c.Name == "__Host-llmflow-session" {
			if !c.HTTPOnly || !c.Secure || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("session cookie %+v: want HttpOnly, Secure, SameSite=Strict", c)
			}
			cookie = c.Name + "=" + c.Value
		}
	}
	if cookie == "" {
		t.Fatalf("no session cookie among %d", len(cookies))
	}
	var sess struct{ CSRF string }
	code, body := call(t, "GET", base+"/console/session", "", "", "Cookie", cookie)
	json.Unmarshal([]byte(body), &sess)
	if code != 200 || sess.CSRF == "" {
		t.Fatalf("session: %d %s", code, body)
	}
	keyBody := `{"team":"lab-nlp","name":"forged"}`
	for _, tc := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"read with the cookie", nil, 200},
		{"write without the CSRF token (forged)", []string{}, 403},
		{"write with a wrong CSRF token", []string{"X-LLMflow-CSRF", "not-it"}, 403},
		{"write from another origin", []string{"X-LLMflow-CSRF", sess.CSRF, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403},
		{"write with the token, same origin", []string{"X-LLMflow-CSRF", sess.CSRF, "Origin", base, "Sec-Fetch-Site", "same-origin"}, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, b := "POST", keyBody
			if tc.hdr == nil {
				method, b = "GET", ""
			}
			code, body := call(t, method, base+"/admin/keys", "", b, append([]string{"Cookie", cookie}, tc.hdr...)...)
			if code != tc.want {
				t.Errorf("%d %s, want %d", code, body, tc.want)
			}
		})
	}
	if code, body := call(t, "GET", base+"/console/", "", ""); code != 200 || !strings.Contains(body, "app.js") {
		t.Errorf("GET /console/: %d", code)
	}
	// signed out: the cookie is worth nothing, the page shows the sign-in
	// signing out ends the session here and sends the browser to the
	// provider's logout (RP-initiated: end_session_endpoint with the ID token)
	step("sign out", chromedp.Click(chromedp.ID("logout")))
	// (a navigation ends a Poll: evaluate again until it holds)
	for deadline := time.Now().Add(20 * time.Second); ; {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`location.href.startsWith(`+strconv.Quote(issuer)+`) && document.body.innerText.includes("signed out successfully")`))
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
			t.Fatalf("not signed out at the provider after 20 s: %v\n%s", err, page)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := call(t, "GET", base+"/admin/whoami", "", "", "Cookie", cookie); code != http.StatusUnauthorized {
		t.Errorf("after sign-out: %d %s", code, body)
	}

	// someone the provider knows but llmflow does not: told, no session
	step("sign in as mallory",
		chromedp.Navigate(base+"/console/login"),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), "mallory"),
		chromedp.SendKeys(chromedp.ID("password"), "mallory-password"),
		chromedp.Submit(chromedp.ID("password")),
		chromedp.WaitVisible(chromedp.CSS("p.error")),
	)
	page := text("the error", chromedp.Text(chromedp.CSS("p.error")))
	if !strings.Contains(page, `"mallory"`) || !strings.Contains(page, "no llmflow user") {
		t.Errorf("mallory's page: %q", page)
	}

	// an administrator signs in with the master key (tokens keep working)
	// and sees the whole tree, live
	step("sign in with the master key",
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), masterKey),
		chromedp.Click(chromedp.ID("token-submit")),
		chromedp.WaitVisible(chromedp.ID("tab-share")),
		chromedp.Click(chromedp.ID("tab-share")),
		chromedp.WaitVisible(chromedp.ID("share-p")),
	)
	tree := text("the fair-share tree", chromedp.Text(chromedp.ID("share-p")))
	for _, want := range []string{"etabA", "lab-nlp", "etabB", "lab-chem"} {
		if !strings.Contains(tree, want) {
			t.Errorf("the tree lacks %s:\n%s", want, tree)
		}
	}
	if who := text("#who", chromedp.Text(chromedp.ID("who"))); !strings.Contains(who, "master key") {
		t.Errorf("signed in with the master key as %q", who)
	}
	if p := os.Getenv("LLMFLOW_CONSOLE_SCREENSHOT_ADMIN"); p != "" {
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// and sets a key's limits
	var batch struct{ Key struct{ ID string } }
	json.Unmarshal([]byte(must(t, 200, "GET", base+"/v1/me", k.Key, "")), &batch)
	step("set a key's limits",
		chromedp.Click(chromedp.ID("tab-keys")),
		chromedp.WaitVisible(chromedp.ID("limits-"+batch.Key.ID)),
		chromedp.Click(chromedp.ID("limits-"+batch.Key.ID)),
		chromedp.WaitVisible(chromedp.ID("limits-rpm")),
		chromedp.SetValue(chromedp.ID("limits-rpm"), "42"),
		chromedp.Click(chromedp.ID("limits-save")),
		chromedp.WaitVisible(chromedp.ID("limits-saved")),
	)
	if body := must(t, 200, "GET", base+"/admin/keys/"+batch.Key.ID, masterKey, ""); !strings.Contains(body, `"rpm":42`) {
		t.Errorf("after setting the limits in the console: %s", body)
	}

	// sets a budget, grants a role and removes it
	step("set a budget",
		chromedp.Click(chromedp.ID("tab-budgets")),
		chromedp.WaitVisible(chromedp.ID("budget-name")),
		chromedp.SendKeys(chromedp.ID("budget-name"), "lab-chem"),
		chromedp.SetValue(chromedp.ID("budget-max"), "55"),
		chromedp.Click(chromedp.ID("budget-save")),
	)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("all-budget-team-lab-chem-remaining")?.textContent === "55.0000"`)); err != nil {
		t.Fatalf("the budget set in the console is not listed: %v", err)
	}
	if body := must(t, 200, "GET", base+"/admin/budgets?kind=team&name=lab-chem", masterKey, ""); !strings.Contains(body, `"max_cost":55`) {
		t.Errorf("after setting the budget in the console: %s", body)
	}
	step("grant a role",
		chromedp.Click(chromedp.ID("tab-users")),
		chromedp.WaitVisible(chromedp.ID("grant-user")),
		chromedp.SendKeys(chromedp.ID("grant-user"), "alice"),
		chromedp.SetValue(chromedp.ID("grant-role"), "viewer"),
		chromedp.SendKeys(chromedp.ID("grant-scope"), "etabB"),
		chromedp.Click(chromedp.ID("grant-save")),
		chromedp.WaitVisible(chromedp.ID("unrole-alice-viewer-etabB")),
	)
	if body := must(t, 200, "GET", base+"/admin/users/alice/roles", masterKey, ""); !strings.Contains(body, `"role":"viewer","org":"etabB"`) {
		t.Errorf("after granting in the console: %s", body)
	}
	step("remove the role", chromedp.Click(chromedp.ID("unrole-alice-viewer-etabB")), chromedp.WaitNotPresent(chromedp.ID("unrole-alice-viewer-etabB")))
	if body := must(t, 200, "GET", base+"/admin/users/alice/roles", masterKey, ""); strings.Contains(body, "etabB") {
		t.Errorf("after removing in the console: %s", body)
	}
}

// checkNotBlank fails unless the PNG shows a page: many colours, and
// neither one colour nor almost all white.
func checkNotBlank(t *testing.T, shot []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	colours := map[[3]uint32]int{}
	b := img.Bounds()
	n := 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
			n++
		}
	}
	top := 0
	for _, c := range colours {
		top = max(top, c)
	}
	if b.Dx() < 800 || len(colours) < 20 || top > n*97/100 {
		t.Errorf("the screenshot looks blank: %dx%d, %d colours, the commonest on %d of %d pixels", b.Dx(), b.Dy(), len(colours), top, n)
	}
}
