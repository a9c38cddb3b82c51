package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/prometheus/client_golang/prometheus"
)

// certs is the certificate the gateway serves TLS with (tls { cert_file,
// key_file }), replaced at SIGHUP: new handshakes take the new one, open
// connections keep theirs.
type certs struct {
	cur atomic.Pointer[tls.Certificate]
}

// loadCert reads the certificate chain and key of t; errors name the
// files and the tls block, never the key.
func loadCert(t *config.TLS) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: tls: cert_file %s, key_file %s: %w", pos(t.DefRange.Filename, t.DefRange.Start.Line, t.DefRange.Start.Column),
			t.CertFile, t.KeyFile, err)
	}
	if c.Leaf == nil && len(c.Certificate) > 0 {
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	return &c, nil
}

func newCerts(t *config.TLS) (*certs, error) {
	c, err := loadCert(t)
	if err != nil {
		return nil, err
	}
	cs := &certs{}
	cs.cur.Store(c)
	return cs, nil
}

// config is the listener's TLS configuration.
func (cs *certs) config() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cs.cur.Load(), nil },
	}
}

// reload reads the certificate again (SIGHUP). One that does not load
// leaves the running one in place.
func (cs *certs) reload(t *config.TLS, log *slog.Logger) {
	if t == nil {
		log.Warn("reload: the tls block was removed; the gateway serves TLS with its certificate until a restart")
		return
	}
	c, err := loadCert(t)
	if err != nil {
		log.Error("reload: TLS certificate not replaced, the running one stays", "err", err)
		return
	}
	cs.cur.Store(c)
	attrs := []any{"cert_file", t.CertFile}
	if c.Leaf != nil {
		attrs = append(attrs, "subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	log.Info("reload: TLS certificate replaced; new connections use it", attrs...)
}

// CheckTLS loads the certificate and key of a tls block as Run would
// (llmflow check-config); errors name the files and the block, never the
// key.
func CheckTLS(t *config.TLS) error {
	_, err := loadCert(t)
	return err
}

// certExpiry is the series of the certificate's end of validity: the alert
// "certificate close to expiry".
var certExpiry = prometheus.NewDesc("llmflow_tls_cert_not_after_timestamp_seconds",
	"When the TLS certificate served ends its validity (unix time; its leaf's NotAfter). Only with a tls block.", nil, nil)

// certCollector exposes certExpiry of the certificate served now (a
// SIGHUP may replace it), nothing without TLS.
type certCollector struct{ cs *atomic.Pointer[certs] }

func (c certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiry }

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	cs := c.cs.Load()
	if cs == nil {
		return
	}
	if cert := cs.cur.Load(); cert != nil && cert.Leaf != nil {
		ch <- prometheus.MustNewConstMetric(certExpiry, prometheus.GaugeValue, float64(cert.Leaf.NotAfter.Unix()))
	}
}
