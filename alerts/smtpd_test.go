package alerts_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"io"
	"math/big"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"
)

// smtpd is a real SMTP server in the test process, on loopback: EHLO,
// STARTTLS, AUTH PLAIN, MAIL, RCPT, DATA, RSET, NOOP, QUIT.
type smtpd struct {
	ln       net.Listener
	tls      *tls.Config // offer STARTTLS (or speak TLS at once with implicit)
	implicit bool
	user     string // require AUTH PLAIN with these
	pass     string
	// failData answers 451 to the first failData messages.
	failData int
	// echoAuth makes a failed AUTH answer repeat what the client sent
	// (a hostile relay), to check that no error shows the password.
	echoAuth bool

	mu       sync.Mutex
	accepted []received
	rejected int
	authOK   []bool // per AUTH: whether the session was under TLS
	wg       sync.WaitGroup
}

type received struct {
	from string
	to   []string
	data string
	tls  bool
}

func startSMTPD(t *testing.T, s *smtpd) *smtpd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if s.implicit {
		ln = tls.NewListener(ln, s.tls)
	}
	s.ln = ln
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *smtpd) addr() string { return s.ln.Addr().String() }

func (s *smtpd) mails() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.accepted...)
}

func (s *smtpd) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	_, isTLS := c.(*tls.Conn)
	tp := textproto.NewConn(c)
	reply := func(format string, args ...any) { tp.PrintfLine(format, args...) }
	reply("220 smtpd.test ESMTP ready")
	var cur received
	authed := false
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			cur = received{}
			lines := []string{"smtpd.test"}
			if s.tls != nil && !isTLS && !s.implicit {
				lines = append(lines, "STARTTLS")
			}
			if s.user != "" {
				lines = append(lines, "AUTH PLAIN")
			}
			lines = append(lines, "8BITMIME")
			for i, l := range lines {
				sep := "-"
				if i == len(lines)-1 {
					sep = " "
				}
				reply("250%s%s", sep, l)
			}
		case "STARTTLS":
			if s.tls == nil || isTLS {
				reply("502 not offered")
				continue
			}
			reply("220 go ahead")
			tc := tls.Server(c, s.tls)
			if err := tc.Handshake(); err != nil {
				return
			}
			c, isTLS = tc, true
			tp = textproto.NewConn(c)
			reply = func(format string, args ...any) { tp.PrintfLine(format, args...) }
			cur, authed = received{}, false
		case "AUTH":
			mech, resp, _ := strings.Cut(arg, " ")
			raw, err := base64.StdEncoding.DecodeString(resp)
			parts := strings.Split(string(raw), "\x00")
			ok := strings.EqualFold(mech, "PLAIN") && err == nil && len(parts) == 3 && parts[1] == s.user && parts[2] == s.pass
			s.mu.Lock()
			s.authOK = append(s.authOK, isTLS)
			s.mu.Unlock()
			switch {
			case ok:
				authed = true
				reply("235 2.7.0 authenticated")
			case s.echoAuth:
				reply("535 5.7.8 bad credentials %q", string(raw))
			default:
				reply("535 5.7.8 bad credentials")
			}
		case "MAIL":
			if s.user != "" && !authed {
				reply("530 5.7.0 authentication required")
				continue
			}
			cur = received{from: addrArg(arg), tls: isTLS}
			reply("250 ok")
		case "RCPT":
			cur.to = append(cur.to, addrArg(arg))
			reply("250 ok")
		case "DATA":
			if cur.from == "" || len(cur.to) == 0 {
				reply("503 need MAIL and RCPT")
				continue
			}
			reply("354 end with .")
			b, err := io.ReadAll(tp.DotReader())
			if err != nil {
				return
			}
			cur.data = string(b)
			s.mu.Lock()
			if s.failData > 0 {
				s.failData--
				s.rejected++
				s.mu.Unlock()
				reply("451 4.3.0 try again later")
				continue
			}
			s.accepted = append(s.accepted, cur)
			s.mu.Unlock()
			reply("250 2.0.0 queued")
			cur = received{}
		case "RSET":
			cur = received{}
			reply("250 ok")
		case "NOOP":
			reply("250 ok")
		case "QUIT":
			reply("221 bye")
			return
		default:
			reply("500 unknown command")
		}
	}
}

// addrArg returns the address of "FROM:<a@b> SIZE=…" or "TO:<a@b>".
func addrArg(arg string) string {
	i, j := strings.Index(arg, "<"), strings.Index(arg, ">")
	if i < 0 || j < i {
		return ""
	}
	return arg[i+1 : j]
}

// selfSigned returns a server TLS config for 127.0.0.1 and localhost,
// and a pool trusting it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smtpd.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}
