package alerts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/smtp"
	"os"
	"strings"
	"time"

	"github.com/go-llmflow/llmflow/config"
	"github.com/go-llmflow/llmflow/internal/redact"
)

// Email sends alerts through an SMTP relay (net/smtp), one message per
// alert to every recipient: plain text, UTF-8, quoted-printable, with
// Date, Message-ID (derived from the alert's ID, so that a duplicate is
// recognisable), Auto-Submitted: auto-generated and X-LLMflow-Alert-ID.
//
// TLS: "starttls" requires the relay to offer STARTTLS and upgrades before
// anything else; "implicit" speaks TLS from the first byte; "none" is
// plain text. Credentials (AUTH PLAIN) are only ever sent over TLS or to
// a loopback relay (net/smtp refuses otherwise).
type Email struct {
	o EmailOptions
}

// EmailOptions configure NewEmail.
type EmailOptions struct {
	Server       string // host:port
	From         string
	To           []string
	Username     string // "" = no authentication
	PasswordFile string // re-read at every attempt
	TLS          string // "starttls" (default), "implicit", "none"
	// TLSConfig sets the trusted roots and the like; ServerName defaults
	// to the server's host.
	TLSConfig *tls.Config
	// Hello is the name given in EHLO; default "localhost".
	Hello string
	// Now dates the messages; default time.Now.
	Now func() time.Time
}

// NewEmail checks o and returns the sender.
func NewEmail(o EmailOptions) (*Email, error) {
	host, _, err := net.SplitHostPort(o.Server)
	if err != nil || host == "" {
		return nil, fmt.Errorf("smtp server %q: want host:port", o.Server)
	}
	if o.From == "" || len(o.To) == 0 {
		return nil, errors.New("smtp: from and to are required")
	}
	for _, a := range append([]string{o.From}, o.To...) {
		if strings.ContainsAny(a, "<>\r\n ,;") || !strings.Contains(a, "@") {
			return nil, fmt.Errorf("smtp: invalid address %q", a)
		}
	}
	switch o.TLS {
	case "":
		o.TLS = "starttls"
	case "starttls", "implicit", "none":
	default:
		return nil, fmt.Errorf("smtp: tls %q: want starttls, implicit or none", o.TLS)
	}
	if o.Hello == "" {
		o.Hello = "localhost"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Email{o: o}, nil
}

// Channel is ChannelEmail.
func (e *Email) Channel() string { return ChannelEmail }

// Send delivers a in one SMTP session.
func (e *Email) Send(ctx context.Context, a Alert) error {
	var password string
	if e.o.Username != "" {
		var err error
		if password, err = config.ReadSecret(e.o.PasswordFile); err != nil {
			return fmt.Errorf("smtp password: %w", err) // names the path, never the content
		}
	}
	if err := e.send(ctx, a, password); err != nil {
		msg := redact.String(err.Error(), password)
		switch {
		case ctx.Err() != nil:
			msg += " (" + ctx.Err().Error() + ")"
		case errors.Is(err, os.ErrDeadlineExceeded):
			// the connection's deadline is ctx's: it can fire a moment
			// before ctx reports its end
			msg += " (deadline exceeded)"
		}
		return fmt.Errorf("smtp %s: %s", e.o.Server, msg)
	}
	return nil
}

func (e *Email) send(ctx context.Context, a Alert, password string) error {
	host, _, _ := net.SplitHostPort(e.o.Server)
	tlsConfig := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if e.o.TLSConfig != nil {
		tlsConfig = e.o.TLSConfig.Clone()
		if tlsConfig.ServerName == "" {
			tlsConfig.ServerName = host
		}
	}
	var conn net.Conn
	var err error
	nd := &net.Dialer{}
	if e.o.TLS == "implicit" {
		conn, err = (&tls.Dialer{NetDialer: nd, Config: tlsConfig}).DialContext(ctx, "tcp", e.o.Server)
	} else {
		conn, err = nd.DialContext(ctx, "tcp", e.o.Server)
	}
	if err != nil {
		return err
	}
	// net/smtp knows no context: the deadline bounds every read and
	// write, and the end of ctx closes the connection.
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return err
	}
	defer c.Close()
	if err := c.Hello(e.o.Hello); err != nil {
		return err
	}
	if e.o.TLS == "starttls" {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return errors.New(`the relay does not offer STARTTLS (tls = "starttls"); nothing was sent`)
		}
		if err := c.StartTLS(tlsConfig); err != nil {
			return fmt.Errorf("starttls: %w", err)
		}
	}
	if e.o.Username != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return errors.New("the relay does not offer AUTH; nothing was sent")
		}
		if err := c.Auth(smtp.PlainAuth("", e.o.Username, password, host)); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
	}
	if err := c.Mail(e.o.From); err != nil {
		return fmt.Errorf("mail from: %w", err)
	}
	for _, to := range e.o.To {
		if err := c.Rcpt(to); err != nil {
			return fmt.Errorf("rcpt to: %w", err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if _, err := w.Write(e.message(a)); err != nil {
		w.Close()
		return fmt.Errorf("data: %w", err)
	}
	if err := w.Close(); err != nil { // the relay's answer to the message
		return fmt.Errorf("data: %w", err)
	}
	c.Quit() // the message is accepted; a failed QUIT changes nothing
	return nil
}

// message renders a as an RFC 5322 message with CRLF line ends.
func (e *Email) message(a Alert) []byte {
	var b bytes.Buffer
	h := func(name, value string) {
		b.WriteString(name + ": " + headerSafe(value) + "\r\n")
	}
	h("Date", e.o.Now().Format(time.RFC1123Z))
	h("From", e.o.From)
	h("To", strings.Join(e.o.To, ", "))
	h("Subject", mime.QEncoding.Encode("utf-8", headerSafe(a.Summary())))
	h("Message-ID", MessageID(a.ID, e.o.From))
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "quoted-printable")
	h("Auto-Submitted", "auto-generated")
	h("X-LLMflow-Alert-ID", a.ID)
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	qp.Write([]byte(strings.ReplaceAll(a.Text(), "\n", "\r\n")))
	qp.Close()
	return b.Bytes()
}

// MessageID is the Message-ID of the e-mail of the alert with this ID:
// the same for every attempt and every gateway.
func MessageID(alertID, from string) string {
	sum := sha256.Sum256([]byte(alertID))
	domain := "llmflow.invalid"
	if i := strings.LastIndex(from, "@"); i >= 0 && i+1 < len(from) {
		domain = from[i+1:]
	}
	return "<alert." + hex.EncodeToString(sum[:16]) + "@" + domain + ">"
}

// headerSafe replaces control characters (CR and LF would start a new
// header) by spaces.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s)
}
