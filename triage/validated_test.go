package triage_test

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
)

// albertNoName is albertRepair, order id fixed, without the required
// full_name: the case of issue 16, where the page showed "1 errors" (the
// key is missing) and Approve posted the name as null, which validates.
var albertNoName = strings.Replace(strings.Replace(albertRepair, `"full_name":"Albert Sanders",`, "", 1), "7149958241", "7149958247", 1)

var validatedInput = regexp.MustCompile(`name="validated" id="validated" value="([0-9a-f]*)"`)

// TestApproveSendsWhatWasValidated checks that the item page validates
// the record its form posts, that a key the record left out stays out
// when posted (not null), and that Approve refuses a record other than
// the one the page last validated.
func TestApproveSendsWhatWasValidated(t *testing.T) {
	t.Parallel()
	b, c := newAliceBundle(t)
	id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertNoName)
	if r := c.post(fmt.Sprintf("/items/%d/claim", id), nil); r.status != http.StatusSeeOther {
		t.Fatalf("claim: %d", r.status)
	}
	page := c.get(fmt.Sprintf("/items/%d", id))
	if !strings.Contains(page.body, `<span class="bad">1 error</span>`) || !strings.Contains(page.body, `name="m:/full_name"`) {
		t.Fatalf("the page does not say 1 error for the missing name, or has no missing mark:\n%s", page.body)
	}
	m := validatedInput.FindStringSubmatch(page.body)
	if m == nil || m[1] == "" {
		t.Fatal("the page carries no digest of the record it validated")
	}
	// The form as the page posts it, untouched: the name stays missing.
	form := albertForm("7149958247")
	form.Set("v:/full_name", "")
	form.Set("m:/full_name", "1")
	form.Set("validated", m[1])
	r := c.post(fmt.Sprintf("/items/%d/approve", id), form)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "full_name") {
		t.Fatalf("approve with the name missing: %d, want 422 naming full_name", r.status)
	}
	// The reviewer types the name, and approves before the page checked
	// it: the digest is the old record's, so nothing is approved and the
	// page shows the new record checked.
	form.Del("m:/full_name")
	form.Set("v:/full_name", "Albert Sanders")
	r = c.post(fmt.Sprintf("/items/%d/approve", id), form)
	if r.status != http.StatusConflict || !strings.Contains(r.body, "changed after it was last checked") ||
		!strings.Contains(r.body, `<span class="ok">valid</span>`) {
		t.Fatalf("approve of an unchecked record: %d, want 409 with the record checked", r.status)
	}
	m = validatedInput.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatal("no digest on the page after the refusal")
	}
	form.Set("validated", m[1])
	if r := c.post(fmt.Sprintf("/items/%d/approve", id), form); r.status != http.StatusSeeOther {
		t.Fatalf("approve of the checked record: %d %s", r.status, r.body)
	}
	var name *string
	if err := b.st.Pool.QueryRow(t.Context(), `SELECT data->>'full_name' FROM extractions e JOIN triage_items t USING (message_id)
		WHERE t.id = $1 AND e.outcome = 'approved'`, id).Scan(&name); err != nil || name == nil || *name != "Albert Sanders" {
		t.Errorf("approved full_name = %v, %v", name, err)
	}
}

// TestPageApproveWithoutDigest: the item page's Approve without the
// validated digest its form always carries approves nothing (409, the
// record shown checked, saying why and where scripts approve); the
// digest of that page then approves it.
func TestPageApproveWithoutDigest(t *testing.T) {
	t.Parallel()
	b, c := newAliceBundle(t)
	id, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	if r := c.post(fmt.Sprintf("/items/%d/claim", id), nil); r.status != http.StatusSeeOther {
		t.Fatalf("claim: %d", r.status)
	}
	r := c.postForm(fmt.Sprintf("/items/%d/approve", id), albertForm("7149958247"))
	if r.status != http.StatusConflict || !strings.Contains(r.body, "did not say which record was last checked") ||
		!strings.Contains(r.body, "/api/v1/items/{id}/approve") || !strings.Contains(r.body, `<span class="ok">valid</span>`) {
		t.Fatalf("approve without a digest: %d, want 409 saying why, the record checked:\n%s", r.status, r.body)
	}
	if d, _ := b.st.TriageItemGet(t.Context(), b.st.Pool, id); d.Item.Status != store.TriageOpen {
		t.Fatalf("after an approve without a digest the item is %s, want open", d.Item.Status)
	}
	m := validatedInput.FindStringSubmatch(r.body)
	if m == nil || m[1] == "" {
		t.Fatal("no digest on the page after the refusal")
	}
	form := albertForm("7149958247")
	form.Set("validated", m[1])
	if r := c.postForm(fmt.Sprintf("/items/%d/approve", id), form); r.status != http.StatusSeeOther {
		t.Fatalf("approve with the page's digest: %d", r.status)
	}
}

