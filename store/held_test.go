package store_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// heldRule is the review rule entry of heldOutcome.
var heldRule = extracttype.Error{Kind: extracttype.KindHeld, Path: "/refund_amount", Keyword: "refund_amount_review",
	Message: "refund above 500.00: a person confirms it before it counts"}

// heldOutcome is a run whose record validated after the repair and that a
// review rule held.
func heldOutcome(r store.Run) store.RunOutcomeParams {
	first := extracttype.Error{Kind: extracttype.KindRule, Path: "/order_id", Keyword: "grounded", Message: "value does not appear in the message"}
	return store.RunOutcomeParams{
		MessageID: r.MessageID, RunNo: r.RunNo, SchemaID: "support_ticket", SchemaVersion: "1", Status: store.RunHeld,
		Calls: []store.LLMCall{
			{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
				PromptTokens: 100, CompletionTokens: 20, FinishReason: "stop", Reply: `{"order_id":"9"}`, ErrorCount: 1},
			{Attempt: 2, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format", RepairStrategy: "regenerate",
				PromptTokens: 150, CompletionTokens: 20, FinishReason: "stop", Reply: `{"order_id":"48213","refund_amount":"5000"}`, Valid: true},
		},
		Triage: &store.TriageParams{Reason: store.TriageReasonHeld, Errors: extracttype.ErrorList{heldRule},
			LastReply: `{"order_id":"48213","refund_amount":"5000"}`,
			Held: &store.HeldParams{Data: []byte(`{"order_id":"48213","refund_amount":"5000"}`),
				Evidence: []byte(`[{"path":"/order_id","start":10,"end":15}]`), ValidAs: store.RunRepaired}},
		Failures: []store.FailureEvent{{CallIndex: 0, Err: first}},
	}
}

