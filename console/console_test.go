package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
)

// fakeAuth knows one token ("llma-good", principal "bob") and one user
// ("alice").
type fakeAuth struct{}

func (fakeAuth) UserExists(_ context.Context, name string) error {
	if name == "alice" {
		return nil
	}
	return llmflow.Errorf(llmflow.EUNAUTHORIZED, "no llmflow user")
}

func (fakeAuth) CheckToken(_ *http.Request, tok string) (string, error) {
	if tok == "llma-good" {
		return "bob", nil
	}
	return "", llmflow.Errorf(llmflow.EUNAUTHORIZED, "bad token")
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newTestConsole(t *testing.T, oidc *config.OIDC) (*Console, *clock) {
	t.Helper()
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	c, err := New(Options{Auth: fakeAuth{}, OIDC: oidc, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return c, clk
}

// serve runs one request through c; hdr are header pairs.
func serve(c *Console, method, target, body string, hdr ...string) *http.Response {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w.Result()
}

// signIn signs in with the good token and returns the session cookie
// header and its CSRF token.
func signIn(t *testing.T, c *Console) (cookie, csrf string) {
	t.Helper()
	resp := serve(c, "POST", "/console/login/token", `{"token":"llma-good"}`)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("sign in: %d %s", resp.StatusCode, b)
	}
	var info sessionInfo
	json.NewDecoder(resp.Body).Decode(&info)
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			if !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
				t.Errorf("session cookie %+v: want Secure, HttpOnly, SameSite=Strict, Path=/", ck)
			}
			return ck.Name + "=" + ck.Value, info.CSRF
		}
	}
	t.Fatal("no session cookie")
	return "", ""
}

