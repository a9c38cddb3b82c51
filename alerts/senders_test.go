package alerts_test

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow/alerts"
	"github.com/go-llmflow/llmflow/config"
)

// TestSecretsNeverShown: a webhook that echoes the request (token
// included) in its error body, and a relay that echoes the credentials in
// its refusal: neither the errors, the logs nor the outbox show them.
func TestSecretsNeverShown(t *testing.T) {
	const password = "hunter2-smtp-password"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte("bad token: " + r.Header.Get("Authorization") + " for " + r.URL.Path))
	}))
	defer echo.Close()
	m := startSMTPD(t, &smtpd{user: "llmflow", pass: "the-right-one", echoAuth: true})
	clk := newClock()
	h := &hook{srv: echo}
	r := newRig(t, backends["SQLite"](t)(), h, m, clk, "gw")
	em, err := alerts.NewEmail(alerts.EmailOptions{Server: m.addr(), From: "a@b.org", To: []string{"c@d.org"},
		Username: "llmflow", PasswordFile: secretFile(t, "pass", password), TLS: "none", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	web, _ := alerts.NewWebhook(h.url(t, "/hooks/T0123/B0456"), alerts.WebhookOptions{TokenFile: secretFile(t, "token", token)})
	a := testAlert("s", clk.Now())
	for _, s := range []alerts.Sender{web, em} {
		err := s.Send(t.Context(), a)
		if err == nil {
			t.Fatalf("%s: delivered", s.Channel())
		}
		for _, secret := range []string{token, password, "T0123", "B0456"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s error shows %q: %v", s.Channel(), secret, err)
			}
		}
	}
	d, err := alerts.NewDispatcher(alerts.Options{Store: r.store, Senders: []alerts.Sender{web, em}, Log: newLogger(r.log), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := alerts.NewOutbox(r.store, d.Channels(), nil, nil).Enqueue(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if p, err := d.RunOnce(t.Context()); err != nil || p.Failed != 2 {
		t.Fatalf("pass %+v, %v", p, err)
	}
	checkNoSecrets(t, r, password)
	if !strings.Contains(r.log.String(), "answered 401") || !strings.Contains(r.log.String(), "535") {
		t.Errorf("the log does not say why:\n%s", r.log.String())
	}
	if len(m.mails()) != 0 {
		t.Error("a message was accepted without authentication")
	}
}

// TestWebhookNoRedirect: a 302 is a failed attempt, and the target of the
// redirect never sees the request (nor the token).
func TestWebhookNoRedirect(t *testing.T) {
	var hit atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit.Add(1) }))
	defer target.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer redir.Close()
	h := &hook{srv: redir}
	web, _ := alerts.NewWebhook(h.url(t, "/x"), alerts.WebhookOptions{TokenFile: secretFile(t, "token", token)})
	err := web.Send(t.Context(), testAlert("r", time.Now()))
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Errorf("redirect: %v", err)
	}
	if hit.Load() != 0 {
		t.Error("the redirect was followed")
	}
}

// TestWebhookTimeout: a webhook that never answers fails the attempt when
// the dispatcher's timeout ends.
func TestWebhookTimeout(t *testing.T) {
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer slow.Close()
	defer close(block)
	web, _ := alerts.NewWebhook((&hook{srv: slow}).url(t, "/"), alerts.WebhookOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := web.Send(ctx, testAlert("t", time.Now())); err == nil {
		t.Error("a webhook that never answered was a delivery")
	}
}

func TestWebhookTokenFileMissing(t *testing.T) {
	h := startHook(t, 0)
	missing := filepath.Join(t.TempDir(), "nope")
	web, _ := alerts.NewWebhook(h.url(t, "/"), alerts.WebhookOptions{TokenFile: missing})
	err := web.Send(t.Context(), testAlert("m", time.Now()))
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing token file: %v", err)
	}
	if n, _ := h.snapshot(); n != 0 {
		t.Error("sent without its token")
	}
}

