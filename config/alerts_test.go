package config_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/go-llmflow/llmflow/config"
)

func TestParse_Alerts(t *testing.T) {
	cfg := mustParse(t, "/etc/llmflow/gw.hcl", `
alerts {
  webhook_url        = "https://hooks.example.org/llmflow/"
  webhook_token_file = "webhook.token"
  timeout            = "3s"
  soft_limit_percent = 90.5
  smtp {
    server        = "smtp.example.org:587"
    from          = "llmflow@example.org"
    to            = ["hpc@example.org", "ops@example.org"]
    username      = "llmflow"
    password_file = "/run/secrets/smtp.pass"
    tls           = "implicit"
    ca_file       = "ca.pem"
  }
}
`)
	al := cfg.Alerts
	if !al.Enabled() || al.WebhookURL.String() != "https://hooks.example.org/llmflow" {
		t.Fatalf("alerts %+v", al)
	}
	want := config.SMTP{Server: "smtp.example.org:587", From: "llmflow@example.org", To: []string{"hpc@example.org", "ops@example.org"},
		Username: "llmflow", PasswordFile: "/run/secrets/smtp.pass", TLS: "implicit", CAFile: filepath.FromSlash("/etc/llmflow/ca.pem")}
	if diff := cmp.Diff(&want, al.SMTP); diff != "" {
		t.Errorf("smtp (-want +got):\n%s", diff)
	}
	if al.WebhookTokenFile != filepath.FromSlash("/etc/llmflow/webhook.token") || al.Timeout != 3*time.Second || al.SoftLimitPercent != 90.5 {
		t.Errorf("alerts %+v", al)
	}
	var secrets []string
	for _, s := range cfg.Secrets() {
		if s.Range.Start.Line == 0 {
			t.Errorf("secret %s without a position", s.What)
		}
		secrets = append(secrets, s.What+"="+s.Path)
	}
	wantSecrets := []string{"alerts webhook_token_file=" + filepath.FromSlash("/etc/llmflow/webhook.token"), "alerts smtp password_file=/run/secrets/smtp.pass"}
	if diff := cmp.Diff(wantSecrets, secrets); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
}

func TestParse_AlertsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      config.Alerts
	}{
		{"None", ``, config.Alerts{}},
		{"Webhook", `alerts { webhook_url = "https://h.example.org/x" }`,
			config.Alerts{Timeout: config.DefaultAlertTimeout, SoftLimitPercent: config.DefaultSoftLimitPercent}},
		{"ZeroPercent", `alerts {
  webhook_url = "https://h.example.org/x"
  soft_limit_percent = 0
}`, config.Alerts{Timeout: config.DefaultAlertTimeout}},
		{"SMTPDefaults", `alerts {
  smtp {
    server = "[::1]:25"
    from = "a@b.org"
    to = ["c@d.org"]
  }
}`, config.Alerts{Timeout: config.DefaultAlertTimeout, SoftLimitPercent: config.DefaultSoftLimitPercent,
			SMTP: &config.SMTP{Server: "[::1]:25", From: "a@b.org", To: []string{"c@d.org"}, TLS: "starttls"}}},
		// a plain relay on loopback may take credentials; a token may go
		// to an http webhook on loopback
		{"Loopback", `alerts {
  webhook_url = "http://127.0.0.1:9000/hook"
  webhook_token_file = "t"
  smtp {
    server = "localhost:2525"
    from = "a@b.org"
    to = ["c@d.org"]
    username = "u"
    password_file = "p"
    tls = "none"
  }
}`, config.Alerts{Timeout: config.DefaultAlertTimeout, SoftLimitPercent: config.DefaultSoftLimitPercent, WebhookTokenFile: "t",
			SMTP: &config.SMTP{Server: "localhost:2525", From: "a@b.org", To: []string{"c@d.org"}, Username: "u", PasswordFile: "p", TLS: "none"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustParse(t, "gw.hcl", tc.src).Alerts
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(config.Alerts{}, "DefRange", "WebhookURL")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.Enabled() != strings.Contains(tc.src, "alerts") {
				t.Errorf("Enabled() = %v", got.Enabled())
			}
		})
	}
}
