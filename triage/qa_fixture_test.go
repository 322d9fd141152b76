package triage_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/extractq/extractq/store"
)

// qaRecord is a valid customer_message record of intent, every other
// field null but full_name.
func qaRecord(t testing.TB, intent string) []byte {
	t.Helper()
	rec := map[string]any{"intent": intent, "flow": "account_access", "full_name": "Dana Cruz", "account_id": nil, "username": nil,
		"email": nil, "phone": nil, "membership_level": nil, "order_id": nil, "zip_code": nil, "street_address": nil, "city": nil,
		"state": nil, "payment_method": nil, "purchase_date": nil, "refund_amount": nil, "product_names": nil}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// qaSample records message text and a first-pass success of the
// simulator's model whose record has intent, drawn for QA (draw 0) with
// recover_password at 50% and other strata at 5%. It returns the
// message's id.
func (b *bundle) qaSample(t testing.TB, text, intent string) int64 {
	t.Helper()
	ctx := context.Background()
	ext := fmt.Sprintf("qa-%d", b.seq.Add(1))
	h := sha256.Sum256([]byte(text))
	res, err := b.st.MessageIngest(ctx, b.st.Pool, store.MessageIngestParams{Source: "test", ExternalID: ext, Body: text,
		ContentHash: h[:], BatchID: b.batch, SchemaID: "customer_message"})
	if err != nil {
		t.Fatal(err)
	}
	rec := qaRecord(t, intent)
	err = b.st.RunOutcomeInsert(ctx, b.st.Pool, store.RunOutcomeParams{
		MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "customer_message", SchemaVersion: b.schemas["customer_message"].Schema.Version,
		Status: store.RunSucceeded,
		Calls: []store.LLMCall{{Attempt: 1, Model: "extractq-sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			PromptTokens: 1800, CompletionTokens: 120, FinishReason: "stop", Reply: string(rec), Valid: true}},
		Extraction: &store.ExtractionParams{Data: rec},
		QA:         &store.QASampleParams{Draw: 0, Share: 0.05, StratifyBy: "/intent", Strata: map[string]float64{"recover_password": 0.5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Run.MessageID
}
