// Package httpguard holds the checks the HTTP servers share against pages
// of other sites: which Host names a server without credentials answers
// (so DNS rebinding cannot reach it). It imports no service package.
package httpguard

import (
	"net"
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