// TestConsoleRoutes: the console's answers and their security headers,
// signing in with a token (a cross-site sign-in refused), and what is
// refused without single sign-on configured.
func TestConsoleRoutes(t *testing.T) {
	c, _ := newTestConsole(t, nil)
	for _, tc := range []struct {
		name, method, target, body string
		hdr                        []string
		want                       int
		has                        string
	}{
		{"page", "GET", "/console/", "", nil, 200, `src="/console/app.js"`},
		{"script", "GET", "/console/app.js", "", nil, 200, "X-LLMflow-CSRF"},
		{"no slash", "GET", "/console", "", nil, 303, ""},
		{"unknown file", "GET", "/console/nope.js", "", nil, 404, ""},
		{"session, signed out", "GET", "/console/session", "", nil, 200, `"signed_in":false,"oidc":false`},
		{"token sign-in, bad token", "POST", "/console/login/token", `{"token":"llma-bad"}`, nil, 401, "bad token"},
		{"token sign-in, no token", "POST", "/console/login/token", `{}`, nil, 400, ""},
		{"token sign-in, cross-site", "POST", "/console/login/token", `{"token":"llma-good"}`,
			[]string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
		{"sso without oidc", "GET", "/console/login", "", nil, 404, "not configured"},
		{"callback without oidc", "GET", "/console/callback?code=x&state=y", "", []string{"Accept", "text/html"}, 404, "not configured"},
		{"logout, signed out", "POST", "/console/logout", "", nil, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(c, tc.method, tc.target, tc.body, tc.hdr...)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.has) {
				t.Errorf("%d %s, want %d with %q", resp.StatusCode, b, tc.want, tc.has)
			}
			if got := resp.Header.Get("Content-Security-Policy"); got != csp {
				t.Errorf("Content-Security-Policy %q", got)
			}
			if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
	if !strings.Contains(csp, "script-src 'self';") || strings.Contains(csp, "unsafe") {
		t.Errorf("the policy allows inline code: %s", csp)
	}
}

// TestAdminSession: the admin API's view of a session (admin.Sessions):
// none without a cookie; the token behind a live session; writes need the
// CSRF token; an unknown, signed-out or expired session is refused.
func TestAdminSession(t *testing.T) {
	c, clk := newTestConsole(t, nil)
	cookie, csrf := signIn(t, c)
	ask := func(method string, hdr ...string) (string, string, error) {
		r := httptest.NewRequest(method, "/admin/keys", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return c.AdminSession(r)
	}
	for _, tc := range []struct {
		name, method string
		hdr          []string
		token        string
		code         string // error code, "" for none
	}{
		{"no cookie", "GET", nil, "", ""},
		{"read", "GET", []string{"Cookie", cookie}, "llma-good", ""},
		{"write with the CSRF token", "POST", []string{"Cookie", cookie, csrfHeader, csrf}, "llma-good", ""},
		{"write without it", "DELETE", []string{"Cookie", cookie}, "", llmflow.EFORBIDDEN},
		{"write with another", "PUT", []string{"Cookie", cookie, csrfHeader, csrf + "x"}, "", llmflow.EFORBIDDEN},
		{"unknown session", "GET", []string{"Cookie", sessionCookie + "=forged"}, "", llmflow.EUNAUTHORIZED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, tok, err := ask(tc.method, tc.hdr...)
			if user != "" || tok != tc.token || llmflow.ErrorCode(err) != tc.code && !(tc.code == "" && err == nil) {
				t.Errorf("user %q token %q err %v, want token %q code %q", user, tok, err, tc.token, tc.code)
			}
		})
	}

	// signed out: the cookie names nothing any more
	if resp := serve(c, "POST", "/console/logout", "", "Cookie", cookie); resp.StatusCode != 403 {
		t.Errorf("logout without the CSRF token: %d", resp.StatusCode)
	}
	if resp := serve(c, "POST", "/console/logout", "", "Cookie", cookie, csrfHeader, csrf); resp.StatusCode != 200 {
		t.Errorf("logout: %d", resp.StatusCode)
	}
	if _, _, err := ask("GET", "Cookie", cookie); llmflow.ErrorCode(err) != llmflow.EUNAUTHORIZED {
		t.Errorf("after logout: %v", err)
	}

	// expired: a session lasts the session TTL, not a second more
	cookie, _ = signIn(t, c)
	clk.add(config.DefaultSessionTTL - time.Second)
	if _, tok, err := ask("GET", "Cookie", cookie); err != nil || tok == "" {
		t.Errorf("a second before its end: %q %v", tok, err)
	}
	clk.add(time.Second)
	if _, _, err := ask("GET", "Cookie", cookie); llmflow.ErrorCode(err) != llmflow.EUNAUTHORIZED {
		t.Errorf("at its end: %v", err)
	}
}

// TestCallbackRefused: the provider's answer is refused before any call
// to the provider when it does not come back to the browser that started
// the sign-in (no or another state cookie), reuses a state, or reports an
// error.
func TestCallbackRefused(t *testing.T) {
	c, clk := newTestConsole(t, &config.OIDC{Issuer: "http://127.0.0.1:1", ClientID: "x", RedirectURL: "http://127.0.0.1:2/console/callback",
		UsernameClaim: "preferred_username", Scopes: []string{"openid"}, SessionTTL: time.Hour})
	state, _ := c.oidc.begin(clk.now())
	old, _ := c.oidc.begin(clk.now().Add(-loginTTL))
	for _, tc := range []struct {
		name, target string
		hdr          []string
		want         int
		has          string
	}{
		{"no state cookie", "/console/callback?code=c&state=" + state, nil, 401, "started in another browser"},
		{"another browser's state", "/console/callback?code=c&state=" + state, []string{"Cookie", loginCookie + "=" + old}, 401, "sign in again"},
		{"expired state", "/console/callback?code=c&state=" + old, []string{"Cookie", loginCookie + "=" + old}, 401, "sign in again"},
		{"unknown state", "/console/callback?code=c&state=zzz", []string{"Cookie", loginCookie + "=zzz"}, 401, "sign in again"},
		{"provider error", "/console/callback?error=access_denied&error_description=%3Cb%3Eno%3C%2Fb%3E", []string{"Accept", "text/html"}, 401, "access_denied &lt;b&gt;no&lt;/b&gt;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(c, "GET", tc.target, "", tc.hdr...)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.has) {
				t.Errorf("%d %s, want %d with %q", resp.StatusCode, b, tc.want, tc.has)
			}
			for _, ck := range resp.Cookies() {
				if ck.Name == sessionCookie && ck.MaxAge >= 0 {
					t.Errorf("a session was started: %+v", ck)
				}
			}
		})
	}
}
