package startup

import (
	"net/url"
	"strings"
)

// redacted replaces every secret in a logged connection setting.
const redacted = "xxxxx"

// notShown replaces a connection setting that cannot be split into its
// parts: it could hold a secret anywhere.
const notShown = "(not shown: not a connection string this log can redact)"

// RedactDatabaseURL returns a Postgres connection string (DATABASE_URL)
// for logs: the password of the URL's user-info part and the value of
// every secret parameter (password, passfile, sslpassword, sslkey and
// any key naming a pass, secret, token or key) replaced by xxxxx, in
// both forms pgx accepts, the URL (postgres://, postgresql://) and the
// keyword/value string ("host=h password=p"). A string of neither form
// is not shown at all.
//
// The parts are found as pgx's parser finds them
// (github.com/jackc/pgx/v5/pgconn, parse_url.go and
// parseKeywordValueSettings, which follow libpq's fe-connect.c): the
// URL's user-info part ends at an '@' before the first '/'; a keyword's
// value is single-quoted with backslash escapes or runs to the next
// space. pgconn.ParseConfig itself is not used: it reads the password
// file, the service file and the TLS key files and returns settings, not
// the string the operator wrote.
func RedactDatabaseURL(s string) string {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		return redactOneURL(s, false)
	}
	return redactKeywordValue(s)
}

// RedactURLList returns a URL or a comma-separated list of URLs (NATS_URL
// "nats://a:4222,nats://b:4222", LLM_BASE_URL) for logs: each element's
// user-info part hidden, the password of "user:password@" and the whole of
// a lone "token@" (the NATS token form) replaced by xxxxx, and the value of
// each secret query parameter too.
func RedactURLList(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactOneURL(p, true)
	}
	return strings.Join(parts, ",")
}

// redactOneURL redacts one URL, with or without a scheme. userIsSecret
// says a user name without a password is a token (NATS), not a name
// (Postgres).
func redactOneURL(s string, userIsSecret bool) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	} else {
		scheme += "://"
	}
	// The user-info part ends at the last '@' before the path: taking the
	// last, where libpq takes the first, hides an unescaped '@' of a
	// password as well.
	authority := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority = rest[:i]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		user, _, hasPassword := strings.Cut(rest[:at], ":")
		switch {
		case hasPassword:
			rest = user + ":" + redacted + rest[at:]
		case userIsSecret:
			rest = redacted + rest[at:]
		}
	}
	hostEnd := strings.IndexAny(rest, "/?")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	if !portsAreNumbers(rest[strings.LastIndexByte(rest[:hostEnd], '@')+1 : hostEnd]) {
		// "nats://user:pass" with the '@' missing would show the password
		// as a port.
		return notShown
	}
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q+1] + redactQuery(rest[q+1:])
	}
	return scheme + rest
}

// portsAreNumbers reports whether each host of a host list ("h:1,[::1]:2,h")
// has a port of digits or none.
func portsAreNumbers(hosts string) bool {
	for h := range strings.SplitSeq(hosts, ",") {
		if i := strings.LastIndexByte(h, ']'); i >= 0 {
			h = h[i+1:]
		}
		_, port, ok := strings.Cut(h, ":")
		if !ok {
			continue
		}
		for _, c := range port {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// redactQuery redacts the values of secret parameters of a URL query
// (a=1&password=x), keeping the rest as written.
func redactQuery(q string) string {
	params := strings.Split(q, "&")
	for i, p := range params {
		k, _, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		} else {
			params[i] = redacted
			continue
		}
		if secretKey(k) {
			params[i] = p[:strings.IndexByte(p, '=')+1] + redacted
		}
	}
	return strings.Join(params, "&")
}

// secretKey reports whether a connection parameter's value may be a
// secret: libpq's password, passfile, sslpassword and sslkey
// (https://www.postgresql.org/docs/current/libpq-connect.html), and any
// key that names a pass, secret, token, key or credential.
func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"pass", "secret", "token", "key", "cred", "auth"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// isSpace is the space of libpq's keyword/value strings.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// redactKeywordValue redacts a keyword/value connection string
// ("host=h user=u password='p q'"), keeping its spelling.
func redactKeywordValue(s string) string {
	var b strings.Builder
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			b.WriteByte(s[i])
			i++
		}
		if i == len(s) {
			return b.String()
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return notShown
		}
		key := strings.TrimRight(s[i:i+eq], " \t\n\r\v\f")
		if key == "" || strings.ContainsAny(key, " \t\n\r\v\f") {
			return notShown
		}
		b.WriteString(s[i : i+eq+1])
		i += eq + 1
		for i < len(s) && isSpace(s[i]) {
			b.WriteByte(s[i])
			i++
		}
		start := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return notShown
			}
			i++ // the closing quote
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		if secretKey(key) {
			b.WriteString(redacted)
		} else {
			b.WriteString(s[start:i])
		}
	}
}
