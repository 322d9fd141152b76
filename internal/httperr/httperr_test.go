package httperr_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/internal/httperr/httperrtest"
)

// The table and docs/http-errors.md list the same codes with the same
// statuses; a specific code has its category's status.
func TestTableIsDocumented(t *testing.T) {
	t.Parallel()
	documented := httperrtest.DocumentedCodes(t)
	cats := httperr.Categories()
	for _, c := range cats {
		status, ok := documented[c.Code]
		switch {
		case !ok:
			t.Errorf("code %q is not in docs/http-errors.md", c.Code)
		case status != c.Status:
			t.Errorf("code %q: status %d, docs/http-errors.md says %d", c.Code, c.Status, status)
		}
		if c.Parent != "" {
			p, ok := httperr.Lookup(c.Parent)
			if !ok || p.Parent != "" || p.Status != c.Status {
				t.Errorf("code %q refines %q (%+v), want a general code of status %d", c.Code, c.Parent, p, c.Status)
			}
		}
		if c.Description == "" {
			t.Errorf("code %q has no description", c.Code)
		}
	}
	for code := range documented {
		if _, ok := httperr.Lookup(code); !ok {
			t.Errorf("docs/http-errors.md lists %q, which is not in the table", code)
		}
	}
	if len(cats) != len(documented) {
		t.Errorf("the table has %d codes, the docs %d", len(cats), len(documented))
	}
}

// The docs map every code ingest serve answered before to a code of the
// table of the same status: the one change of its answers.
func TestOldCodesAreMapped(t *testing.T) {
	t.Parallel()
	// Every code the server wrote before the one table.
	before := map[string]int{
		"bad_parameter": 400, "unknown_schema": 400, "bad_body": 400, "empty_body": 400, "invalid_json": 400,
		"no_messages": 400, "bad_csv_header": 400, "compressed_body": 400, "not_text": 400, "unauthorized": 401,
		"cross_origin": 403, "not_found": 404, "method_not_allowed": 405, "batch_exists": 409, "body_too_large": 413,
		"unsupported_media_type": 415, "misdirected_request": 421, "nothing_accepted": 422, "busy": 429,
		"internal": 500, "unavailable": 503,
	}
	old := httperrtest.OldCodes(t)
	for code, status := range before {
		nc, ok := old[code]
		if !ok {
			t.Errorf("docs/http-errors.md does not say what became of %q", code)
			continue
		}
		if got := nc.Status(); got != status {
			t.Errorf("%q (%d) became %q, of status %d", code, status, nc, got)
		}
		if _, ok := httperr.Lookup(nc); !ok {
			t.Errorf("%q became %q, which is not in the table", code, nc)
		}
	}
	for code := range old {
		if _, ok := before[code]; !ok {
			t.Errorf("docs/http-errors.md lists an old code %q that the server never answered", code)
		}
	}
}

