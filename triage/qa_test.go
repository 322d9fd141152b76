package triage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
)

// The QA pages without a browser: an analyst may not open the queue but
// sees the estimates; a review must mark every field, with a fix a
// non-text field can read as JSON; a saved review opens the next sample,
// and a sample reviewed is not reviewed again; the API gives the
// estimates, labelled as the simulator's.
func TestQAPages(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{})
	b.reviewer(t, "alice", "correct horse battery")
	b.account(t, "ana", "correct horse battery", store.RoleAnalyst)
	first := b.qaSample(t, "I forgot my password, I am Dana Cruz", "recover_password")
	b.qaSample(t, "Dana Cruz: my parcel never arrived", "missing")
	var id int64
	if err := b.st.Pool.QueryRow(context.Background(), `SELECT id FROM qa_samples WHERE message_id = $1`, first).Scan(&id); err != nil {
		t.Fatal(err)
	}

	ana := b.client(t)
	ana.login("ana", "correct horse battery")
	if r := ana.get("/qa"); r.status != http.StatusForbidden {
		t.Errorf("analyst GET /qa: %d, want 403", r.status)
	}
	if r := ana.get("/reports"); r.status != http.StatusOK || !strings.Contains(r.body, `id="qa-none"`) {
		t.Errorf("analyst's reports before any review: %d, want the QA section saying none is reviewed", r.status)
	} else if strings.Contains(r.body, `href="/qa"`) || strings.Contains(r.body, `href="/?`) {
		t.Errorf("analyst's reports link to the QA or triage queue, which answer 403 for the role")
	} else if !strings.Contains(r.body, "QA queue") {
		t.Errorf("analyst's reports do not name the QA queue")
	}

	c := b.client(t)
	c.login("alice", "correct horse battery")
	r := c.get("/qa")
	if r.status != http.StatusOK || !strings.Contains(r.body, "<strong>2</strong> open") {
		t.Fatalf("GET /qa: %d\n%s", r.status, r.body)
	}
	r = c.post("/qa/claim-next", nil)
	if r.status != http.StatusSeeOther || r.location != fmt.Sprintf("/qa/%d", id) {
		t.Fatalf("claim next: %d to %q, want sample %d", r.status, r.location, id)
	}
	page := c.get(r.location)
	if page.status != http.StatusOK || !strings.Contains(page.body, "Dana Cruz") || strings.Count(page.body, `class="qa-field`) != 17 {
		t.Fatalf("sample page: %d, want the message and 17 fields", page.status)
	}
	all := func(except string) url.Values {
		f := url.Values{}
		for _, name := range []string{"intent", "flow", "full_name", "account_id", "username", "email", "phone", "membership_level",
			"order_id", "zip_code", "street_address", "city", "state", "payment_method", "purchase_date", "refund_amount", "product_names"} {
			if name != except {
				f.Set("v:/"+name, "right")
			}
		}
		return f
	}
	path := fmt.Sprintf("/qa/%d", id)
	if r := c.post(path, all("email")); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "email: not marked") {
		t.Errorf("a field unmarked: %d, want 422 naming it", r.status)
	}
	bad := all("")
	bad.Set("v:/product_names", "wrong")
	bad.Set("fix:/product_names", "a shirt")
	if r := c.post(path, bad); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "product_names: the fix is not JSON") {
		t.Errorf("a list fixed with text: %d, want 422", r.status)
	}
	// A fix is checked against its field's schema: a text not among an
	// enum's values, a string for a list, an object for a nullable string.
	for _, tc := range []struct{ field, fix, want string }{
		{"intent", "not_an_intent", "intent: the fix does not fit the field's schema: /intent: is not one of the allowed values"},
		{"product_names", `"shirt"`, "product_names: the fix does not fit the field's schema: /product_names: expected"},
		{"refund_amount", "twelve", "refund_amount: the fix does not fit the field's schema: /refund_amount: does not match pattern"},
		{"product_names", `["shirt"]`, "product_names: the fix does not fit the field's schema: /product_names/0: is not one of the allowed values"},
	} {
		f := all("")
		f.Set("v:/"+tc.field, "wrong")
		f.Set("fix:/"+tc.field, tc.fix)
		if r := c.post(path, f); r.status != http.StatusUnprocessableEntity || !strings.Contains(html.UnescapeString(r.body), tc.want) {
			t.Errorf("%s fixed with %s: %d, want 422 saying %q", tc.field, tc.fix, r.status, tc.want)
		}
	}
	// A field marked twice, or neither right nor wrong, is refused.
	twice := all("intent")
	twice.Add("v:/intent", "wrong")
	twice.Add("v:/intent", "right")
	if r := c.post(path, twice); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "intent: given twice") {
		t.Errorf("intent marked twice: %d, want 422 saying so", r.status)
	}
	maybe := all("")
	maybe.Set("v:/intent", "maybe")
	if r := c.post(path, maybe); r.status != http.StatusUnprocessableEntity || !strings.Contains(html.UnescapeString(r.body), `intent: mark "maybe" is neither right nor wrong`) {
		t.Errorf("intent marked maybe: %d, want 422 saying the mark is invalid", r.status)
	}
	good := all("")
	good.Set("v:/product_names", "wrong")
	good.Set("fix:/product_names", `["calvin klein boots"]`)
	good.Set("v:/full_name", "wrong")
	good.Set("fix:/full_name", "Dana <Cruz>")
	if r := c.post(path, good); r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/qa/") || r.location == path {
		t.Fatalf("review: %d to %q, want the next sample", r.status, r.location)
	}
	d, err := b.st.QASampleGet(context.Background(), b.st.Pool, id)
	if err != nil {
		t.Fatal(err)
	}
	fixes := map[string]string{}
	for _, v := range d.Verdicts {
		if !v.Correct {
			fixes[v.Path] = string(v.Fixed)
		}
	}
	if d.Status != store.QAReviewed || len(d.Verdicts) != 17 || fixes["/product_names"] != `["calvin klein boots"]` || fixes["/full_name"] != `"Dana <Cruz>"` {
		t.Errorf("stored: %s, %d verdicts, fixes %v", d.Status, len(d.Verdicts), fixes)
	}
	if r := c.post(path, good); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "not open") {
		t.Errorf("reviewing again: %d, want 422 saying it is not open", r.status)
	}

	tok := newToken(t, b, "tool")
	r = b.api(t, tok, "GET", "/api/v1/reports/qa?schema=customer_message", "")
	var body struct {
		Counts    store.QACounts
		Estimates []struct {
			Field           string
			Reviewed, Wrong int
			FalseAcceptRate float64 `json:"false_accept_rate"`
			Simulated       bool
		}
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /api/v1/reports/qa: %d %s", r.status, r.body)
	}
	if body.Counts.Open != 1 || body.Counts.Reviewed != 1 || len(body.Estimates) != 18 || body.Estimates[0].Field != store.QAFieldRecord ||
		body.Estimates[0].Reviewed != 1 || body.Estimates[0].Wrong != 1 || !body.Estimates[0].Simulated {
		t.Errorf("estimates: %+v", body)
	}
	// The API: the next sample is alice's claim (her save opened it), so
	// the tool gets none to claim, and may read it but not review it.
	if r := b.api(t, tok, "POST", "/api/v1/qa/claim-next", ""); r.status != http.StatusNotFound {
		t.Errorf("API claim-next with the only open sample claimed: %d, want 404", r.status)
	}
	var next int64
	if err := b.st.Pool.QueryRow(context.Background(), `SELECT id FROM qa_samples WHERE status = 'open'`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	r = b.api(t, tok, "GET", fmt.Sprintf("/api/v1/qa/%d", next), "")
	var sample struct {
		Text   string
		Fields []string
		Record map[string]any
	}
	if err := json.Unmarshal([]byte(r.body), &sample); err != nil || r.status != http.StatusOK || len(sample.Fields) != 17 || sample.Record["intent"] != "missing" {
		t.Fatalf("API GET sample: %d %s", r.status, r.body)
	}
	verdicts := func(n int) string {
		var vs []string
		for _, f := range sample.Fields[:n] {
			vs = append(vs, fmt.Sprintf(`{"path": %q, "correct": true}`, f))
		}
		return `{"verdicts": [` + strings.Join(vs, ",") + `]}`
	}
	review := fmt.Sprintf("/api/v1/qa/%d/review", next)
	if r := b.api(t, tok, "POST", review, verdicts(16)); r.status != http.StatusBadRequest || !strings.Contains(r.body, "missing") {
		t.Errorf("API review of 16 of 17 fields: %d %s, want 400 naming the one missing", r.status, r.body)
	}
	badFix := strings.Replace(verdicts(17), `{"path": "/intent", "correct": true}`, `{"path": "/intent", "correct": false, "fixed": {"a": 1}}`, 1)
	if r := b.api(t, tok, "POST", review, badFix); r.status != http.StatusBadRequest ||
		!strings.Contains(r.body, `verdicts[0] (/intent): the fix does not fit the field's schema: /intent: expected string`) {
		t.Errorf("API review fixing intent with an object: %d %s, want 400 naming the field and the type wanted", r.status, r.body)
	}
	if r := b.api(t, tok, "POST", review, verdicts(17)); r.status != http.StatusConflict || !strings.Contains(r.body, "QA sample is claimed by another reviewer") {
		t.Errorf("API review of alice's claim: %d %s, want 409 saying the QA sample is claimed", r.status, r.body)
	}
	b.reviewer(t, "bob", "correct horse battery")
	bob := b.client(t)
	bob.login("bob", "correct horse battery")
	if r := bob.post(fmt.Sprintf("/qa/%d", next), all("")); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "QA sample is claimed by another reviewer") {
		t.Errorf("bob's review of alice's claim: %d, want 422 saying the QA sample is claimed", r.status)
	}
	if _, err := b.st.Pool.Exec(context.Background(), `UPDATE qa_samples SET claim_expires = now() WHERE id = $1`, next); err != nil {
		t.Fatal(err)
	}
	if r := b.api(t, tok, "POST", review, verdicts(17)); r.status != http.StatusOK || !strings.Contains(r.body, `"reviewed"`) {
		t.Errorf("API review once alice's claim lapsed: %d %s, want 200", r.status, r.body)
	}
	if c, err := b.st.QASampleCounts(context.Background(), b.st.Pool, ""); err != nil || c.Open != 0 || c.Reviewed != 2 {
		t.Errorf("counts after the API review: %+v, %v", c, err)
	}
	if r := b.api(t, tok, "GET", "/api/v1/reports/qa?schema=nope", ""); r.status != http.StatusBadRequest {
		t.Errorf("unknown schema: %d, want 400", r.status)
	}
	if r := ana.get("/reports"); !strings.Contains(r.body, `id="qa-table"`) || !strings.Contains(r.body, `id="qa-simulated"`) {
		t.Errorf("analyst's reports after a review: want the QA table, labelled as simulator figures")
	}
}