// A held run is a final worker outcome that is no result: its record
// waits on its triage item, apart in every count, until a reviewer
// approves it (a result, human-made) or rejects it.
func TestHeld(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)
	ok := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(ok)); err != nil {
		t.Fatal(err)
	}
	held := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.RunOutcomeInsert(ctx, st.Pool, heldOutcome(held)); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, st.Pool, heldOutcome(held)); !errors.Is(err, store.ErrOutcomeExists) {
		t.Errorf("second outcome of a held run: %v, want ErrOutcomeExists", err)
	}
	held2 := messageFixture(ctx, t, st, st.Pool, batch)
	if errs := st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{heldOutcome(held2)}); errs[0] != nil {
		t.Fatal(errs[0])
	}

	// Not a result.
	if n := count(ctx, t, st.Pool, "extractions", held.MessageID); n != 0 {
		t.Errorf("held run stored %d extractions", n)
	}
	if _, err := st.CurrentResultGet(ctx, st.Pool, store.CurrentResultGetParams{MessageID: held.MessageID}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("current result of a held message: %v, want not found", err)
	}
	lines, err := st.BatchResultList(ctx, st.Pool, store.BatchResultListParams{BatchID: batch})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if l.MessageID == held.MessageID && (l.Status != store.RunHeld || l.Result != nil || l.Triage == nil || *l.Triage != store.TriageOpen) {
			t.Errorf("result line of the held message: %+v", l)
		}
	}

	// Counted apart, and final: the batch is done.
	bs, err := st.BatchSummary(ctx, st.Pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	if bs.Held != 2 || bs.Succeeded != 1 || bs.Repaired != 0 || bs.Failed != 0 || bs.Queued != 0 || !bs.Done() {
		t.Errorf("summary %+v, want 2 held, 1 succeeded, done", bs)
	}
	acc, err := st.BatchAccountingGet(ctx, st.Pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Held != 2 || acc.HeldAfterRepair != 2 || acc.Repaired != 0 || acc.FirstPassFailures != 2 {
		t.Errorf("accounting %+v, want 2 held after repair, 2 first-pass failures", acc)
	}
	rows, err := st.BatchList(ctx, st.Pool, store.BatchListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.ID == batch && r.Held != 2 {
			t.Errorf("batch list row %+v, want 2 held", r)
		}
	}
	var viewHeld, backlogHeld int
	if err := st.Pool.QueryRow(ctx, `SELECT held FROM batch_summary WHERE batch_id = $1`, batch).Scan(&viewHeld); err != nil || viewHeld != 2 {
		t.Errorf("batch_summary.held = %d (%v), want 2", viewHeld, err)
	}
	if err := st.Pool.QueryRow(ctx, `SELECT open_held FROM triage_backlog WHERE schema_id = 'support_ticket'`).Scan(&backlogHeld); err != nil || backlogHeld != 2 {
		t.Errorf("triage_backlog.open_held = %d (%v), want 2", backlogHeld, err)
	}

	// The repair fixed them, though they are held: the analytics count
	// them as repaired.
	var effRepaired, fieldRepaired int
	if err := st.Pool.QueryRow(ctx, `SELECT runs_repaired FROM repair_effectiveness_in('-infinity', $1) WHERE path_pattern = '/order_id'`, batch).
		Scan(&effRepaired); err != nil || effRepaired != 2 {
		t.Errorf("repair_effectiveness_in runs_repaired = %d (%v), want the 2 runs held after the repair", effRepaired, err)
	}
	if err := st.Pool.QueryRow(ctx, `SELECT runs_repaired FROM field_failures WHERE schema_id = 'support_ticket' AND path_pattern = '/order_id'`).
		Scan(&fieldRepaired); err != nil || fieldRepaired != 2 {
		t.Errorf("field_failures runs_repaired = %d (%v), want 2", fieldRepaired, err)
	}

	// The item names the rule and carries the record.
	ref, err := st.TriageItemOfRun(ctx, st.Pool, held.MessageID, held.RunNo)
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.TriageItemGet(ctx, st.Pool, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Item.Reason != store.TriageReasonHeld || len(d.Item.Errors) != 1 || d.Item.Errors[0] != heldRule ||
		d.HeldValidAs != store.RunRepaired || string(d.Held) != `{"order_id": "48213", "refund_amount": "5000"}` {
		t.Errorf("held item: reason %q errors %v valid as %q record %s", d.Item.Reason, d.Item.Errors, d.HeldValidAs, d.Held)
	}
	c, err := st.TriageQueueCounts(ctx, st.Pool, store.TriageFilter{BatchID: batch, Kind: string(extracttype.KindHeld)})
	if err != nil || c.Total != 2 {
		t.Errorf("items of kind held: %+v, %v; want 2", c, err)
	}

	// Approved: a human-made result.
	if _, err := st.TriageItemClaim(ctx, st.Pool, store.TriageItemClaimParams{ItemID: ref.ID, Reviewer: "alice", Via: store.ViaUI}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TriageItemApprove(ctx, st.Pool, store.TriageItemApproveParams{ItemID: ref.ID, Reviewer: "alice", Via: store.ViaUI,
		Data: d.Held, Evidence: d.HeldEvidence, SchemaVersion: "1"}); err != nil {
		t.Fatal(err)
	}
	cur, err := st.CurrentResultGet(ctx, st.Pool, store.CurrentResultGetParams{MessageID: held.MessageID})
	if err != nil || cur.Outcome != "approved" || cur.CreatedBy != "alice" {
		t.Errorf("current result after approval: %+v, %v", cur, err)
	}
	// Rejected: closed, no result.
	ref2, _ := st.TriageItemOfRun(ctx, st.Pool, held2.MessageID, held2.RunNo)
	if _, err := st.TriageItemReject(ctx, st.Pool, store.TriageItemRejectParams{ItemID: ref2.ID, Reviewer: "alice", Via: store.ViaUI,
		Reason: "the customer asked for 50.00"}); err != nil {
		t.Fatal(err)
	}
	if n := count(ctx, t, st.Pool, "extractions", held2.MessageID); n != 0 {
		t.Errorf("rejected held run has %d extractions", n)
	}

	// A held outcome must carry its record and its rules; a failed one
	// may not pass for held.
	bad := messageFixture(ctx, t, st, st.Pool, batch)
	for name, mod := range map[string]func(*store.RunOutcomeParams){
		"NoRecord":     func(p *store.RunOutcomeParams) { p.Triage.Held = nil },
		"NoRules":      func(p *store.RunOutcomeParams) { p.Triage.Errors = nil },
		"BadValidAs":   func(p *store.RunOutcomeParams) { p.Triage.Held.ValidAs = "failed" },
		"WithResult":   func(p *store.RunOutcomeParams) { p.Extraction = &store.ExtractionParams{Data: json.RawMessage(`{}`)} },
		"FailedAsHeld": func(p *store.RunOutcomeParams) { p.Status = store.RunFailed },
	} {
		p := heldOutcome(bad)
		mod(&p)
		if err := st.RunOutcomeInsert(ctx, st.Pool, p); err == nil || errors.Is(err, store.ErrOutcomeExists) {
			t.Errorf("%s: %v, want a params error", name, err)
		}
	}
}

// Erasure removes a held run's record and evidence with the rest of the
// text's copies, and closes its open item.
func TestHeldErased(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)
	held := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.RunOutcomeInsert(ctx, st.Pool, heldOutcome(held)); err != nil {
		t.Fatal(err)
	}
	if left := textLeft(ctx, t, st.Pool, held.MessageID); len(left) == 0 {
		t.Fatal("no text stored before the erasure")
	}
	var key store.MessageKey
	if err := st.Pool.QueryRow(ctx, `SELECT source, external_id FROM messages WHERE id = $1`, held.MessageID).Scan(&key.Source, &key.ExternalID); err != nil {
		t.Fatal(err)
	}
	got, err := st.MessagesErase(ctx, st.Pool, []store.MessageKey{key}, store.ErasureParams{Actor: "dpo", Via: store.ViaCLI, Reason: "request 7"})
	if err != nil || got[0].Status != store.ErasureErased {
		t.Fatalf("erase = %+v, %v", got, err)
	}
	if left := textLeft(ctx, t, st.Pool, held.MessageID); len(left) > 0 {
		t.Errorf("text left in %v", left)
	}
	var status, validAs string
	if err := st.Pool.QueryRow(ctx, `SELECT status, held_valid_as FROM triage_items WHERE message_id = $1`, held.MessageID).Scan(&status, &validAs); err != nil ||
		status != store.TriageRejected || validAs != store.RunRepaired {
		t.Errorf("held item after erasure: %s, valid as %s (%v); want rejected, its kind kept", status, validAs, err)
	}
}