func TestErrorIs(t *testing.T) {
	t.Parallel()
	compressed := httperr.New(httperr.CompressedBody, "the body is gzip-compressed")
	cause := errors.New("connection refused")
	down := &httperr.Error{Code: httperr.Unavailable, Message: "Postgres is unreachable", Err: cause}
	for _, tt := range []struct {
		err    error
		target error
		want   bool
	}{
		{compressed, httperr.ErrInvalid, true}, // its category
		{compressed, compressed, true},
		{compressed, httperr.New(httperr.CompressedBody, "another message"), true},
		{compressed, httperr.New(httperr.NotText, "x"), false}, // a sibling
		{httperr.ErrInvalid, compressed, false},                // not the other way round
		{compressed, httperr.ErrNotFound, false},
		{fmt.Errorf("%w: no item 3", httperr.ErrNotFound), httperr.ErrNotFound, true},
		{fmt.Errorf("reading: %w", httperr.New(httperr.NotFound, "not found")), httperr.ErrNotFound, true},
		{down, cause, true},
		{down, httperr.ErrUnavailable, true},
		{errors.New("not found"), httperr.ErrNotFound, false},
	} {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
		}
	}
	if down.Error() != "Postgres is unreachable: connection refused" || down.Message != "Postgres is unreachable" {
		t.Errorf("Error() = %q: want the message, then the cause for the log", down.Error())
	}
	if e, ok := httperr.As(fmt.Errorf("x: %w", down)); !ok || e != down {
		t.Errorf("As of a wrapped *Error = %v, %v", e, ok)
	}
	if _, ok := httperr.As(cause); ok {
		t.Error("As of a plain error found an *Error")
	}
	if got := httperr.Errorf(httperr.NotFound, "there is no batch %q", "b-1"); got.Message != `there is no batch "b-1"` || got.Status() != 404 {
		t.Errorf("Errorf = %+v", got)
	}
	if got := httperr.New(httperr.Invalid, "100% wrong"); got.Message != "100% wrong" {
		t.Errorf("New formatted its message: %q", got.Message)
	}
	if got := httperr.Code("nonesuch").Status(); got != 500 {
		t.Errorf("status of an unknown code = %d, want 500", got)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	type report struct {
		BatchID string `json:"batch_id,omitempty"`
		Lines   int    `json:"lines"`
	}
	for _, tt := range []struct {
		name   string
		e      *httperr.Error
		status int
		body   string
	}{
		{"plain", httperr.New(httperr.NotFound, `there is no batch "b-<1>"`), 404,
			`{"error":{"code":"not_found","message":"there is no batch \"b-\u003c1\u003e\""}}`},
		{"fields", &httperr.Error{Code: httperr.Unprocessable, Message: "fix it", Fields: map[string]any{"overridable": false, "errors": []string{"e"}}}, 422,
			`{"error":{"code":"unprocessable","errors":["e"],"message":"fix it","overridable":false}}`},
		{"beside", &httperr.Error{Code: httperr.Unprocessable, Message: "all rejected", Beside: &report{Lines: 2}}, 422,
			`{"error":{"code":"unprocessable","message":"all rejected"},"lines":2}`},
		{"beside empty", &httperr.Error{Code: httperr.Unavailable, Message: "down", Beside: struct{}{}}, 503,
			`{"error":{"code":"unavailable","message":"down"}}`},
		{"cause not sent", &httperr.Error{Code: httperr.Internal, Message: "internal error; it has been logged", Err: errors.New("secret detail")}, 500,
			`{"error":{"code":"internal","message":"internal error; it has been logged"}}`},
		{"beside not an object", &httperr.Error{Code: httperr.Unprocessable, Message: "x", Beside: []int{1}}, 500,
			`{"error":{"code":"internal","message":"internal error; it has been logged"}}`},
	} {
		w := httptest.NewRecorder()
		httperr.Write(w, tt.e)
		if w.Code != tt.status || w.Body.String() != tt.body+"\n" {
			t.Errorf("%s: %d %s\nwant %d %s", tt.name, w.Code, w.Body, tt.status, tt.body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tt.name, ct)
		}
		if w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", tt.name, w.Header())
		}
		httperrtest.Check(t, tt.name, w.Code, w.Body.Bytes(), httperrtest.Extras{Beside: tt.e.Beside != nil && w.Code != 500,
			Fields: map[bool][]string{true: {"errors", "overridable"}}[tt.e.Fields != nil]})
	}
	// A Content-Type set already is kept.
	w := httptest.NewRecorder()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	httperr.Write(w, httperr.ErrForbidden)
	if ct := w.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" || w.Code != http.StatusForbidden {
		t.Errorf("preset Content-Type: %d %q", w.Code, ct)
	}
}

// Categories returns a copy: the table cannot be changed through it.
func TestCategoriesIsACopy(t *testing.T) {
	t.Parallel()
	c := httperr.Categories()
	c[0].Status = 999
	if httperr.Categories()[0].Status == 999 || !slices.ContainsFunc(httperr.Categories(), func(c httperr.Category) bool { return c.Code == httperr.Invalid && c.Status == 400 }) {
		t.Error("Categories returned the table itself")
	}
}
