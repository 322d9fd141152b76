package store_test

import (
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestMessageBulkLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch := batchFixture(ctx, t, st, tx)
	stored := ingestParams(batch, uniqueID("bulk"), "stored before the load")
	if _, err := st.MessageIngest(ctx, tx, stored); err != nil {
		t.Fatal(err)
	}
	bulk := func(id, body string) store.BulkMessage {
		p := ingestParams(batch, id, body)
		return store.BulkMessage{ExternalID: id, Body: body, ContentHash: p.ContentHash}
	}
	a, b := bulk(uniqueID("bulk"), "parcel late"), bulk(uniqueID("bulk"), "refund please")
	runs, err := st.MessageBulkLoad(ctx, tx, store.MessageBulkLoadParams{Source: "fixture", BatchID: batch, SchemaID: "support_ticket",
		Messages: []store.BulkMessage{a, bulk(stored.ExternalID, "another text under a stored key"), b}})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("runs = %d, want 2 (the stored key skipped): %+v", len(runs), runs)
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if r.RunNo != 1 || r.Status != store.RunQueued || r.BatchID != batch || r.SchemaID != "support_ticket" ||
			r.PublishedAt != nil || !strings.HasPrefix(r.DedupID, "run-") || seen[r.DedupID] {
			t.Errorf("run = %+v", r)
		}
		seen[r.DedupID] = true
	}
	// What the load stored is what ingest would have: the same key and
	// text again is a duplicate of it, another text a conflict.
	for _, m := range []store.BulkMessage{a, b} {
		res, err := st.MessageIngest(ctx, tx, ingestParams(batch, m.ExternalID, m.Body))
		if err != nil || res.Status != store.IngestDuplicate || res.Message.Body != m.Body {
			t.Errorf("ingest of loaded %s: %v, %+v", m.ExternalID, err, res)
		}
	}
	// The stored key kept its own text.
	res, err := st.MessageIngest(ctx, tx, stored)
	if err != nil || res.Message.Body != stored.Body {
		t.Errorf("stored key: %v, body %q", err, res.Message.Body)
	}

	_, err = st.MessageBulkLoad(ctx, tx, store.MessageBulkLoadParams{Source: "fixture", BatchID: batch, SchemaID: "support_ticket",
		Messages: []store.BulkMessage{a, {ExternalID: "no-hash", Body: "x"}}})
	if err == nil || !strings.Contains(err.Error(), "message 1 of 2") {
		t.Errorf("a message without a hash: err = %v", err)
	}
}
