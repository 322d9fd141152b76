package triage

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/store"
)

// Error categories of the triage handlers. Handlers return errors wrapping
// one of these (or a store error); one place, codeOf, maps them to a code
// of the product's one error table (internal/httperr), which gives the
// HTTP status (statusOf), as pkgsite's derrors does. Each is an
// *httperr.Error of its code, with triage's own words.
var (
	// ErrInvalid: the request is malformed (a bad id, filter or body). 400.
	ErrInvalid error = httperr.New(httperr.Invalid, "invalid request")
	// ErrUnauthenticated: no session or token, or a bad one. 401.
	ErrUnauthenticated error = httperr.New(httperr.Unauthenticated, "not logged in")
	// ErrForbidden: a missing or wrong CSRF token, a foreign origin, or a
	// host the server does not answer for. 403.
	ErrForbidden error = httperr.New(httperr.Forbidden, "forbidden")
	// ErrNotFound: no such item, message or page. 404.
	ErrNotFound error = httperr.New(httperr.NotFound, "not found")
	// ErrConflict: the item is claimed by someone else, already decided,
	// or a bulk re-run's count changed. 409.
	ErrConflict error = httperr.New(httperr.Conflict, "conflict")
	// ErrUnprocessable: the record does not validate; the error is a
	// *ValidationError carrying the list. 422.
	ErrUnprocessable error = httperr.New(httperr.Unprocessable, "record does not validate")
	// ErrTooManyRequests: too many login attempts. 429.
	ErrTooManyRequests error = httperr.New(httperr.TooManyRequests, "too many requests")
)

// codeTable maps each category, and the store's errors, to its code, in
// the order tried.
var codeTable = []struct {
	err  error
	code httperr.Code
}{
	{ErrInvalid, httperr.Invalid},
	{ErrUnauthenticated, httperr.Unauthenticated},
	{ErrForbidden, httperr.Forbidden},
	{ErrNotFound, httperr.NotFound},
	{store.ErrNotFound, httperr.NotFound},
	{ErrConflict, httperr.Conflict},
	{store.ErrClaimed, httperr.Conflict},
	{store.ErrItemClosed, httperr.Conflict},
	{store.ErrQAReviewed, httperr.Conflict},
	{store.ErrQAClaimed, httperr.Conflict},
	{store.ErrCountChanged, httperr.Conflict},
	{store.ErrReopenRefused, httperr.Conflict},
	{store.ErrOutcomeExists, httperr.Conflict},
	{store.ErrConflict, httperr.Conflict},
	{ErrUnprocessable, httperr.Unprocessable},
	{ErrTooManyRequests, httperr.TooManyRequests},
	{ErrTooLarge, httperr.TooLarge},
	{ErrUnsupportedMediaType, httperr.UnsupportedMediaType},
}

// codeOf returns the code of err: that of the first category it wraps,
// else of the *httperr.Error it wraps; false for any other error.
func codeOf(err error) (httperr.Code, bool) {
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return e.code, true
		}
	}
	if e, ok := httperr.As(err); ok {
		return e.Code, true
	}
	return "", false
}

// statusOf returns the HTTP status of err: its code's (codeOf), else
// 499 when the client went away, else 500.
func statusOf(err error) int {
	if code, ok := codeOf(err); ok {
		return code.Status()
	}
	if errors.Is(err, context.Canceled) {
		return 499 // the client went away; nobody reads the answer
	}
	return http.StatusInternalServerError
}

// apiErrorOf returns the body of the API's answer to err, whose status
// is status (statusOf): its code, its public message, and for a
// *ValidationError the error list and whether it may be overridden.
func apiErrorOf(err error, status int) *httperr.Error {
	code, ok := codeOf(err)
	if !ok || status >= 500 {
		code = httperr.Internal
	}
	e := &httperr.Error{Code: code, Message: publicMessage(err, status)}
	if ve, ok := errors.AsType[*ValidationError](err); ok {
		e.Fields = map[string]any{"errors": ve.Errors, "overridable": ve.Overridable}
	}
	return e
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
	return fmt.Sprintf("%s (%s)", e.Msg, plural(len(e.Errors), "error"))
}

// Is reports whether target is ErrUnprocessable (or another
// *httperr.Error of code unprocessable).
func (e *ValidationError) Is(target error) bool {
	t, ok := target.(*httperr.Error)
	return ok && t.Code == httperr.Unprocessable
}

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
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return e.err.Error() // a store category: its text only
		}
	}
	return http.StatusText(status)
}