// TestItemPageFlags checks what the item page tells at a glance: a
// repair that changed nothing is flagged (one that changed something is
// not), the runs table names each run's schema and prompt versions, and
// the message's metadata is shown, as text.
func TestItemPageFlags(t *testing.T) {
	t.Parallel()
	b, c := newAliceBundle(t)
	same, _ := b.failedItem(t, "customer_message", albertText, albertRepair, albertRepair)
	changed, changedMsg := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	if _, err := b.st.Pool.Exec(t.Context(), `UPDATE messages SET metadata = '{"channel": "chat", "agent": "<b>x</b>", "n": 3}' WHERE id = $1`, changedMsg); err != nil {
		t.Fatal(err)
	}
	if r := c.get(fmt.Sprintf("/items/%d", same)); !strings.Contains(r.body, `id="repair-unchanged"`) {
		t.Error("a repair equal to the first reply is not flagged")
	}
	r := c.get(fmt.Sprintf("/items/%d", changed))
	if strings.Contains(r.body, `id="repair-unchanged"`) {
		t.Error("a repair that changed the record is flagged as unchanged")
	}
	version := b.schemas["customer_message"].Schema.Version
	if want := `<td class="run-schema">customer_message v` + version + `</td><td class="run-prompt">extract.v1</td>`; !strings.Contains(r.body, want) {
		t.Errorf("the runs table lacks %s", want)
	}
	for _, want := range []string{`<dt><bdi>channel</bdi></dt><dd><bdi>chat</bdi></dd>`, `<dd><bdi>&lt;b&gt;x&lt;/b&gt;</bdi></dd>`,
		`<dt><bdi>n</bdi></dt><dd><bdi>3</bdi></dd>`, `<dt><bdi>source</bdi></dt><dd><bdi>test</bdi></dd>`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the metadata lacks %s", want)
		}
	}
}

// TestParseErrorPrefilled checks that an item whose reply is nearly
// JSON (prose, single quotes, a trailing comma, cut off) starts from a
// lenient parse of it, marked as such, and is approved only once the
// reviewer confirms every field.
func TestParseErrorPrefilled(t *testing.T) {
	t.Parallel()
	b, c := newAliceBundle(t)
	reply := "Here it is: {'intent': 'manage_dispute_bill', 'full_name': 'Albert Sanders', 'account_id': 'U85ALFLG2Z',"
	id, _ := b.failedItem(t, "customer_message", albertText, reply)
	if r := c.post(fmt.Sprintf("/items/%d/claim", id), nil); r.status != http.StatusSeeOther {
		t.Fatalf("claim: %d", r.status)
	}
	page := c.get(fmt.Sprintf("/items/%d", id))
	for _, want := range []string{`id="lenient"`, `id="confirm-lenient"`, `value="Albert Sanders"`, `value="U85ALFLG2Z"`, "a lenient parse of the last reply"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the page of a nearly-JSON reply lacks %s", want)
		}
	}
	form := albertForm("7149958247")
	if r := c.post(fmt.Sprintf("/items/%d/approve", id), form); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "read leniently") {
		t.Fatalf("approve without confirming: %d, want 422 asking to confirm", r.status)
	}
	form.Set("confirm_lenient", "1")
	if r := c.post(fmt.Sprintf("/items/%d/approve", id), form); r.status != http.StatusSeeOther {
		t.Fatalf("approve confirmed: %d", r.status)
	}
}

