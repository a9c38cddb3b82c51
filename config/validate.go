package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// parseUpstreamURL parses an absolute http or https URL with a host and
// without credentials, query or fragment, and strips one trailing "/" from
// its path. Errors never repeat the URL: it could hold a password.
func parseUpstreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL
		}
		return nil, fmt.Errorf("invalid URL: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("URL scheme must be http or https")
	case u.Opaque != "" || u.Hostname() == "":
		return nil, errors.New("URL must have a host")
	case u.User != nil:
		return nil, errors.New("URL must not contain credentials (use key_file)")
	case u.RawQuery != "" || u.ForceQuery:
		return nil, errors.New("URL must not have a query")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, errors.New("URL must not have a fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, errors.New("URL port must be between 1 and 65535")
		}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	return u, nil
}

// checkHostPort checks a "host:port" address ("[::1]:25" for IPv6)
// without importing net.
func checkHostPort(s string) error {
	var host, port string
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 || !strings.HasPrefix(s[end+1:], ":") {
			return errors.New("want host:port")
		}
		host, port = s[1:end], s[end+2:]
	} else {
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return errors.New("want host:port")
		}
		host, port = s[:i], s[i+1:]
		if strings.Contains(host, ":") {
			return errors.New("want host:port, an IPv6 host in brackets")
		}
	}
	if host == "" || strings.ContainsAny(host, " \t/@[]") || hasControl(host) {
		return errors.New("invalid host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("port must be between 1 and 65535")
	}
	return nil
}

// checkMailbox does a light check of an e-mail address: local@domain with
// no white space, control characters or angle brackets (which could be
// used to inject SMTP headers or commands).
func checkMailbox(s string) error {
	at := strings.LastIndex(s, "@")
	if at <= 0 || at == len(s)-1 || strings.ContainsAny(s, " \t<>,;") || hasControl(s) {
		return fmt.Errorf("invalid e-mail address %q", s)
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token, the syntax of a header
// field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hasControl reports whether s contains an ASCII control character or DEL.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// hostOf returns the host of a "host:port" address checked by
// checkHostPort, without brackets.
func hostOf(hostport string) string {
	i := strings.LastIndex(hostport, ":")
	return strings.TrimSuffix(strings.TrimPrefix(hostport[:i], "["), "]")
}

// isLoopbackHost reports whether host names this machine without the
// network: "localhost", 127.0.0.0/8 written as a dotted quad, or ::1.
// It does not resolve names (config imports no net).
func isLoopbackHost(host string) bool {
	host = strings.ToLower(host)
	if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" {
		return true
	}
	parts := strings.Split(host, ".")
	if len(parts) != 4 || parts[0] != "127" {
		return false
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 255 || p != strconv.Itoa(n) {
			return false
		}
	}
	return true
}
