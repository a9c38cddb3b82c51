package config

import "net/url"

// ParseUpstreamURL checks an upstream base URL exactly as the
// configuration's base_url is checked (http or https, a host, no
// credentials, query or fragment; one trailing "/" stripped), for
// upstreams registered at runtime through the admin API: the same SSRF
// rules hold whichever way an upstream arrives. Errors never repeat the
// URL.
func ParseUpstreamURL(s string) (*url.URL, error) { return parseUpstreamURL(s) }
