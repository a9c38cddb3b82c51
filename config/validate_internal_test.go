package config

import (
	"strings"
	"testing"
)

func TestParseUpstreamURL(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "http://a", want: "http://a"},
		{in: "https://a:443/v1/", want: "https://a:443/v1"},
		{in: "http://a/%2F/", want: "http://a/%2F"},
		{in: "ws://a", err: "scheme"},
		{in: "a:8000", err: "scheme"},
		{in: "//a", err: "scheme"},
		{in: "http://", err: "host"},
		{in: "http://:80", err: "host"},
		{in: "http:a", err: "host"},
		{in: "http://u@a", err: "credentials"},
		{in: "http://u:p@a", err: "credentials"},
		{in: "http://a?", err: "query"},
		{in: "http://a/?x=1", err: "query"},
		{in: "http://a#", err: "fragment"},
		{in: "http://a/#f", err: "fragment"},
		{in: "http://a:65536", err: "port"},
		{in: "http://a:x", err: "invalid URL"},
		{in: "http://a b", err: "invalid URL"},
		{in: "http://a/\x7f", err: "invalid URL"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			u, err := parseUpstreamURL(tc.in)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want one mentioning %q", err, tc.err)
				}
			case err != nil:
				t.Errorf("err = %v", err)
			case u.String() != tc.want:
				t.Errorf("got %q, want %q", u, tc.want)
			}
		})
	}
}

func TestCheckHostPort(t *testing.T) {
	for in, ok := range map[string]bool{
		"smtp.example.org:25":  true,
		"10.0.0.1:587":         true,
		"[::1]:25":             true,
		"[fd00::1]:465":        true,
		"smtp.example.org":     false,
		"smtp.example.org:":    false,
		":25":                  false,
		"::1:25":               false,
		"[::1]25":              false,
		"[::1":                 false,
		"a:0":                  false,
		"a:65536":              false,
		"a b:25":               false,
		"user@smtp.example:25": false,
	} {
		if err := checkHostPort(in); (err == nil) != ok {
			t.Errorf("checkHostPort(%q) = %v, want ok=%v", in, err, ok)
		}
	}
}

func TestCheckMailbox(t *testing.T) {
	for in, ok := range map[string]bool{
		"ops@example.org":  true,
		"a.b+c@d":          true,
		"ops":              false,
		"@example.org":     false,
		"ops@":             false,
		"Ops <ops@ex.org>": false,
		"a@b\r\nBcc: c@d":  false,
		"a@b,c@d":          false,
		"a@b\x00":          false,
	} {
		if err := checkMailbox(in); (err == nil) != ok {
			t.Errorf("checkMailbox(%q) = %v, want ok=%v", in, err, ok)
		}
	}
}

func TestIsToken(t *testing.T) {
	for in, ok := range map[string]bool{
		"X-LLMflow-Tags":    true,
		"x_tags":            true,
		"a!#$%&'*+-.^_`|~9": true,
		"":                  false,
		"X Tags":            false,
		"X-Tags:":           false,
		"X-Tägs":            false,
		"X-Tags\r\n":        false,
	} {
		if got := isToken(in); got != ok {
			t.Errorf("isToken(%q) = %v, want %v", in, got, ok)
		}
	}
}

func TestHCLMessage(t *testing.T) {
	for _, tc := range []struct{ summary, detail, want string }{
		{"Unsupported argument", `An argument named "x" is not expected here.`, `Unsupported argument; An argument named "x" is not expected here.`},
		{"Invalid expression", "", "Invalid expression"},
		{"Invalid expression", "invalid expression.", "Invalid expression"},
		{"Bad", "line one\n  line two", "Bad; line one line two"},
	} {
		if got := hclMessage(tc.summary, tc.detail); got != tc.want {
			t.Errorf("hclMessage(%q, %q) = %q, want %q", tc.summary, tc.detail, got, tc.want)
		}
	}
}
