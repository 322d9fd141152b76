// Package httperr is the one error shape of the product's HTTP APIs:
// `ingest serve` (package ingestapi) and the triage server's JSON API.
// Every error they answer is
//
//	{"error": {"code": "not_found", "message": "there is no batch \"b-1\""}}
//
// with the HTTP status of its code. The model is nats.go's
// jetstream.APIError (Code: the HTTP status, ErrorCode: a stable machine
// code, Description) and pkgsite's derrors: handlers return errors, and
// one place per server maps them to an Error and writes it with Write.
//
// # Codes
//
// A Code is stable: clients match on it, never on the message. Each
// code has one row in the table (Categories): its HTTP status, and, for
// a specific code such as compressed_body, the general category it
// refines (invalid). docs/http-errors.md lists the same table; a test
// keeps the two equal.
//
// # Errors
//
// An *Error carries a code, the message the client reads, and the cause
// (logged, never sent). Sentinels, one per general category (ErrInvalid,
// ErrNotFound, ...), let a handler wrap a category
// (fmt.Errorf("%w: ...", httperr.ErrNotFound)); errors.Is matches an
// *Error by its code or its category, as nats.go's APIError matches by
// ErrorCode.
package httperr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Code is the stable machine code of an API error: "code" in its body.
type Code string

// The general categories.
const (
	Invalid              Code = "invalid"                // 400
	Unauthenticated      Code = "unauthenticated"        // 401
	Forbidden            Code = "forbidden"              // 403
	NotFound             Code = "not_found"              // 404
	MethodNotAllowed     Code = "method_not_allowed"     // 405
	Conflict             Code = "conflict"               // 409
	TooLarge             Code = "too_large"              // 413
	UnsupportedMediaType Code = "unsupported_media_type" // 415
	MisdirectedRequest   Code = "misdirected_request"    // 421
	Unprocessable        Code = "unprocessable"          // 422
	TooManyRequests      Code = "too_many_requests"      // 429
	Internal             Code = "internal"               // 500
	Unavailable          Code = "unavailable"            // 503
)

// Specific codes, each refining a category: a client that knows it can
// act on it (decompress the body, say), one that does not reads its
// status.
const (
	CompressedBody Code = "compressed_body" // invalid: a compressed body or an archive
	NotText        Code = "not_text"        // invalid: UTF-16 or binary data
	CrossOrigin    Code = "cross_origin"    // forbidden: sent by a web page of another origin
	// A signed webhook's (ingest serve, POST /v1/webhooks/{name}).
	SignatureMissing Code = "signature_missing" // unauthenticated: no signature (or timestamp) header
	SignatureInvalid Code = "signature_invalid" // unauthenticated: a malformed signature, or not the body's
	SignatureExpired Code = "signature_expired" // unauthenticated: a signed timestamp outside the window
	Replayed         Code = "replayed"          // conflict: a signature taken already within its window
	Unmapped         Code = "unmapped"          // unprocessable: a webhook body that does not fit its mapping
)

// Category is one row of the table: a code, its HTTP status and what it
// means.
type Category struct {
	Code   Code
	Status int
	// Parent is the general category a specific code refines (Invalid for
	// CompressedBody); "" for a general category.
	Parent Code
	// Description says when the code is answered, as docs/http-errors.md
	// does.
	Description string
}

// categories is the table, general categories in the order of their
// status, each followed by its specific codes.
var categories = []Category{
	{Invalid, http.StatusBadRequest, "", "the request is malformed: a query parameter, a path value or the body"},
	{CompressedBody, http.StatusBadRequest, Invalid, "the body is compressed (gzip, zstd, bzip2, xz) or an archive (zip, tar), sent without Content-Encoding"},
	{NotText, http.StatusBadRequest, Invalid, "the body is not text: UTF-16, or binary data"},
	{Unauthenticated, http.StatusUnauthorized, "", "no credentials (token or session), or wrong ones"},
	{SignatureMissing, http.StatusUnauthorized, Unauthenticated, "a signed webhook without its signature header, or without its timestamp header"},
	{SignatureInvalid, http.StatusUnauthorized, Unauthenticated, "a webhook signature that does not parse, or is not the body's with the webhook's secret"},
	{SignatureExpired, http.StatusUnauthorized, Unauthenticated, "a webhook signature whose signed timestamp is outside the webhook's tolerance"},
	{Forbidden, http.StatusForbidden, "", "the credentials do not allow it: a missing or wrong CSRF token, say"},
	{CrossOrigin, http.StatusForbidden, Forbidden, "the request comes from a web page of another origin"},
	{NotFound, http.StatusNotFound, "", "no such route, batch, item, message or page"},
	{MethodNotAllowed, http.StatusMethodNotAllowed, "", "the route takes another method (the Allow header names it)"},
	{Conflict, http.StatusConflict, "", "the state forbids it: an id used already, an item claimed or decided, a count changed"},
	{Replayed, http.StatusConflict, Conflict, "a signed webhook request taken already, sent again within its timestamp's window"},
	{TooLarge, http.StatusRequestEntityTooLarge, "", "the body is over the route's limit, or a route that takes no body got one"},
	{UnsupportedMediaType, http.StatusUnsupportedMediaType, "", "the Content-Type, its charset or a Content-Encoding is not taken"},
	{MisdirectedRequest, http.StatusMisdirectedRequest, "", "the Host is not one this server answers (without a token: only loopback names)"},
	{Unprocessable, http.StatusUnprocessableEntity, "", "the request is well-formed but nothing of it can be taken: every line rejected, a record that does not validate"},
	{Unmapped, http.StatusUnprocessableEntity, Unprocessable, "a webhook body that does not fit the webhook's mapping: a pointer it does not hold, a value of the wrong type"},
	{TooManyRequests, http.StatusTooManyRequests, "", "too many requests at once (Retry-After says when to try again)"},
	{Internal, http.StatusInternalServerError, "", "the server failed; the detail is logged, not sent"},
	{Unavailable, http.StatusServiceUnavailable, "", "Postgres or NATS is unreachable, or the server is shutting down (Retry-After says when to try again)"},
}

