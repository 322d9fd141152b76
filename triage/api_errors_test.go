package triage_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/internal/httperr/httperrtest"
	"github.com/extractq/extractq/store"
)

// Every route of the JSON API through its error cases: each answer has
// the one shape of docs/http-errors.md ({"error": {"code", "message"}},
// with "errors" and "overridable" for a record that does not validate),
// the code the case wants, with its documented status: the same table
// as ingest serve's.
func TestAPIErrorAnswers(t *testing.T) {
	t.Parallel()
	b, alice := newAliceBundle(t)
	tok := newToken(t, b, "robot")
	other := newToken(t, b, "carol")
	id, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	claimed, _ := b.failedItem(t, "customer_message", albertText+"\nclaimed", albertFirst)
	if r := b.api(t, other, "POST", fmt.Sprintf("/api/v1/items/%d/claim", claimed), ""); r.status != http.StatusOK {
		t.Fatalf("claim as carol: %d %s", r.status, r.body)
	}
	if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/claim", id), ""); r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	item := func(format string) string { return fmt.Sprintf(format, id) }
	validation := httperrtest.Extras{Fields: []string{"errors", "overridable"}}
	tests := []struct {
		name         string
		token        string
		method, path string
		body         string
		status       int
		code         httperr.Code
		x            httperrtest.Extras
	}{
		{"no token", "", "GET", "/api/v1/items", "", 401, httperr.Unauthenticated, httperrtest.Extras{}},
		{"wrong token", "eqt_nope", "GET", "/api/v1/me", "", 401, httperr.Unauthenticated, httperrtest.Extras{}},
		{"no route", tok, "GET", "/api/v1/nonesuch", "", 404, httperr.NotFound, httperrtest.Extras{}},
		{"method of no route", tok, "DELETE", "/api/v1/items", "", 404, httperr.NotFound, httperrtest.Extras{}},
		{"me: a parameter", tok, "GET", "/api/v1/me?x=1", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"items: unknown parameter", tok, "GET", "/api/v1/items?statuss=open", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"items: bad kind", tok, "GET", "/api/v1/items?kind=bogus", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"items: NUL", tok, "GET", "/api/v1/items?batch=%00", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"counts: bad age", tok, "GET", "/api/v1/items/counts?age=3h", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"claim-next: none left", tok, "POST", "/api/v1/items/claim-next?schema=return_request", "", 404, httperr.NotFound, httperrtest.Extras{}},
		{"item: not an id", tok, "GET", "/api/v1/items/abc", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"item: unknown", tok, "GET", "/api/v1/items/999999", "", 404, httperr.NotFound, httperrtest.Extras{}},
		{"claim: claimed by another", tok, "POST", fmt.Sprintf("/api/v1/items/%d/claim", claimed), "", 409, httperr.Conflict, httperrtest.Extras{}},
		{"release: not an id", tok, "POST", "/api/v1/items/x1/release", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"validate: not JSON", tok, "POST", item("/api/v1/items/%d/validate"), `{"record":`, 400, httperr.Invalid, httperrtest.Extras{}},
		{"approve: does not validate", tok, "POST", item("/api/v1/items/%d/approve"), `{"record":{"intent":"nope"}}`, 422, httperr.Unprocessable, validation},
		{"approve: unknown field", tok, "POST", item("/api/v1/items/%d/approve"), `{"recrd":{}}`, 400, httperr.Invalid, httperrtest.Extras{}},
		{"reject: claimed by another", tok, "POST", fmt.Sprintf("/api/v1/items/%d/reject", claimed), `{"reason":"x"}`, 409, httperr.Conflict, httperrtest.Extras{}},
		{"rerun: unknown field", tok, "POST", item("/api/v1/items/%d/rerun"), `{"not":"x"}`, 400, httperr.Invalid, httperrtest.Extras{}},
		{"rerun count: bad path", tok, "GET", "/api/v1/rerun/count?path=order_id", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"bulk rerun: unconfirmed", tok, "POST", "/api/v1/rerun?schema=customer_message", `{"confirmed":0}`, 400, httperr.Invalid, httperrtest.Extras{}},
		{"bulk rerun: count changed", tok, "POST", "/api/v1/rerun?schema=customer_message", `{"confirmed":99}`, 409, httperr.Conflict, httperrtest.Extras{}},
		{"result: schema not configured", tok, "GET", fmt.Sprintf("/api/v1/messages/%d/result?schema=nonesuch", msgID), "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"result: unknown message", tok, "GET", "/api/v1/messages/999999/result", "", 404, httperr.NotFound, httperrtest.Extras{}},
		{"audit: unknown item", tok, "GET", "/api/v1/audit?item_id=999999", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"failing fields: unknown batch", tok, "GET", "/api/v1/reports/failing-fields?batch=b-nonesuch", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"repair: bad since", tok, "GET", "/api/v1/reports/repair?since=ninety", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"batches: bad limit", tok, "GET", "/api/v1/batches?limit=x", "", 400, httperr.Invalid, httperrtest.Extras{}},
		{"batch: unknown", tok, "GET", "/api/v1/batches/b-nonesuch", "", 404, httperr.NotFound, httperrtest.Extras{}},
	}
	seen := map[httperr.Code]bool{}
	check := func(what string, r response, status int, code httperr.Code, x httperrtest.Extras) {
		t.Helper()
		if r.status != status {
			t.Errorf("%s: status %d, want %d; body %.300s", what, r.status, status, r.body)
		}
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type %q", what, ct)
		}
		got := httperrtest.Check(t, what, r.status, []byte(r.body), x)
		if got != code {
			t.Errorf("%s: code %q, want %q", what, got, code)
		}
		seen[got] = true
	}
	for _, tt := range tests {
		r := b.api(t, tt.token, tt.method, tt.path, tt.body)
		check(tt.name+" ("+tt.method+" "+tt.path+")", r, tt.status, tt.code, tt.x)
	}
	// With a session, a write needs the page's CSRF token.
	req, _ := http.NewRequest(http.MethodPost, b.ts.URL+item("/api/v1/items/%d/release"), nil)
	check("session write without the CSRF token", alice.do(req), 403, httperr.Forbidden, httperrtest.Extras{})
	for _, c := range []httperr.Code{httperr.Invalid, httperr.Unauthenticated, httperr.Forbidden, httperr.NotFound, httperr.Conflict, httperr.Unprocessable} {
		if !seen[c] {
			t.Errorf("no case answers %q", c)
		}
	}
}

