package triage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
)

// albertForm is the editor's form for albertRepair with order_id set to
// orderID, as the page posts it.
func albertForm(orderID string) url.Values {
	f := url.Values{"mode": {"form"}, "o:": {"1"}}
	for k, v := range map[string]string{
		"intent": `"manage_dispute_bill"`, "flow": `"subscription_inquiry"`, "full_name": "Albert Sanders",
		"account_id": "U85ALFLG2Z", "username": "", "email": "", "phone": "", "membership_level": `"silver"`,
		"order_id": orderID, "zip_code": "", "street_address": "", "city": "", "state": "", "payment_method": "null",
		"purchase_date": "", "refund_amount": "20",
	} {
		f.Set("v:/"+k, v)
	}
	f.Set("n:/product_names", "0")
	f.Set("null:/product_names", "on")
	return f
}

func TestDecisions(t *testing.T) {
	t.Parallel()

	t.Run("ClaimEditApproveAndSecondReviewer", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := newBundle(t, bundleOpts{})
		b.reviewer(t, "alice", "correct horse battery")
		b.reviewer(t, "bob", "bob's long password")
		alice, bob := b.client(t), b.client(t)
		alice.login("alice", "correct horse battery")
		bob.login("bob", "bob's long password")
		id, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		id2, _ := b.failedItem(t, "customer_message", albertText+"\nps", albertFirst)

		r := alice.post("/claim-next", nil)
		if r.status != http.StatusSeeOther || r.location != fmt.Sprintf("/items/%d", id) {
			t.Fatalf("alice claims next: %d %q", r.status, r.location)
		}
		page := alice.get(r.location)
		if !strings.Contains(page.body, "You hold this item") {
			t.Fatal("alice's page does not say she holds the item")
		}
		// Bob cannot take or decide alice's item; his claim-next skips it.
		r = bob.post(fmt.Sprintf("/items/%d/claim", id), nil)
		if r.status != http.StatusSeeOther {
			t.Fatalf("bob's claim: %d", r.status)
		}
		if page := bob.get(r.location); !strings.Contains(page.body, "claimed by alice") || !strings.Contains(page.body, "Claimed by <strong>alice</strong>") {
			t.Error("bob is not told alice holds the item")
		}
		if r := bob.post(fmt.Sprintf("/items/%d/approve", id), albertForm("7149958247")); r.status != http.StatusSeeOther {
			t.Errorf("bob's approve: %d", r.status)
		}
		if r := bob.post("/claim-next", nil); r.location != fmt.Sprintf("/items/%d", id2) {
			t.Errorf("bob's claim next = %q, want item %d", r.location, id2)
		}

		// Alice checks a bad edit: the error is beside the field.
		r = alice.post(fmt.Sprintf("/items/%d/check", id), albertForm("12"))
		if r.status != http.StatusOK || !strings.Contains(r.body, "does not match pattern") {
			t.Fatalf("check: %d", r.status)
		}
		fieldStart := strings.Index(r.body, `data-path="/order_id"`)
		if fieldStart < 0 || !strings.Contains(r.body[fieldStart:fieldStart+1500], "does not match pattern") {
			t.Error("the pattern error is not beside the order_id field")
		}
		// Approving it is refused with 422 and the errors.
		r = alice.post(fmt.Sprintf("/items/%d/approve", id), albertForm("12"))
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "fix the errors beside the fields") {
			t.Fatalf("approve invalid: %d", r.status)
		}
		// The fix: the order id as the message has it.
		r = alice.post(fmt.Sprintf("/items/%d/approve", id), albertForm("7149958247"))
		if r.status != http.StatusSeeOther {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		cur, err := b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: msgID})
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		_ = json.Unmarshal(cur.Data, &data)
		if cur.Outcome != "approved" || cur.CreatedBy != "alice" || data["order_id"] != "7149958247" || data["refund_amount"] != "20" {
			t.Errorf("result = %+v %s", cur, cur.Data)
		}
		if !strings.Contains(string(cur.Evidence), `"/order_id"`) {
			t.Errorf("evidence = %s", cur.Evidence)
		}
		d, _ := b.st.TriageItemGet(ctx, b.st.Pool, id)
		if d.Item.Status != store.TriageApproved || d.Item.DecidedBy != "alice" {
			t.Errorf("item = %+v", d.Item)
		}
		entries, _ := b.st.AuditList(ctx, b.st.Pool, store.AuditListParams{TriageItemID: id})
		if len(entries) == 0 || entries[0].Action != store.AuditApprove || entries[0].Actor != "alice" || entries[0].Via != store.ViaUI ||
			!strings.Contains(string(entries[0].Before), `"grounded"`) || !strings.Contains(string(entries[0].After), "7149958247") {
			t.Errorf("audit = %+v", entries)
		}
		// The page of the approved item shows the approved record.
		if p := alice.get(fmt.Sprintf("/items/%d", id)); !strings.Contains(p.body, "human-made") || !strings.Contains(p.body, "approved</span> by <strong>alice</strong>") {
			t.Error("approved item page")
		}
	})

	t.Run("ClaimIsCheckedBeforeTheRecord", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, bundleOpts{})
		b.reviewer(t, "alice", "correct horse battery")
		b.reviewer(t, "bob", "bob's long password")
		alice, bob := b.client(t), b.client(t)
		alice.login("alice", "correct horse battery")
		bob.login("bob", "bob's long password")
		bobTok := newToken(t, b, "bobby")
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		if r := alice.post(fmt.Sprintf("/items/%d/claim", id), nil); r.status != http.StatusSeeOther {
			t.Fatalf("alice's claim: %d", r.status)
		}
		// Forms are made for each post: post adds its client's CSRF token.
		invalid := func() url.Values { return albertForm("12") } // a pattern error: not overridable
		valid := func() url.Values { return albertForm("7149958247") }
		invalidJSON := `{"record":{"intent":"nonsense"}}`
		validJSON := `{"record":` + strings.Replace(albertRepair, "7149958241", "7149958247", 1) + `}`

		// refused checks that each approval of another's or a decided item
		// is a conflict naming why, whatever the record.
		refused := func(why string) {
			t.Helper()
			for name, form := range map[string]func() url.Values{"invalid": invalid, "valid": valid} {
				r := bob.post(fmt.Sprintf("/items/%d/approve", id), form())
				if r.status != http.StatusSeeOther || r.location != fmt.Sprintf("/items/%d", id) {
					t.Errorf("bob approves the %s record in the UI: %d, want 303 back to the item", name, r.status)
					continue
				}
				if p := bob.get(r.location); !strings.Contains(p.body, why) || strings.Contains(p.body, "fix the errors beside the fields") {
					t.Errorf("bob approves the %s record in the UI: the page does not say %q", name, why)
				}
			}
			for name, body := range map[string]string{"invalid": invalidJSON, "valid": validJSON} {
				r := b.api(t, bobTok, "POST", fmt.Sprintf("/api/v1/items/%d/approve", id), body)
				if e := apiErr(t, r); r.status != http.StatusConflict || e.Code != "conflict" || !strings.Contains(e.Message, why) ||
					strings.Contains(r.body, `"errors"`) {
					t.Errorf("bob approves the %s record in the API: %d %s, want 409 saying %q", name, r.status, r.body, why)
				}
			}
		}
		refused(fmt.Sprintf("item %d is claimed by alice until", id))
		// So is a rejection without a reason.
		r0 := b.api(t, bobTok, "POST", fmt.Sprintf("/api/v1/items/%d/reject", id), `{"reason": " "}`)
		if e := apiErr(t, r0); r0.status != http.StatusConflict || !strings.Contains(e.Message, "claimed by alice") {
			t.Errorf("bob rejects alice's item without a reason: %d %s, want 409", r0.status, r0.body)
		}

		// Validating writes nothing and needs no claim: bob may check a
		// record against the item alice holds.
		r := b.api(t, bobTok, "POST", fmt.Sprintf("/api/v1/items/%d/validate", id), invalidJSON)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"valid":false`) {
			t.Errorf("bob validates: %d %s", r.status, r.body)
		}
		// Alice, who holds it, still gets the record's errors.
		if r := alice.post(fmt.Sprintf("/items/%d/approve", id), invalid()); r.status != http.StatusUnprocessableEntity {
			t.Errorf("alice approves an invalid record: %d", r.status)
		}
		if r := alice.post(fmt.Sprintf("/items/%d/approve", id), valid()); r.status != http.StatusSeeOther {
			t.Fatalf("alice approves: %d %s", r.status, r.body)
		}
		// Decided: a conflict for everyone, whatever the record.
		refused(fmt.Sprintf("item %d is already approved", id))
		if r := alice.post(fmt.Sprintf("/items/%d/approve", id), invalid()); r.status != http.StatusSeeOther {
			t.Errorf("alice approves her decided item again with an invalid record: %d, want 303 with the conflict", r.status)
		}
	})

	t.Run("GroundingOverrideNeedsAReason", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b, c := newAliceBundle(t)
		id, msgID := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		c.post(fmt.Sprintf("/items/%d/claim", id), nil)

		// The invented order id is a grounding error only.
		// A missing reason and a too short one are told apart.
		form := albertForm("7149958241")
		required := "Only grounding errors remain. A reason is required for overriding grounding errors: " +
			"to approve anyway, write why the value is right (at least 5 characters)."
		for _, tc := range []struct{ reason, want, not string }{
			{"-", required, "too short"},
			{"  \n ", required, "too short"},
			{"ok", "Only grounding errors remain. The override reason is too short: 2 characters given, at least 5 needed.", "is required"},
			{" née ", "The override reason is too short: 3 characters given, at least 5 needed.", "is required"},
		} {
			form.Del("override_reason")
			if tc.reason != "-" {
				form.Set("override_reason", tc.reason)
			}
			r := c.post(fmt.Sprintf("/items/%d/approve", id), form)
			if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, tc.want) || strings.Contains(r.body, tc.not) {
				t.Errorf("approve with override_reason %q: %d, want 422 with %q", tc.reason, r.status, tc.want)
			}
		}
		form.Set("override_reason", "customer confirmed the order id by phone")
		if r := c.post(fmt.Sprintf("/items/%d/approve", id), form); r.status != http.StatusSeeOther {
			t.Fatalf("approve with reason: %d", r.status)
		}
		cur, err := b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: msgID})
		if err != nil || !strings.Contains(string(cur.Data), "7149958241") {
			t.Fatalf("result = %s, %v", cur.Data, err)
		}
		entries, _ := b.st.AuditList(ctx, b.st.Pool, store.AuditListParams{TriageItemID: id})
		if entries[0].Reason != "customer confirmed the order id by phone" || !strings.Contains(string(entries[0].After), "overridden_errors") {
			t.Errorf("audit = %+v", entries[0])
		}

		// A schema error cannot be overridden.
		id2, _ := b.failedItem(t, "customer_message", albertText+"\n2", albertFirst)
		form = albertForm("1")
		form.Set("override_reason", "I am sure about it")
		if r := c.post(fmt.Sprintf("/items/%d/approve", id2), form); r.status != http.StatusUnprocessableEntity {
			t.Errorf("override of a schema error: %d", r.status)
		}
	})

	t.Run("RawJSONAndArrays", func(t *testing.T) {
		t.Parallel()
		b, c := newAliceBundle(t)
		id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		c.post(fmt.Sprintf("/items/%d/claim", id), nil)

		// A duplicate key in the raw JSON is a parse error, shown.
		r := c.post(fmt.Sprintf("/items/%d/check", id), url.Values{"mode": {"raw"}, "record": {`{"a":1,"a":2}`}})
		if r.status != http.StatusOK || !strings.Contains(r.body, "the raw JSON does not parse") {
			t.Errorf("duplicate key: %d", r.status)
		}
		// Adding an element to an array re-renders the form with it.
		form := albertForm("7149958247")
		form.Del("null:/product_names")
		form.Set("op", "add:/product_names")
		r = c.post(fmt.Sprintf("/items/%d/check", id), form)
		if !strings.Contains(r.body, `name="v:/product_names/0"`) {
			t.Fatal("array element not added")
		}
		// The script's live check gets JSON.
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+fmt.Sprintf("/items/%d/check", id),
			strings.NewReader(albertForm("12").Encode()+"&csrf_token="+url.QueryEscape(c.csrf)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		r = c.do(req)
		var body struct {
			Valid  bool
			Errors []struct{ Path, Keyword string }
			Record string
		}
		if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Valid || len(body.Errors) == 0 || body.Errors[0].Path != "/order_id" ||
			!strings.Contains(body.Record, `"order_id": "12"`) {
			t.Errorf("live check = %s, %v", r.body, err)
		}
		// Raw JSON approval.
		raw := strings.Replace(albertRepair, "7149958241", "7149958247", 1)
		if r := c.post(fmt.Sprintf("/items/%d/approve", id), url.Values{"mode": {"raw"}, "record": {raw}}); r.status != http.StatusSeeOther {
			t.Errorf("raw approve: %d", r.status)
		}
	})

	t.Run("RejectAndRerun", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := newBundle(t, bundleOpts{stream: true})
		b.reviewer(t, "alice", "correct horse battery")
		c := b.client(t)
		c.login("alice", "correct horse battery")
		id1, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		id2, msg2 := b.failedItem(t, "customer_message", albertText+"\nagain", albertFirst)

		r := c.post(fmt.Sprintf("/items/%d/reject", id1), url.Values{"reason": {"  "}})
		if r.status != http.StatusSeeOther {
			t.Fatalf("reject without reason: %d", r.status)
		}
		if p := c.get(r.location); !strings.Contains(p.body, "a rejection needs a reason") {
			t.Error("the missing reason is not shown")
		}
		r = c.post(fmt.Sprintf("/items/%d/reject", id1), url.Values{"reason": {"not about an order"}})
		if r.status != http.StatusSeeOther || r.location != fmt.Sprintf("/items/%d", id2) {
			t.Fatalf("reject: %d %q (want the next item)", r.status, r.location)
		}
		r = c.post(fmt.Sprintf("/items/%d/rerun", id2), url.Values{"note": {"prompt v2 fixes order ids"}})
		if r.status != http.StatusSeeOther {
			t.Fatalf("rerun: %d", r.status)
		}
		run, err := b.st.RunGetWithMessage(ctx, b.st.Pool, store.RunGetParams{MessageID: msg2, RunNo: 2})
		if err != nil {
			t.Fatal(err)
		}
		if run.Status != store.RunQueued || run.PublishedAt == nil || !strings.HasPrefix(run.DedupID, "run-") || run.BatchID != b.batch {
			t.Errorf("run 2 = %+v", run.Run)
		}
		if n := b.q.Messages(t); n != 1 {
			t.Errorf("stream holds %d messages, want 1", n)
		}
		if p := c.get("/"); !strings.Contains(p.body, "published") {
			t.Error("the flash does not say the run was published")
		}
		for id, want := range map[int64]string{id1: store.TriageRejected, id2: store.TriageRerun} {
			d, _ := b.st.TriageItemGet(ctx, b.st.Pool, id)
			if d.Item.Status != want {
				t.Errorf("item %d: %s, want %s", id, d.Item.Status, want)
			}
		}
	})

	t.Run("BulkRerun", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := newBundle(t, bundleOpts{stream: true})
		b.reviewer(t, "alice", "correct horse battery")
		c := b.client(t)
		c.login("alice", "correct horse battery")
		for i := range 3 {
			b.failedItem(t, "customer_message", fmt.Sprintf("%s\n%d", albertText, i), albertFirst, albertRepair)
		}
		b.failedItem(t, "customer_message", albertText+"\nparse", "no JSON here")

		r := c.get("/rerun?schema=customer_message&kind=rule")
		if !strings.Contains(r.body, `<strong id="bulk-count">3</strong>`) {
			t.Fatalf("bulk count page: %d", r.status)
		}
		// A misspelt filter parameter is refused, not dropped: dropped, it
		// would re-run every open item of the schema.
		r = c.get("/rerun?schema=customer_message&knd=rule")
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `unknown parameter &#34;knd&#34;`) {
			t.Errorf("bulk page with a misspelt parameter: %d", r.status)
		}
		r = c.post("/rerun?schema=customer_message&knd=rule", url.Values{"confirmed": {"4"}})
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `unknown parameter &#34;knd&#34;`) {
			t.Errorf("bulk re-run with a misspelt parameter: %d", r.status)
		}
		r = c.post("/rerun?schema=customer_message&kind=rule", url.Values{"confirmed": {"4"}})
		if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/rerun?") {
			t.Fatalf("wrong count: %d %q", r.status, r.location)
		}
		if p := c.get(r.location); !strings.Contains(p.body, "4 items were confirmed but 3 match now") {
			t.Error("the changed count is not shown")
		}
		r = c.post("/rerun?schema=customer_message&kind=rule", url.Values{"confirmed": {"3"}, "note": {"schema fix"}})
		if r.status != http.StatusSeeOther {
			t.Fatalf("bulk: %d", r.status)
		}
		if n := b.q.Messages(t); n != 3 {
			t.Errorf("stream holds %d messages, want 3", n)
		}
		counts, _ := b.st.TriageQueueCounts(ctx, b.st.Pool, store.TriageFilter{Status: store.TriageAnyStatus})
		if counts.ByStatus[store.TriageRerun] != 3 || counts.ByStatus[store.TriageOpen] != 1 {
			t.Errorf("statuses = %v", counts.ByStatus)
		}
		// The page refuses what the API refuses, with the same words.
		for path, want := range map[string]string{
			"/rerun?kind=rule": "schema is required: a bulk re-run extracts with one schema; want one of customer_message, return_request",
			"/rerun?schema=customer_message&status=approved": "status &#34;approved&#34;: a bulk re-run takes open items only; want open or leave it out",
		} {
			if r := c.post(path, url.Values{"confirmed": {"1"}}); r.status != http.StatusBadRequest || !strings.Contains(r.body, want) {
				t.Errorf("POST %s: %d, want 400 with %q", path, r.status, want)
			}
		}
		if r := c.get("/rerun?schema=customer_message&status=approved"); r.status != http.StatusBadRequest ||
			!strings.Contains(r.body, "a bulk re-run takes open items only") || strings.Contains(r.body, "bulk-count") {
			t.Errorf("bulk page of approved items: %d", r.status)
		}
		// Without a schema the page asks for one.
		if r := c.get("/rerun?kind=rule"); r.status != http.StatusOK || !strings.Contains(r.body, "Choose the schema") {
			t.Errorf("bulk page without a schema: %d", r.status)
		}
		// The queue offers a bulk re-run only of open items.
		if r := c.get("/?schema=customer_message&status=approved"); strings.Contains(r.body, `href="/rerun?`) {
			t.Error("the queue of approved items links to a bulk re-run")
		}
		if r := c.get("/?schema=customer_message"); !strings.Contains(r.body, `href="/rerun?schema=customer_message"`) {
			t.Error("the queue of open items does not link to a bulk re-run")
		}
	})
}
