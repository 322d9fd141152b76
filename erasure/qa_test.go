package erasure_test

import (
	"testing"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// QA samples copy a value of the record (the stratum) and reviewers'
// fixes (verdicts): the erasure leaves no trace of either, closes an
// open sample, and keeps whether each field was right, so the estimates
// stand.
func TestEraseQA(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	seed(t, st, "b-qa", 0, nil, []string{"r-1", "o-1"})
	ids := map[string]int64{}
	for _, ext := range []string{"r-1", "o-1"} {
		var id int64
		if err := st.Pool.QueryRow(ctx, `SELECT id FROM messages WHERE external_id = $1`, ext).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[ext] = id
		rec := `{"intent":"Zanzibar","order_id":"48213"}`
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: id, RunNo: 1, SchemaID: "customer_message", SchemaVersion: "1",
			Status:     store.RunSucceeded,
			Calls:      []store.LLMCall{{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format", Reply: rec, Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(rec)},
			QA:         &store.QASampleParams{Draw: 0, Share: 0.05, StratifyBy: "/intent"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	sample, err := st.QASampleClaimNext(ctx, st.Pool, store.QASampleClaimNextParams{Reviewer: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.QASampleReview(ctx, st.Pool, store.QASampleReviewParams{ID: sample, Reviewer: "alice", Via: store.ViaUI,
		Verdicts: []store.QAVerdict{{Path: "/intent", Correct: false, Fixed: []byte(`"Zanzibar refund"`)}, {Path: "/order_id", Correct: true}}}); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := st.Pool.QueryRow(ctx, `SELECT stratum FROM qa_samples WHERE id = $1`, sample).Scan(&before); err != nil || before != "Zanzibar" {
		t.Fatalf("stratum before the erasure: %q, %v", before, err)
	}
	res, err := erasure.New(st).Erase(ctx, erasure.Request{Keys: []store.MessageKey{{Source: "mail", ExternalID: "r-1"}, {Source: "mail", ExternalID: "o-1"}},
		Actor: "dpo", Via: store.ViaCLI, Reason: "request 12"})
	if err != nil || res.Erased != 2 {
		t.Fatalf("erase = %+v, %v", res, err)
	}
	for ext, id := range ids {
		var n int
		if err := st.Pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM qa_samples WHERE message_id = $1 AND (stratum <> '' OR status = 'open' OR claimed_by IS NOT NULL))
     + (SELECT count(*) FROM qa_verdicts v JOIN qa_samples s ON s.id = v.sample_id WHERE s.message_id = $1 AND v.fixed IS NOT NULL)
     + (SELECT count(*) FROM qa_samples s, qa_verdicts v WHERE v.sample_id = s.id AND s.message_id = $1 AND v.fixed::text LIKE '%Zanzibar%')
     + (SELECT count(*) FROM audit_log WHERE message_id = $1 AND action = 'qa_review' AND after IS NOT NULL)`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("message %s: %d QA rows keep the customer's values", ext, n)
		}
	}
	var status string
	if err := st.Pool.QueryRow(ctx, `SELECT status FROM qa_samples WHERE message_id = $1`, ids["o-1"]).Scan(&status); err != nil || status != store.QAErased {
		t.Errorf("the open sample is %q after the erasure (%v), want erased", status, err)
	}
	if _, err := st.QASampleClaimNext(ctx, st.Pool, store.QASampleClaimNextParams{Reviewer: "bob"}); err == nil {
		t.Error("an erased sample can still be claimed")
	}
	est, err := st.QAFieldEstimates(ctx, st.Pool, "customer_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(est) != 3 || est[1].Field != "/intent" || est[1].Wrong != 1 || est[1].Reviewed != 1 {
		t.Errorf("estimates after the erasure: %+v, want the reviewed verdicts kept", est)
	}
	labels, err := st.QALabels(ctx, st.Pool, "b-qa")
	if err != nil || len(labels) != 0 {
		t.Errorf("eval labels after the erasure: %+v, %v; want none (the record is gone)", labels, err)
	}
}
