package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-llmflow/llmflow"
)

// TestNginxThreeReplicasRollingRestart runs examples/nginx-llmflow.conf
// (TLS, least_conn) in front of three real `llmflow serve` replicas on
// one PostgreSQL database, restarts the replicas one after the other with
// SIGTERM under load, and checks what clients saw and that every answered
// request has exactly one record.
func TestNginxThreeReplicasRollingRestart(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx not installed: the three-replica example is not run")
	}
	_, dsnFmt, conn := testPGDatabase(t)
	pgHost := os.Getenv("LLMFLOW_TEST_PG_DSN")
	hostport := regexp.MustCompile(`@([^/]+)/`).FindStringSubmatch(pgHost)[1]
	sim := startSim(t, 2*time.Millisecond)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pg.dsn"), []byte(fmt.Sprintf(dsnFmt, hostport)+"\n"), 0o600)
	cfg := procConfig(t, dir, sim, "store {\n  kind = \"postgres\"\n  dsn_file = \"pg.dsn\"\n  flush_interval = \"100ms\"\n}\n")

	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	spool := func(i int) string { return "LLMFLOW_SPOOL_DIR=" + filepath.Join(dir, fmt.Sprintf("spool-%d", i)) }
	reps := make([]*proc, 3)
	for i, a := range addrs {
		reps[i] = startServeAt(t, cfg, a, spool(i))
	}
	key := createKey(t, reps[0].base)

	// nginx with the example's server block: our ports, a generated
	// certificate, no port 80 or IPv6.
	crt, keyPEM, pool := selfSigned(t, "llm.example.org")
	os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600)
	os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600)
	ex, err := os.ReadFile(filepath.Join("..", "..", "examples", "nginx-llmflow.conf"))
	if err != nil {
		t.Fatal(err)
	}
	site := string(ex)
	site = site[:strings.LastIndex(site, "server {")] // drop the port-80 redirect
	for i, a := range addrs {
		site = strings.Replace(site, fmt.Sprintf("server 127.0.0.1:808%d ", i+1), "server "+a+" ", 1)
	}
	front := freeAddr(t)
	site = strings.Replace(site, "listen 443 ssl http2;", "listen "+front+" ssl http2;", 1)
	site = strings.Replace(site, "listen [::]:443 ssl http2;\n", "", 1)
	site = strings.ReplaceAll(site, "/etc/nginx/tls/llm.example.org.crt", filepath.Join(dir, "tls.crt"))
	site = strings.ReplaceAll(site, "/etc/nginx/tls/llm.example.org.key", filepath.Join(dir, "tls.key"))
	os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site), 0o644)
	main := fmt.Sprintf(`daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    include %[1]s/site.conf;
}
`, dir)
	os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(main), 0o644)
	if out, err := exec.Command(nginx, "-t", "-p", dir, "-c", filepath.Join(dir, "nginx.conf")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	ng := exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	if err := ng.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ng.Process.Signal(syscall.SIGQUIT); ng.Wait() })
	for range 200 {
		if c, err := net.Dial("tcp", front); err == nil {
			c.Close()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "llm.example.org"}, MaxIdleConnsPerHost: 16}
	l := startLoadWith("https://"+front, key, 16, tr)
	for l.count() < 300 {
		time.Sleep(time.Millisecond)
	}
	for i := range reps {
		reps[i].signal(syscall.SIGTERM)
		if c := reps[i].exitCode(); c != 0 {
			t.Errorf("replica %d exit %d", i, c)
		}
		n := l.count()
		for l.count() < n+200 { // served by the two others meanwhile
			time.Sleep(time.Millisecond)
		}
		reps[i] = startServeAt(t, cfg, addrs[i], spool(i))
		// As an operator would: wait out nginx's fail_timeout (3 s)
		// before restarting the next replica.
		time.Sleep(4 * time.Second)
	}
	l.finish()
	for _, r := range reps {
		waitHealth(t, r, "the spool drained", spoolDrained)
		r.signal(syscall.SIGTERM)
		if c := r.exitCode(); c != 0 {
			t.Errorf("exit %d", c)
		}
	}
	c := conn()
	defer c.Close(context.Background())
	rows, err := c.Query(context.Background(), "SELECT request_id FROM records")
	if err != nil {
		t.Fatal(err)
	}
	var recs []llmflow.Record
	for rows.Next() {
		var r llmflow.Record
		rows.Scan(&r.RequestID)
		recs = append(recs, r)
	}
	var rolled int64
	c.QueryRow(context.Background(), "SELECT COALESCE(sum(requests), 0) FROM rollups").Scan(&rolled)
	extra := checkExactlyOnce(t, l, recs, rolled)
	t.Logf("three replicas behind nginx, each restarted with SIGTERM under load: %s; records %d (answered exactly once, %d others)", l, len(recs), extra)
	l.mu.Lock()
	failed := l.errs + len(l.doneNoEnd)
	for _, n := range l.non200 {
		failed += n
	}
	l.mu.Unlock()
	if failed > 0 {
		b, _ := os.ReadFile(filepath.Join(dir, "nginx-error.log"))
		t.Errorf("%d requests failed for the client during the rolling restart; nginx error log:\n%s\n…\n%s", failed, string(b[:min(len(b), 3000)]), tail(string(b), 1000))
	}
}

// selfSigned makes a certificate for name and 127.0.0.1.
func selfSigned(t *testing.T, name string) (crtPEM, keyPEM []byte, pool *x509.CertPool) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), pool
}
