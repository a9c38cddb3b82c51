package alerts

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-llmflow/llmflow/config"
)

// SendersFromConfig returns the senders of an alerts block: a Webhook when
// webhook_url is set, an Email when smtp is. It reads smtp's ca_file; the
// secret files are read at each attempt (config.CheckSecrets checks them
// at start). now dates the e-mails (nil: time.Now).
func SendersFromConfig(al config.Alerts, now func() time.Time) ([]Sender, error) {
	var out []Sender
	if al.WebhookURL != nil {
		w, err := NewWebhook(al.WebhookURL, WebhookOptions{TokenFile: al.WebhookTokenFile, Timeout: al.Timeout})
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if s := al.SMTP; s != nil {
		var tc *tls.Config
		if s.CAFile != "" {
			pem, err := os.ReadFile(s.CAFile)
			if err != nil {
				return nil, fmt.Errorf("smtp ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("smtp ca_file %s: no PEM certificate in it", s.CAFile)
			}
			tc = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		e, err := NewEmail(EmailOptions{Server: s.Server, From: s.From, To: s.To, Username: s.Username,
			PasswordFile: s.PasswordFile, TLS: s.TLS, TLSConfig: tc, Now: now})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("alerts: nowhere to send (no webhook_url, no smtp block)")
	}
	return out, nil
}
