// Package httpguard holds the checks the HTTP servers share against pages
// of other sites: which Host names a server without credentials answers
// (so DNS rebinding cannot reach it), and whether a request's Origin or
// Referer is the server's own origin. It imports no service package.
package httpguard

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// IsLoopbackHost reports whether hostport, a Host header (host or
// host:port), names the loopback interface: "localhost" or a name ending
// in ".localhost" (RFC 6761 §6.3: such names resolve to loopback, and no
// DNS server answers for them, so a page elsewhere cannot rebind one), or
// a loopback IP address (127.0.0.0/8, ::1; IPv6 in brackets). A trailing
// dot is allowed; any case. An empty Host (HTTP/1.0) is not loopback.
func IsLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if strings.HasPrefix(hostport, "[") {
		return false // brackets hold an IPv6 address, not a name
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "localhost" {
		return true
	}
	sub, ok := strings.CutSuffix(name, ".localhost")
	if !ok {
		return false
	}
	for label := range strings.SplitSeq(sub, ".") {
		if !validLabel(label) {
			return false
		}
	}
	return true
}

// validLabel reports whether s is a DNS label of letters, digits and
// hyphens (RFC 1123), not starting or ending with a hyphen.
func validLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// RequestScheme is the scheme the client used: "https" when r came over
// TLS or through a proxy saying so (X-Forwarded-Proto: https), else
// "http".
func RequestScheme(r *http.Request) string {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return "https"
	}
	return "http"
}

// SameOrigin reports whether rawURL, an Origin or Referer header, names
// r's own origin as RFC 6454 compares them: the same scheme
// (RequestScheme), host (any case) and port, a missing port being the
// scheme's default (80 for http, 443 for https). "null", a URL without
// a host, and one with user info never are.
func SameOrigin(r *http.Request, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	scheme := RequestScheme(r)
	if !strings.EqualFold(u.Scheme, scheme) {
		return false
	}
	self := &url.URL{Host: r.Host}
	return strings.EqualFold(u.Hostname(), self.Hostname()) && self.Hostname() != "" &&
		portOr(u.Port(), scheme) == portOr(self.Port(), scheme)
}

// portOr returns port, or the default port of scheme when it is empty.
func portOr(port, scheme string) string {
	switch {
	case port != "":
		return port
	case scheme == "https":
		return "443"
	}
	return "80"
}
