package triage_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// heldText asks for a refund above the bundled schema's review
// threshold (500.00); heldRecord is what a model extracts from it.
const (
	heldText   = "Hi, I want a refund of $900 for order 4821300017, the jacket never fit.\nChloe Zhang"
	heldRecord = `{"intent":"refund_initiate","flow":"product_defect","full_name":"Chloe Zhang","account_id":null,"username":null,` +
		`"email":null,"phone":null,"membership_level":null,"order_id":"4821300017","zip_code":null,"street_address":null,` +
		`"city":null,"state":null,"payment_method":null,"purchase_date":null,"refund_amount":"900","product_names":null}`
)

// heldItem records text and a run whose one reply validated and that the
// customer_message schema's review rules hold, as the worker writes it.
// It returns the triage item's id and the message's id.
func (b *bundle) heldItem(t testing.TB, text, reply string) (int64, int64) {
	t.Helper()
	ctx := context.Background()
	ext := fmt.Sprintf("msg-%d", b.seq.Add(1))
	h := sha256.Sum256([]byte(text))
	res, err := b.st.MessageIngest(ctx, b.st.Pool, store.MessageIngestParams{Source: "test", ExternalID: ext, Body: text,
		ContentHash: h[:], BatchID: b.batch, SchemaID: "customer_message"})
	if err != nil {
		t.Fatal(err)
	}
	sch := b.schemas["customer_message"].Schema
	inst, err := pipeline.DecodeStrict([]byte(reply))
	if err != nil {
		t.Fatal(err)
	}
	errs, ev := sch.Validate(inst, text)
	if len(errs) > 0 {
		t.Fatalf("heldItem: the reply does not validate: %v", errs)
	}
	held := sch.Review(inst, text, pipeline.MessageMeta{})
	if len(held) == 0 {
		t.Fatal("heldItem: no review rule holds the reply")
	}
	data, _ := json.Marshal(inst)
	evidence, _ := json.Marshal(ev)
	err = b.st.RunOutcomeInsert(ctx, b.st.Pool, store.RunOutcomeParams{
		MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "customer_message", SchemaVersion: sch.Version, Status: store.RunHeld,
		Calls: []store.LLMCall{{Attempt: 1, Model: "extractq-sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			PromptTokens: 1800, CompletionTokens: 120, FinishReason: "stop", Reply: reply, Valid: true}},
		Triage: &store.TriageParams{Reason: store.TriageReasonHeld, Errors: held, LastReply: reply,
			Held: &store.HeldParams{Data: data, Evidence: evidence, ValidAs: store.RunSucceeded}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := b.st.TriageItemOfRun(ctx, b.st.Pool, res.Run.MessageID, 1)
	if err != nil {
		t.Fatal(err)
	}
	return ref.ID, res.Run.MessageID
}

// Held items are a kind of their own in the queue, and their page names
// the rule that held them and starts from the held record, valid.
func TestHeldItemPages(t *testing.T) {
	t.Parallel()
	b, c := newAliceBundle(t)
	heldID, _ := b.heldItem(t, heldText, heldRecord)
	failedID, _ := b.failedItem(t, "customer_message", albertText, albertFirst, albertRepair)

	q := c.get("/?kind=held")
	if q.status != http.StatusOK || !strings.Contains(q.body, fmt.Sprintf("/items/%d", heldID)) ||
		strings.Contains(q.body, fmt.Sprintf("/items/%d\"", failedID)) {
		t.Errorf("queue of kind held: %d, want item %d and not %d", q.status, heldID, failedID)
	}
	if !strings.Contains(q.body, `<option selected>held</option>`) {
		t.Error("the kind filter does not offer held")
	}
	p := c.get(fmt.Sprintf("/items/%d", heldID))
	for _, want := range []string{
		`for review by <span id="held-by"><code>refund_amount_review</code></span>`,
		"Held by review rules",
		"refund amount is above 500.00: a person confirms it before it counts",
		"from the held record",
		`<span class="ok">valid</span>`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("held item page lacks %q", want)
		}
	}
	if strings.Contains(p.body, "failed on") {
		t.Error("held item page says it failed")
	}
	// The API shows the same draft.
	tok := newToken(t, b, "apiuser")
	r := b.api(t, tok, "GET", fmt.Sprintf("/api/v1/items/%d", heldID), "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"refund_amount":"900"`) || !strings.Contains(r.body, `"reason":"held"`) {
		t.Errorf("API item: %d %s", r.status, r.body)
	}
}