// TestAPIBodyKeyTwice: a key given twice at the top of an API body is
// refused (400) naming it, as one given twice inside the record is,
// never last-wins.
func TestAPIBodyKeyTwice(t *testing.T) {
	t.Parallel()
	b, _ := newAliceBundle(t)
	tok := newToken(t, b, "robot")
	id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	if r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/claim", id), ""); r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	good := strings.Replace(albertRepair, "7149958241", "7149958247", 1)
	for _, c := range []struct{ path, body, want string }{
		{"validate", `{"record":{"intent":"nope"},"record":` + good + `}`, `body: key "record" occurs twice`},
		{"approve", `{"record":{"intent":"nope"},"record":` + good + `}`, `body: key "record" occurs twice`},
		{"reject", `{"reason":"spam","reason":"not spam"}`, `body: key "reason" occurs twice`},
		{"rerun", `{"note":"a","note":"b"}`, `body: key "note" occurs twice`},
		{"validate", `{"record":{"intent":"x","intent":"y"}}`, "record: "},
	} {
		r := b.api(t, tok, "POST", fmt.Sprintf("/api/v1/items/%d/%s", id, c.path), c.body)
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != http.StatusBadRequest ||
			e.Error.Code != string(httperr.Invalid) || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s %s: %d %s, want 400 invalid saying %q", c.path, c.body, r.status, r.body, c.want)
		}
	}
	if d, _ := b.st.TriageItemGet(t.Context(), b.st.Pool, id); d.Item.Status != store.TriageOpen {
		t.Errorf("after the refused bodies the item is %s, want open", d.Item.Status)
	}
}