// Categories returns the table: every code, in the order of their status.
func Categories() []Category {
	return append([]Category(nil), categories...)
}

// Lookup returns the row of code c, and false when c is not in the
// table.
func Lookup(c Code) (Category, bool) {
	for _, cat := range categories {
		if cat.Code == c {
			return cat, true
		}
	}
	return Category{}, false
}

// Status returns the HTTP status of c: 500 for a code not in the table.
func (c Code) Status() int {
	if cat, ok := Lookup(c); ok {
		return cat.Status
	}
	return http.StatusInternalServerError
}

// category returns the general category of c: c itself, or the one it
// refines.
func (c Code) category() Code {
	if cat, ok := Lookup(c); ok && cat.Parent != "" {
		return cat.Parent
	}
	return c
}

// Error is an error an API answers: its code, the message the client
// reads, and what else its body carries.
type Error struct {
	Code Code
	// Message is what the client is told: what was wrong, where, and what
	// to do. It never holds internal detail (that goes in Err).
	Message string
	// Fields are more members of the error object, after code and
	// message (triage's 422 carries "errors" and "overridable").
	Fields map[string]any
	// Beside, when not nil, encodes as a JSON object whose members are
	// written beside "error" (ingest's 422, and a 503 part way, carry the
	// report's fields).
	Beside any
	// Err is the cause, for the log; it is never sent.
	Err error
}

// New returns an *Error of code c with the message msg.
func New(c Code, msg string) *Error {
	return &Error{Code: c, Message: msg}
}

// Errorf returns an *Error of code c whose message is formatted as by
// fmt.Sprintf.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// Sentinels: one per general category, for handlers to wrap and for
// errors.Is to match.
var (
	ErrInvalid              = New(Invalid, "invalid request")
	ErrUnauthenticated      = New(Unauthenticated, "unauthenticated")
	ErrForbidden            = New(Forbidden, "forbidden")
	ErrNotFound             = New(NotFound, "not found")
	ErrMethodNotAllowed     = New(MethodNotAllowed, "method not allowed")
	ErrConflict             = New(Conflict, "conflict")
	ErrTooLarge             = New(TooLarge, "request body too large")
	ErrUnsupportedMediaType = New(UnsupportedMediaType, "unsupported media type")
	ErrMisdirectedRequest   = New(MisdirectedRequest, "misdirected request")
	ErrUnprocessable        = New(Unprocessable, "unprocessable")
	ErrTooManyRequests      = New(TooManyRequests, "too many requests")
	ErrInternal             = New(Internal, "internal error; it has been logged")
	ErrUnavailable          = New(Unavailable, "unavailable")
)

// Error returns the message and, for the log, the cause.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of e's code, or of the general
// category e's code refines: errors.Is(err, ErrInvalid) holds for a
// CompressedBody error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code || t.Code == e.Code.category()
}

// Status returns the HTTP status of e's code.
func (e *Error) Status() int { return e.Code.Status() }

// Internalf returns an Internal error whose cause is err: its message
// is the generic one, its detail only logged.
func Internalf(err error) *Error {
	return &Error{Code: Internal, Message: ErrInternal.Message, Err: err}
}

// As returns the *Error err is or wraps, and false when it wraps none.
func As(err error) (*Error, bool) {
	return errors.AsType[*Error](err)
}

// MarshalJSON encodes e as its whole body: {"error": {"code", "message",
// Fields...}} and Beside's members after it. It fails when Beside does
// not encode as a JSON object.
func (e *Error) MarshalJSON() ([]byte, error) {
	obj := make(map[string]any, 2+len(e.Fields))
	for k, v := range e.Fields {
		obj[k] = v
	}
	obj["code"], obj["message"] = e.Code, e.Message
	inner, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"error":`)
	b.Write(inner)
	if e.Beside != nil {
		rest, err := json.Marshal(e.Beside)
		if err != nil {
			return nil, err
		}
		rest = bytes.TrimSpace(rest)
		if len(rest) < 2 || rest[0] != '{' {
			return nil, fmt.Errorf("httperr: Beside of %s encodes as %.20s, not a JSON object", e.Code, rest)
		}
		if members := bytes.TrimSpace(rest[1 : len(rest)-1]); len(members) > 0 {
			b.WriteByte(',')
			b.Write(members)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Write answers e with its status and its body (MarshalJSON), as
// application/json (unless the Content-Type is set already), not to be
// cached or sniffed. Headers such as Retry-After or Allow are the
// caller's to set first.
func Write(w http.ResponseWriter, e *Error) {
	body, err := json.Marshal(e)
	if err != nil {
		e = Internalf(err)
		body, _ = json.Marshal(e)
	}
	h := w.Header()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status())
	_, _ = w.Write(append(body, '\n'))
}
