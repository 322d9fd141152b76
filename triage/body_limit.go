package triage

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// Request bodies are capped before anything reads them: limitBody wraps
// the whole handler (Handler) with the largest limit of any route, and
// each route again with its own (Install), so neither the session, nor
// the CSRF check, nor a handler ever reads past a route's limit. A body
// whose Content-Length is over the limit is refused at once, unread; one
// sent without a length is cut at the limit and refused when read.
// No route takes multipart/form-data (the pages post URL-encoded forms,
// the API JSON), so such a body is refused at once with 415: Go would
// otherwise spool its files to disk while the CSRF check reads the form.
const (
	// MaxBody is the limit of a route that takes a form or a JSON body
	// of a few fields: a reason, a note, a count (bytes).
	MaxBody = 64 << 10
	// MaxLoginBody is the limit of the login form (bytes).
	MaxLoginBody = 8 << 10
	// MaxRecordBody is the limit of the routes that take a whole record
	// from the editor: checking, validating and approving it (bytes).
	MaxRecordBody = 2 << 20
)

// ErrTooLarge: the request body is over the route's limit. 413.
var ErrTooLarge = errors.New("request body too large")

// ErrUnsupportedMediaType: the body is of a type no route takes
// (multipart/form-data). 415.
var ErrUnsupportedMediaType = errors.New("unsupported media type")

// limitBody refuses a multipart body (415) and a Content-Length over
// limit (413) without reading the body, and caps the body at limit for
// what reads it.
func (s *Server) limitBody(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && strings.HasPrefix(mt, "multipart/") {
			s.refuseBody(w, r, fmt.Errorf("%w: %s %s takes no %s body: post a URL-encoded form, or JSON to the API",
				ErrUnsupportedMediaType, r.Method, r.URL.Path, mt))
			return
		}
		if r.ContentLength > limit {
			s.refuseBody(w, r, tooLarge(r, limit))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		next.ServeHTTP(w, r)
	})
}

// tooLarge is the error of a body over limit.
func tooLarge(r *http.Request, limit int64) error {
	return fmt.Errorf("%w: %s %s takes a body of at most %d bytes", ErrTooLarge, r.Method, r.URL.Path, limit)
}

// bodyError returns the error of reading a request body: ErrTooLarge when
// the body went past its limit, else an ErrInvalid naming what was read.
func bodyError(r *http.Request, what string, err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(r, mbe.Limit)
	}
	return invalidf("cannot read the %s: %v", what, err)
}

// refuseBody answers a request refused before any session is loaded: in
// JSON under /api/, else as text (the error page needs the session).
// The connection is closed after the answer, since the unread body would
// otherwise be read to reuse it.
func (s *Server) refuseBody(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Connection", "close")
	noStore(w)
	if strings.HasPrefix(r.URL.Path, "/api/") {
		s.apiError(w, r, err)
		return
	}
	status := statusOf(err)
	s.logError(r, status, err)
	http.Error(w, publicMessage(err, status), status)
}
