package triage

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
)

// Error categories of the triage handlers. Handlers return errors wrapping
// one of these (or a store error); one place, statusOf, maps them to an
// HTTP status, as pkgsite's derrors does.
var (
	// ErrInvalid: the request is malformed (a bad id, filter or body). 400.
	ErrInvalid = errors.New("invalid request")
	// ErrUnauthenticated: no session or token, or a bad one. 401.
	ErrUnauthenticated = errors.New("not logged in")
	// ErrForbidden: a missing or wrong CSRF token, a foreign origin, or a
	// host the server does not answer for. 403.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: no such item, message or page. 404.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the item is claimed by someone else, already decided,
	// or a bulk re-run's count changed. 409.
	ErrConflict = errors.New("conflict")
	// ErrUnprocessable: the record does not validate; the error is a
	// *ValidationError carrying the list. 422.
	ErrUnprocessable = errors.New("record does not validate")
	// ErrTooManyRequests: too many login attempts. 429.
	ErrTooManyRequests = errors.New("too many requests")
)

// statusTable maps each category to its HTTP status, in the order tried.
var statusTable = []struct {
	err    error
	status int
}{
	{ErrInvalid, http.StatusBadRequest},
	{ErrUnauthenticated, http.StatusUnauthorized},
	{ErrForbidden, http.StatusForbidden},
	{ErrNotFound, http.StatusNotFound},
	{store.ErrNotFound, http.StatusNotFound},
	{ErrConflict, http.StatusConflict},
	{store.ErrClaimed, http.StatusConflict},
	{store.ErrItemClosed, http.StatusConflict},
	{store.ErrCountChanged, http.StatusConflict},
	{store.ErrOutcomeExists, http.StatusConflict},
	{store.ErrConflict, http.StatusConflict},
	{ErrUnprocessable, http.StatusUnprocessableEntity},
	{ErrTooManyRequests, http.StatusTooManyRequests},
	{ErrTooLarge, http.StatusRequestEntityTooLarge},
	{ErrUnsupportedMediaType, http.StatusUnsupportedMediaType},
}

// statusOf returns the HTTP status of err: the first category it wraps,
// else 500.
func statusOf(err error) int {
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return e.status
		}
	}
	if errors.Is(err, context.Canceled) {
		return 499 // the client went away; nobody reads the answer
	}
	return http.StatusInternalServerError
}

// codeOf returns the short code of a status for JSON error bodies.
func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusUnprocessableEntity:
		return "unprocessable"
	case http.StatusTooManyRequests:
		return "too_many_requests"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	}
	return "internal"
}

// ValidationError is a record that does not validate: the error list, as
// the worker's validator gives it, and whether it may be approved with a
// written override reason (every error is a grounding error). It matches
// ErrUnprocessable.
type ValidationError struct {
	Errors extracttype.ErrorList
	// Overridable is true when every error is a grounding error, which a
	// reviewer may override with a written reason.
	Overridable bool
	// ReasonLen is the length in characters of the override reason given
	// (space trimmed): 0 when there was none.
	ReasonLen int
	// Msg says what to do.
	Msg string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("%s (%d errors)", e.Msg, len(e.Errors))
}

// Is reports whether target is ErrUnprocessable.
func (e *ValidationError) Is(target error) bool { return target == ErrUnprocessable }

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// publicMessage returns what a client may be told about err: its text for
// the categories above, a generic line for everything else (which may
// hold internal detail and is logged instead).
func publicMessage(err error, status int) string {
	if status >= 500 {
		return "internal error; it has been logged"
	}
	var ce *store.ItemClaimedError
	if errors.As(err, &ce) {
		return fmt.Sprintf("item %d is claimed by %s until %s", ce.ItemID, ce.By, ce.Until.Local().Format("15:04:05"))
	}
	var cl *store.ItemClosedError
	if errors.As(err, &cl) {
		return fmt.Sprintf("item %d is already %s", cl.ItemID, cl.Status)
	}
	var cc *store.CountChangedError
	if errors.As(err, &cc) {
		return cc.Error()
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Msg
	}
	for _, own := range []error{ErrInvalid, ErrUnauthenticated, ErrForbidden, ErrNotFound, ErrConflict, ErrTooManyRequests,
		ErrTooLarge, ErrUnsupportedMediaType} {
		if errors.Is(err, own) {
			return err.Error() // written by a handler: no internal detail
		}
	}
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return e.err.Error() // a store category: its text only
		}
	}
	return http.StatusText(status)
}
