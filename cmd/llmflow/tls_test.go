package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCert writes a self-signed certificate for 127.0.0.1 with the given
// serial to certFile and keyFile (0600) and returns it.
func testCert(t *testing.T, serial int64, certFile, keyFile string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "llmflow test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLSCertificateReload: with a tls block the gateway serves HTTPS (and
// HTTP/2); after the certificate files are replaced, SIGHUP makes new
// connections get the new certificate while a kept-alive connection goes
// on; a broken certificate at the next SIGHUP leaves the running one.
func TestTLSCertificateReload(t *testing.T) {
	sim := startSim(t, time.Millisecond)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key")
	first := testCert(t, 1, certFile, keyFile)
	cfg := procConfig(t, dir, sim, "store {\n  path = \"llmflow.db\"\n}\ntls {\n  cert_file = \"gw.crt\"\n  key_file  = \"gw.key\"\n}\n")
	p := startServe(t, cfg)
	base := strings.Replace(p.base, "http://", "https://", 1)
	roots := x509.NewCertPool()
	roots.AddCert(first)
	client := func(roots *x509.CertPool) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	}
	// serial of the certificate a request's connection was made with, and
	// whether it was reused
	get := func(c *http.Client) (serial int64, proto string, reused bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
		}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET /healthz over TLS: %v\n%s", err, p.logs)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS == nil {
			t.Fatalf("GET /healthz: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), resp.Proto, reused
	}
	kept := client(roots)
	if s, proto, _ := get(kept); s != 1 || proto != "HTTP/2.0" {
		t.Fatalf("first certificate: serial %d over %s, want 1 over HTTP/2.0", s, proto)
	}
	// the certificate's end of validity, for the alert on its expiry
	notAfter := func() float64 {
		t.Helper()
		resp, err := kept.Get(base + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "llmflow_tls_cert_not_after_timestamp_seconds "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("llmflow_tls_cert_not_after_timestamp_seconds %q: %v", v, err)
				}
				return f
			}
		}
		t.Fatalf("/metrics lacks llmflow_tls_cert_not_after_timestamp_seconds")
		return 0
	}
	// compared as numbers: the exposition format's spelling of a float
	// depends on its digits (1.7961576e+09 for a round timestamp)
	if got, want := notAfter(), float64(first.NotAfter.Unix()); got != want {
		t.Errorf("llmflow_tls_cert_not_after_timestamp_seconds %v, want %v", got, want)
	}
	// plain HTTP on the TLS port is refused
	if resp, err := http.Get(p.base + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: %d", resp.StatusCode)
		}
	}

	second := testCert(t, 2, certFile, keyFile)
	roots.AddCert(second)
	p.signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fresh := client(roots)
		s, _, _ := get(fresh)
		fresh.CloseIdleConnections()
		if s == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new connections still get serial %d after SIGHUP\n%s", s, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, _, reused := get(kept); s != 1 || !reused {
		t.Errorf("the kept-alive connection: serial %d, reused %v; want the first certificate's connection, still open", s, reused)
	}
	if got, want := notAfter(), float64(second.NotAfter.Unix()); got != want {
		t.Errorf("after SIGHUP: llmflow_tls_cert_not_after_timestamp_seconds %v, want the new certificate's %v", got, want)
	}

	// a broken certificate: logged, the running one stays
	os.WriteFile(certFile, []byte("not a certificate\n"), 0o644)
	p.signal(syscall.SIGHUP)
	waitUntil(t, 10*time.Second, func() bool { return strings.Contains(p.logs.String(), "TLS certificate not replaced") })
	fresh := client(roots)
	if s, _, _ := get(fresh); s != 2 {
		t.Fatalf("after a broken certificate file: serial %d, want 2 (the running one)", s)
	}
	if strings.Contains(p.logs.String(), "PRIVATE KEY") {
		t.Fatal("the log shows key material")
	}
}

// TestTLSBadCertificateAtStart: a certificate that does not load stops the
// start with the tls block's position and the files, not the key.
func TestTLSBadCertificateAtStart(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "gw.crt"), []byte("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "gw.key"), []byte("secret-key-material\n"), 0o600)
	cfg := procConfig(t, dir, "http://127.0.0.1:9", "store {\n  path = \"llmflow.db\"\n}\ntls {\n  cert_file = \"gw.crt\"\n  key_file  = \"gw.key\"\n}\n")
	var out, errb strings.Builder
	code := Run(t.Context(), []string{"serve", "-c", cfg, "--listen", "127.0.0.1:0"}, &out, &errb)
	msg := errb.String()
	if code == 0 || !strings.Contains(msg, "gateway.hcl:") || !strings.Contains(msg, "tls: cert_file") || strings.Contains(msg, "secret-key-material") {
		t.Fatalf("exit %d:\n%s", code, msg)
	}
	// check-config says the same before any restart
	errb.Reset()
	if code := Run(t.Context(), []string{"check-config", "-c", cfg}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "tls: cert_file") ||
		strings.Contains(errb.String(), "secret-key-material") {
		t.Fatalf("check-config: exit %d:\n%s", code, errb.String())
	}
}