// TestReopen checks undo: a reviewer reopens their own rejection or
// approval (the approved record goes, the audit log says so), not another
// reviewer's, and not past the time to undo.
func TestReopen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, c := newAliceBundle(t)
	b.reviewer(t, "bob", "bob's long password")
	bob := b.client(t)
	bob.login("bob", "bob's long password")
	id, msg := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
	if r := c.post(fmt.Sprintf("/items/%d/reject", id), map[string][]string{"reason": {"spam"}}); r.status != http.StatusSeeOther {
		t.Fatalf("reject: %d", r.status)
	}
	if page := c.get(fmt.Sprintf("/items/%d", id)); !strings.Contains(page.body, `id="reopen"`) {
		t.Error("the rejected item's page offers no undo to its reviewer")
	}
	if page := bob.get(fmt.Sprintf("/items/%d", id)); strings.Contains(page.body, `id="reopen"`) {
		t.Error("the item's page offers bob to undo alice's decision")
	}
	if r := bob.post(fmt.Sprintf("/items/%d/reopen", id), nil); r.status != http.StatusSeeOther {
		t.Fatalf("bob's reopen: %d", r.status)
	}
	if d, _ := b.st.TriageItemGet(ctx, b.st.Pool, id); d.Item.Status != store.TriageRejected {
		t.Fatalf("after bob's reopen the item is %s, want still rejected", d.Item.Status)
	}
	if r := c.post(fmt.Sprintf("/items/%d/reopen", id), nil); r.status != http.StatusSeeOther {
		t.Fatalf("reopen: %d", r.status)
	}
	d, _ := b.st.TriageItemGet(ctx, b.st.Pool, id)
	if d.Item.Status != store.TriageOpen || d.Item.ClaimedBy != "alice" || d.Item.DecidedBy != "" {
		t.Fatalf("after reopen: %+v, want open, claimed by alice", d.Item)
	}
	// Approve, then undo: the record is no longer the message's result.
	form := albertForm("7149958247")
	if r := c.post(fmt.Sprintf("/items/%d/approve", id), form); r.status != http.StatusSeeOther {
		t.Fatalf("approve: %d", r.status)
	}
	if r := c.post(fmt.Sprintf("/items/%d/reopen", id), nil); r.status != http.StatusSeeOther {
		t.Fatalf("reopen the approval: %d", r.status)
	}
	if _, err := b.st.CurrentResultGet(ctx, b.st.Pool, store.CurrentResultGetParams{MessageID: msg}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the undone approval's record is still the result: %v", err)
	}
	entries, _ := b.st.AuditList(ctx, b.st.Pool, store.AuditListParams{TriageItemID: id})
	var reopens int
	for _, e := range entries {
		if e.Action == store.AuditReopen && e.Actor == "alice" {
			reopens++
		}
	}
	if reopens != 2 {
		t.Errorf("%d reopen entries in the audit log, want 2", reopens)
	}
	// Past the time to undo.
	if _, err := b.st.TriageItemReject(ctx, b.st.Pool, store.TriageItemRejectParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI, Reason: "spam"}); err != nil {
		t.Fatal(err)
	}
	err := b.st.TriageItemReopen(ctx, b.st.Pool, store.TriageItemReopenParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI, Within: time.Microsecond})
	if !errors.Is(err, store.ErrReopenRefused) {
		t.Errorf("reopen past the time to undo: %v, want ErrReopenRefused", err)
	}
	// Nor once the message's text is erased (the item stays decided).
	if _, err := b.st.Pool.Exec(ctx, `UPDATE messages SET erased_at = now() WHERE id = $1`, msg); err != nil {
		t.Fatal(err)
	}
	err = b.st.TriageItemReopen(ctx, b.st.Pool, store.TriageItemReopenParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI, Within: time.Hour})
	if !errors.Is(err, store.ErrReopenRefused) || !strings.Contains(err.Error(), "erased") {
		t.Errorf("reopen of an erased message's item: %v, want ErrReopenRefused", err)
	}
}
