package triage_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
)

// albertFixed is albertRepair with the order id the message has: a
// record that validates.
var albertFixed = strings.Replace(albertRepair, "7149958241", "7149958247", 1)

// staleItem records a failed run whose reply validates with today's
// schema: what a triage item becomes after a schema or rule change that
// the run failed before. errs is the error list it failed with.
func (b *bundle) staleItem(t testing.TB, text, reply string) int64 {
	t.Helper()
	ctx := context.Background()
	ext := fmt.Sprintf("msg-%d", b.seq.Add(1))
	h := sha256.Sum256([]byte(text))
	res, err := b.st.MessageIngest(ctx, b.st.Pool, store.MessageIngestParams{Source: "test", ExternalID: ext, Body: text,
		ContentHash: h[:], BatchID: b.batch, SchemaID: "customer_message"})
	if err != nil {
		t.Fatal(err)
	}
	errs := extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/refund_amount", Keyword: "refund_cap", Message: "a rule of an older schema version"}}
	err = b.st.RunOutcomeInsert(ctx, b.st.Pool, store.RunOutcomeParams{
		MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "customer_message", SchemaVersion: "0", Status: store.RunFailed,
		Calls: []store.LLMCall{{Attempt: 1, Model: "extractq-sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			FinishReason: "stop", Reply: reply, ErrorCount: 1}},
		Failures: []store.FailureEvent{{CallIndex: 0, Err: errs[0]}},
		Triage:   &store.TriageParams{Reason: string(errs[0].Kind), Errors: errs, LastReply: reply},
	})
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := b.st.Pool.QueryRow(ctx, `SELECT id FROM triage_items WHERE message_id = $1`, res.Run.MessageID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

type bulkReport struct {
	Action  string `json:"action"`
	Done    int    `json:"done"`
	Skipped int    `json:"skipped"`
	Results []struct {
		ItemID  int64  `json:"item_id"`
		Status  string `json:"status"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Digest  string `json:"digest"`
		RunNo   int    `json:"run_no"`
	} `json:"results"`
}

func (r bulkReport) statuses() string {
	var out []string
	for _, o := range r.Results {
		s := fmt.Sprintf("%d:%s", o.ItemID, o.Status)
		if o.Code != "" {
			s += "(" + o.Code + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestBulk: multi-select decides each item named with its single
// action's checks and audit entries, and reports per item; re-runs are
// an admin's.
func TestBulk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBundle(t, bundleOpts{})
	b.account(t, "rita", "correct horse battery", store.RoleReviewer)
	b.reviewer(t, "adam", "correct horse battery")
	rita := b.client(t)
	rita.login("rita", "correct horse battery")
	ritaTok := newRoleToken(t, b, "rtok", "reviewer", "")
	adminTok := newToken(t, b, "atok")

	auditOf := func(id int64) []string {
		t.Helper()
		es, err := b.st.AuditList(ctx, b.st.Pool, store.AuditListParams{TriageItemID: id})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Actor+":"+e.Action)
		}
		return out
	}
	decode := func(t *testing.T, r response) bulkReport {
		t.Helper()
		var rep bulkReport
		if r.status != http.StatusOK {
			t.Fatalf("bulk: %d %s", r.status, r.body)
		}
		if err := json.Unmarshal([]byte(r.body), &rep); err != nil {
			t.Fatalf("bulk: %s: %v", r.body, err)
		}
		return rep
	}

	t.Run("ApproveFromThePage", func(t *testing.T) {
		valid := b.staleItem(t, albertText, albertFixed)
		invalid, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)
		held := b.staleItem(t, albertText, albertFixed)
		if _, err := b.st.TriageItemClaim(ctx, b.st.Pool, store.TriageItemClaimParams{ItemID: held, Reviewer: "adam", Via: store.ViaUI, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		lenient, _ := b.failedItem(t, "customer_message", albertText, "Here it is: {'full_name': 'Albert Sanders', 'order_id': '7149958247',")

		// The queue page has a checkbox for each open item, in the bulk form.
		page := rita.get("/")
		for _, id := range []int64{valid, invalid, held, lenient} {
			if !strings.Contains(page.body, fmt.Sprintf(`<input type="checkbox" name="id" value="%d" form="bulk"`, id)) {
				t.Errorf("queue page: no checkbox for item %d", id)
			}
		}
		if !strings.Contains(page.body, `id="bulk-approve"`) || strings.Contains(page.body, `id="bulk-rerun"`) {
			t.Error("queue page of a reviewer: want the approve button and no re-run button")
		}

		form := url.Values{"action": {"approve"}, "id": {fmt.Sprint(valid), fmt.Sprint(invalid), fmt.Sprint(held), fmt.Sprint(lenient)}}
		r := rita.post("/items/bulk?schema=customer_message", form)
		if r.status != http.StatusSeeOther || r.location != "/?schema=customer_message" {
			t.Fatalf("bulk approve: %d → %q, want 303 to the queue with its filter", r.status, r.location)
		}
		q := rita.get(r.location)
		for _, want := range []string{"Approved 1 item; 3 skipped", fmt.Sprintf(`href="/items/%d">#%d</a></td><td><span class="status s-approved">approved`, valid, valid),
			"does not validate (1 error, grounding only: an override needs its own reason", "claimed by adam", "read leniently"} {
			if !strings.Contains(q.body, want) {
				t.Errorf("queue after the bulk approve lacks %q:\n%s", want, q.body[strings.Index(q.body, "bulk-report"):][:1500])
			}
		}
		if again := rita.get("/"); strings.Contains(again.body, `id="bulk-report"`) {
			t.Error("the bulk report is shown twice")
		}
		for id, want := range map[int64]string{valid: store.TriageApproved, invalid: store.TriageOpen, held: store.TriageOpen, lenient: store.TriageOpen} {
			if d, _ := b.st.TriageItemGet(ctx, b.st.Pool, id); d.Item.Status != want {
				t.Errorf("item %d is %s, want %s", id, d.Item.Status, want)
			}
		}
		if got := auditOf(valid); len(got) == 0 || got[0] != "rita:approve" {
			t.Errorf("audit of the approved item = %q", got)
		}
		// A form without its CSRF token does nothing.
		other := b.staleItem(t, albertText, albertFixed)
		if r := rita.post("/items/bulk", url.Values{"action": {"approve"}, "id": {fmt.Sprint(other)}, "csrf_token": {"forged"}}); r.status != http.StatusForbidden {
			t.Errorf("bulk approve without the CSRF token: %d, want 403", r.status)
		}
		if d, _ := b.st.TriageItemGet(ctx, b.st.Pool, other); d.Item.Status != store.TriageOpen {
			t.Errorf("item %d after a forged bulk approve: %s", other, d.Item.Status)
		}
	})

	t.Run("ApproveWithDigests", func(t *testing.T) {
		a := b.staleItem(t, albertText, albertFixed)
		c := b.staleItem(t, albertText, albertFixed)
		r := b.api(t, ritaTok, "GET", fmt.Sprintf("/api/v1/items/%d", a), "")
		var item struct {
			Digest string `json:"draft_digest"`
		}
		if err := json.Unmarshal([]byte(r.body), &item); err != nil || len(item.Digest) != 64 {
			t.Fatalf("item %d: draft_digest %q, %v", a, item.Digest, err)
		}
		body := fmt.Sprintf(`{"action":"approve","ids":[%d,%d],"digests":{"%d":"%s","%d":"0000"}}`, a, c, a, item.Digest, c)
		rep := decode(t, b.api(t, ritaTok, "POST", "/api/v1/items/bulk", body))
		if got, want := rep.statuses(), fmt.Sprintf("%d:approved %d:skipped(conflict)", a, c); got != want || rep.Done != 1 || rep.Skipped != 1 {
			t.Errorf("bulk approve with digests = %s, want %s", got, want)
		}
	})

	t.Run("Reject", func(t *testing.T) {
		x, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
		y, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
		if r := b.api(t, ritaTok, "POST", "/api/v1/items/bulk", fmt.Sprintf(`{"action":"reject","ids":[%d]}`, x)); r.status != http.StatusBadRequest || !strings.Contains(r.body, "needs a reason") {
			t.Errorf("bulk reject without a reason: %d %s", r.status, r.body)
		}
		if r := b.api(t, ritaTok, "POST", "/api/v1/items/bulk", fmt.Sprintf(`{"action":"reject","reason":"spam","ids":[%d,%d]}`, x, x)); r.status != http.StatusBadRequest {
			t.Errorf("bulk reject naming an item twice: %d %s", r.status, r.body)
		}
		if r := b.api(t, ritaTok, "POST", "/api/v1/items/bulk", fmt.Sprintf(`{"action":"rerun","ids":[%d]}`, x)); r.status != http.StatusBadRequest {
			t.Errorf("re-run on the bulk route: %d %s, want 400 (re-runs are on bulk-rerun)", r.status, r.body)
		}
		rep := decode(t, b.api(t, ritaTok, "POST", "/api/v1/items/bulk", fmt.Sprintf(`{"action":"reject","reason":"spam","ids":[%d,%d,999999]}`, x, y)))
		if got, want := rep.statuses(), fmt.Sprintf("%d:rejected %d:rejected 999999:skipped(not_found)", x, y); got != want {
			t.Errorf("bulk reject = %s, want %s", got, want)
		}
		rep = decode(t, b.api(t, ritaTok, "POST", "/api/v1/items/bulk", fmt.Sprintf(`{"action":"reject","reason":"again","ids":[%d]}`, x)))
		if got, want := rep.statuses(), fmt.Sprintf("%d:skipped(conflict)", x); got != want {
			t.Errorf("bulk reject of a decided item = %s, want %s", got, want)
		}
		for _, id := range []int64{x, y} {
			if got := auditOf(id); len(got) == 0 || got[0] != "rtok:reject" {
				t.Errorf("audit of item %d = %q", id, got)
			}
		}
		// The page: no reason, nothing done, said so.
		z, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
		r := rita.post("/items/bulk", url.Values{"action": {"reject"}, "id": {fmt.Sprint(z)}})
		if q := rita.get(r.location); r.status != http.StatusSeeOther || !strings.Contains(q.body, "Nothing done: invalid request: a rejection needs a reason") {
			t.Errorf("page bulk reject without a reason: %d → %s", r.status, r.location)
		}
	})

	t.Run("RerunIsAnAdmins", func(t *testing.T) {
		x, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
		y, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
		body := fmt.Sprintf(`{"action":"rerun","note":"prompt v2","ids":[%d,%d]}`, x, y)
		if r := b.api(t, ritaTok, "POST", "/api/v1/items/bulk-rerun", body); r.status != http.StatusForbidden || !strings.Contains(r.body, `"forbidden"`) {
			t.Errorf("reviewer's bulk re-run: %d %s, want 403", r.status, r.body)
		}
		if r := rita.post("/items/bulk-rerun", url.Values{"action": {"rerun"}, "id": {fmt.Sprint(x)}}); r.status != http.StatusForbidden {
			t.Errorf("reviewer's bulk re-run page: %d, want 403", r.status)
		}
		rep := decode(t, b.api(t, adminTok, "POST", "/api/v1/items/bulk-rerun", body))
		if got, want := rep.statuses(), fmt.Sprintf("%d:rerun %d:rerun", x, y); got != want || rep.Results[0].RunNo != 2 {
			t.Errorf("admin's bulk re-run = %s (%+v), want %s", got, rep.Results, want)
		}
		for _, id := range []int64{x, y} {
			if got := auditOf(id); len(got) == 0 || got[0] != "atok:rerun" {
				t.Errorf("audit of item %d = %q", id, got)
			}
		}
	})
}
