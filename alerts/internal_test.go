package alerts

import (
	"net/http"
	"net/url"
	"testing"
)

// TestWebhookIgnoresProxies: the transport has no Proxy function, so
// HTTP_PROXY and HTTPS_PROXY are never consulted.
func TestWebhookIgnoresProxies(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
	t.Setenv("HTTP_PROXY", "http://proxy.invalid:3128")
	w, err := NewWebhook(&url.URL{Scheme: "https", Host: "hooks.example.org", Path: "/x"}, WebhookOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, ok := w.client.Transport.(*http.Transport)
	if !ok || tr.Proxy != nil {
		t.Fatalf("transport %T with a proxy function", w.client.Transport)
	}
	if w.client.CheckRedirect == nil {
		t.Error("redirects would be followed")
	}
}