// TestEmailTLS: STARTTLS and implicit TLS against the in-process relay
// with a private CA; credentials only ever go over TLS.
func TestEmailTLS(t *testing.T) {
	srvTLS, pool := selfSigned(t)
	clientTLS := &tls.Config{RootCAs: pool}
	pass := secretFile(t, "pass", "s3cret-pass")
	for _, tc := range []struct {
		name     string
		srv      *smtpd
		mode     string
		wantErr  string
		wantSent bool
	}{
		{"StartTLS", &smtpd{tls: srvTLS, user: "u", pass: "s3cret-pass"}, "starttls", "", true},
		{"Implicit", &smtpd{tls: srvTLS, implicit: true, user: "u", pass: "s3cret-pass"}, "implicit", "", true},
		{"StartTLSNotOffered", &smtpd{user: "u", pass: "s3cret-pass"}, "starttls", "does not offer STARTTLS", false},
		{"UntrustedCert", &smtpd{tls: func() *tls.Config { c, _ := selfSigned(t); return c }(), user: "u", pass: "s3cret-pass"}, "starttls", "certificate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startSMTPD(t, tc.srv)
			em, err := alerts.NewEmail(alerts.EmailOptions{Server: m.addr(), From: "a@b.org", To: []string{"c@d.org"},
				Username: "u", PasswordFile: pass, TLS: tc.mode, TLSConfig: clientTLS})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err = em.Send(ctx, testAlert("tls", time.Now()))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			mails := m.mails()
			if got := len(mails) == 1; got != tc.wantSent {
				t.Fatalf("%d messages accepted", len(mails))
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, underTLS := range m.authOK {
				if !underTLS {
					t.Error("credentials sent without TLS")
				}
			}
			if tc.wantSent && !mails[0].tls {
				t.Error("message sent without TLS")
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	b := alerts.Backoff{Base: 10 * time.Second, Max: time.Hour, Jitter: 0.2}
	for _, tc := range []struct {
		attempts int
		r        float64
		want     time.Duration
	}{
		{1, 0.5, 10 * time.Second},
		{2, 0.5, 20 * time.Second},
		{3, 0.5, 40 * time.Second},
		{1, 0, 8 * time.Second},
		{1, 1, 12 * time.Second},
		{9, 0.5, 2560 * time.Second},
		{10, 0.5, time.Hour},
		{10, 1, time.Hour}, // jitter never passes Max
		{10, 0, 48 * time.Minute},
		{1000, 0.5, time.Hour}, // no overflow
		{0, 0.5, 10 * time.Second},
	} {
		if got := b.Next(tc.attempts, tc.r); got != tc.want {
			t.Errorf("Next(%d, %v) = %v, want %v", tc.attempts, tc.r, got, tc.want)
		}
	}
}

func TestNewDispatcherErrors(t *testing.T) {
	st := backends["SQLite"](t)()
	web, _ := alerts.NewWebhook((&hook{srv: httptest.NewServer(nil)}).url(t, "/"), alerts.WebhookOptions{})
	for name, o := range map[string]alerts.Options{
		"NoStore":     {Senders: []alerts.Sender{web}},
		"NoSender":    {Store: st},
		"TwoWebhooks": {Store: st, Senders: []alerts.Sender{web, web}},
		"ShortLease":  {Store: st, Senders: []alerts.Sender{web}, Timeout: time.Minute, Lease: time.Minute},
		"BadBackoff":  {Store: st, Senders: []alerts.Sender{web}, Backoff: alerts.Backoff{Base: time.Hour, Max: time.Second}},
		"BadJitter":   {Store: st, Senders: []alerts.Sender{web}, Backoff: alerts.Backoff{Base: time.Second, Max: time.Hour, Jitter: 2}},
	} {
		if _, err := alerts.NewDispatcher(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSendersFromConfig builds the senders of a parsed alerts block and
// delivers through both.
func TestSendersFromConfig(t *testing.T) {
	srvTLS, _ := selfSigned(t)
	m := startSMTPD(t, &smtpd{tls: srvTLS, user: "llmflow", pass: "pw"})
	h := startHook(t, 0)
	dir := t.TempDir()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvTLS.Certificates[0].Certificate[0]})
	os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644)
	os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600)
	os.WriteFile(filepath.Join(dir, "pass"), []byte("pw\n"), 0o600)
	src := `alerts {
  webhook_url        = "` + h.srv.URL + `/hook"
  webhook_token_file = "token"
  smtp {
    server        = "` + m.addr() + `"
    from          = "llmflow@example.org"
    to            = ["ops@example.org"]
    username      = "llmflow"
    password_file = "pass"
    ca_file       = "ca.pem"
  }
}
`
	cfg, err := config.Parse(filepath.Join(dir, "gw.hcl"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := config.CheckSecrets(cfg); err != nil {
		t.Fatal(err)
	}
	senders, err := alerts.SendersFromConfig(cfg.Alerts, nil)
	if err != nil || len(senders) != 2 {
		t.Fatalf("senders %v, %v", senders, err)
	}
	for _, s := range senders {
		if err := s.Send(t.Context(), testAlert("cfg", time.Now())); err != nil {
			t.Errorf("%s: %v", s.Channel(), err)
		}
	}
	if _, acc := h.snapshot(); len(acc) != 1 || acc[0].header.Get("Authorization") != "Bearer "+token {
		t.Errorf("webhook got %v", acc)
	}
	if mails := m.mails(); len(mails) != 1 || !mails[0].tls {
		t.Errorf("smtp got %v", mails)
	}
	if _, err := alerts.SendersFromConfig(config.Alerts{}, nil); err == nil {
		t.Error("no channel: accepted")
	}
}

// TestEmailRelayHangs: a relay that accepts the connection and never
// greets fails the attempt when its context ends, nothing else.
func TestEmailRelayHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // never a byte
		}
	}()
	em, _ := alerts.NewEmail(alerts.EmailOptions{Server: ln.Addr().String(), From: "a@b.org", To: []string{"c@d.org"}, TLS: "none"})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := em.Send(ctx, testAlert("hang", time.Now())); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("hanging relay: %v", err)
	}
}

// TestEmailRefusesBadAddresses: addresses that could inject SMTP commands
// or headers are refused when the sender is built.
func TestEmailRefusesBadAddresses(t *testing.T) {
	for _, o := range []alerts.EmailOptions{
		{Server: "h:25", From: "a@b.org\r\nRCPT TO:<x@y>", To: []string{"c@d.org"}},
		{Server: "h:25", From: "a@b.org", To: []string{"c@d.org>"}},
		{Server: "h:25", From: "a@b.org", To: nil},
		{Server: "h", From: "a@b.org", To: []string{"c@d.org"}},
		{Server: "h:25", From: "a@b.org", To: []string{"c@d.org"}, TLS: "ssl"},
	} {
		if _, err := alerts.NewEmail(o); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
}
