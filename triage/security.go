package triage

import (
	"embed"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/extractq/extractq/internal/httperr"
)

// ContentSecurityPolicy is sent with every response: scripts and styles
// only from this site's static files (no inline script or style, no
// eval), no plugins, no framing, forms and fetches to this site only.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"

// securityHeaders sets the headers every response carries.
func (s *Server) securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
		if s.ownOrigin(r).scheme == "https" {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// origin is a web origin (RFC 6454): a scheme and a host with its port,
// lower case, the port left out when it is the scheme's default.
type origin struct {
	scheme, host string
}

func (o origin) String() string { return o.scheme + "://" + o.host }

// originOf returns the origin of an absolute http or https URL, such as
// an Origin or Referer header; ok is false for anything else.
func originOf(rawURL string) (o origin, ok bool) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || u.Opaque != "" || u.User != nil {
		return origin{}, false
	}
	o.scheme = strings.ToLower(u.Scheme)
	if o.scheme != "http" && o.scheme != "https" {
		return origin{}, false
	}
	return origin{o.scheme, normalHost(o.scheme, u.Host)}, true
}

// normalHost lower-cases a host[:port] and drops the port when it is the
// scheme's default (80 for http, 443 for https), as browsers send it.
func normalHost(scheme, hostport string) string {
	hostport = strings.ToLower(hostport)
	if h, port, err := net.SplitHostPort(hostport); err == nil &&
		((scheme == "http" && port == "80") || (scheme == "https" && port == "443")) {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return hostport
}

// ownOrigin is the origin the client reached the server at: the
// configured PublicURL's when there is one (behind a proxy), else https
// when the request came over TLS and http when not, with the request's
// Host. A client's X-Forwarded-Proto is not trusted: behind a
// TLS-terminating proxy, set PublicURL. It decides the origin checks of
// checkCSRF and HSTS.
func (s *Server) ownOrigin(r *http.Request) origin {
	if s.publicOrigin != nil {
		return *s.publicOrigin
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return origin{scheme, normalHost(scheme, r.Host)}
}

// noStore keeps pages with customer text out of caches.
func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
}

// loopbackOnly answers only requests whose Host names a loopback address
// (localhost, 127.0.0.0/8, ::1), so a page elsewhere cannot reach the
// account-less server through DNS rebinding.
// Under /api/ the answer is the API's JSON error (misdirected_request).
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isLoopbackHost(r.Host) {
			const msg = "this triage server has no accounts and answers only on localhost"
			if strings.HasPrefix(r.URL.Path, "/api/") {
				httperr.Write(w, httperr.New(httperr.MisdirectedRequest, msg))
				return
			}
			http.Error(w, msg, http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopbackHost reports whether a Host header (host or host:port) names
// a loopback address.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

//go:embed static
var staticFS embed.FS

// staticHandler serves the embedded script and style sheet.
func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	fsrv := http.StripPrefix("/static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No directory listings; and no file has a name that is not
		// UTF-8 (the file server would answer 500 for one).
		if strings.HasSuffix(r.URL.Path, "/") || !utf8.ValidString(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		fsrv.ServeHTTP(w, r)
	})
}
