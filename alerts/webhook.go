package alerts

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/redact"
)

// Webhook POSTs alerts as JSON to a URL:
//
//	{"type":"budget.soft_limit","id":…,"budget_id":…,"scope_kind":…,
//	 "scope_name":…,"model":…,"period":…,"period_start":…,
//	 "limit_gpu_hours":…,"soft_limit_gpu_hours":…,"spent_gpu_hours":…,
//	 "at":…,"text":"…"}
//
// with Authorization: Bearer <token file> when a token file is set, and
// Idempotency-Key: <alert ID>. Any 2xx answer is a delivery; anything
// else (a redirect included: none is followed) is a failed attempt.
// Environment proxies are ignored. Errors name the URL's scheme and host
// only: webhook URLs often carry a secret in their path.
type Webhook struct {
	url       *url.URL
	tokenFile string
	client    *http.Client
}

// WebhookOptions tune NewWebhook.
type WebhookOptions struct {
	// TokenFile holds the bearer token, re-read at every attempt (so a
	// rotated token is used without a restart); "" = no Authorization.
	TokenFile string
	// Timeout bounds connecting and the TLS handshake (the whole attempt
	// is bounded by the Dispatcher). Default DefaultTimeout.
	Timeout time.Duration
	// TLSConfig replaces the default TLS settings (tests: a private CA).
	TLSConfig *tls.Config
}

// NewWebhook returns a webhook sender for u (http or https).
func NewWebhook(u *url.URL, o WebhookOptions) (*Webhook, error) {
	if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("webhook: URL must be http or https with a host")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	dialer := &net.Dialer{Timeout: o.Timeout}
	tr := &http.Transport{
		Proxy:                 nil, // never an environment proxy
		DialContext:           dialer.DialContext,
		TLSClientConfig:       o.TLSConfig,
		TLSHandshakeTimeout:   o.Timeout,
		ResponseHeaderTimeout: o.Timeout,
		MaxIdleConns:          2,
		IdleConnTimeout:       time.Minute,
		ForceAttemptHTTP2:     true,
	}
	return &Webhook{
		url:       u,
		tokenFile: o.TokenFile,
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// Channel is ChannelWebhook.
func (w *Webhook) Channel() string { return ChannelWebhook }

// where names the webhook in errors: scheme and host, never the path.
func (w *Webhook) where() string { return w.url.Scheme + "://" + w.url.Host }

// maxDrain is what is read of an answer so that the connection can be
// reused; the rest is dropped with the connection.
const maxDrain = 64 << 10

// Send posts a once.
func (w *Webhook) Send(ctx context.Context, a Alert) error {
	var token string
	if w.tokenFile != "" {
		var err error
		if token, err = config.ReadSecret(w.tokenFile); err != nil {
			return fmt.Errorf("webhook token: %w", err) // names the path, never the content
		}
	}
	body, err := json.Marshal(webhookBody{Type: "budget.soft_limit", Alert: a, Text: a.Summary()})
	if err != nil {
		return fmt.Errorf("webhook %s: %w", w.where(), err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook %s: invalid request", w.where())
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "llmflow-alerts")
	req.Header.Set("Idempotency-Key", a.ID)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error repeats the whole URL
		}
		return fmt.Errorf("webhook %s: %s", w.where(), redact.String(err.Error(), w.secrets(token)...))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("webhook %s: answered %d, a redirect (not followed: set webhook_url to the final URL)", w.where(), resp.StatusCode)
	default:
		return fmt.Errorf("webhook %s: answered %d", w.where(), resp.StatusCode)
	}
}

// secrets are the strings an error must not show.
func (w *Webhook) secrets(token string) []string {
	out := []string{token, w.url.String()}
	if len(w.url.Path) > 1 {
		out = append(out, w.url.Path)
	}
	return out
}
