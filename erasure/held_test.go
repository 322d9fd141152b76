package erasure_test

import (
	"testing"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// A held run's record waits on its triage item, a copy of the customer's
// values: the erasure removes it with the rest.
func TestEraseHeld(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	seed(t, st, "b-held", 0, nil, []string{"h-1"})
	var id int64
	if err := st.Pool.QueryRow(ctx, `SELECT id FROM messages WHERE external_id = 'h-1'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: id, RunNo: 1, SchemaID: "customer_message", SchemaVersion: "1",
		Status: store.RunHeld,
		Calls:  []store.LLMCall{{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format", Reply: `{"refund_amount":"900"}`, Valid: true}},
		Triage: &store.TriageParams{Reason: store.TriageReasonHeld, LastReply: `{"refund_amount":"900"}`,
			Errors: extracttype.ErrorList{{Kind: extracttype.KindHeld, Path: "/refund_amount", Keyword: "refund_amount_review", Message: "refund above 500.00"}},
			Held:   &store.HeldParams{Data: []byte(`{"refund_amount":"900"}`), Evidence: []byte(`[{"path":"/refund_amount","start":0,"end":3}]`), ValidAs: store.RunSucceeded}},
	}); err != nil {
		t.Fatal(err)
	}
	res, err := erasure.New(st).Erase(ctx, erasure.Request{Keys: []store.MessageKey{{Source: "mail", ExternalID: "h-1"}}, Actor: "dpo", Via: store.ViaCLI, Reason: "request 9"})
	if err != nil || res.Erased != 1 {
		t.Fatalf("erase = %+v, %v", res, err)
	}
	var left int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM triage_items WHERE message_id = $1
		AND (held_record IS NOT NULL OR held_evidence IS NOT NULL OR last_reply <> '')`, id).Scan(&left); err != nil || left != 0 {
		t.Errorf("held item keeps the customer's values: %d rows (%v)", left, err)
	}
}
