package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// textLeft reports, for message id, every place its customer text (or a
// copy of it) is still stored: the tables and columns Erasure lists.
func textLeft(ctx context.Context, t *testing.T, db store.DBTX, id int64) []string {
	t.Helper()
	checks := []struct{ name, sql string }{
		{"messages.body", `SELECT count(*) FROM messages WHERE id = $1 AND (body <> '' OR metadata <> '{}' OR length(content_hash) > 0)`},
		{"llm_calls.reply", `SELECT count(*) FROM llm_calls WHERE message_id = $1 AND (reply <> '' OR stripped <> '' OR patch IS NOT NULL)`},
		{"extractions", `SELECT count(*) FROM extractions WHERE message_id = $1`},
		{"triage_items.last_reply", `SELECT count(*) FROM triage_items WHERE message_id = $1 AND (last_reply <> '' OR decision_reason <> '')`},
		{"triage_items.held_record", `SELECT count(*) FROM triage_items WHERE message_id = $1 AND (held_record IS NOT NULL OR held_evidence IS NOT NULL)`},
		{"qa_samples.stratum", `SELECT count(*) FROM qa_samples WHERE message_id = $1 AND (stratum <> '' OR status = 'open')`},
		{"qa_verdicts.fixed", `SELECT count(*) FROM qa_verdicts v JOIN qa_samples s ON s.id = v.sample_id WHERE s.message_id = $1 AND v.fixed IS NOT NULL`},
		{"audit_log", `SELECT count(*) FROM audit_log WHERE action NOT IN ('erase', 'purge')
		     AND (message_id = $1 OR triage_item_id IN (SELECT id FROM triage_items WHERE message_id = $1))
		     AND (reason <> '' OR before IS NOT NULL OR after IS NOT NULL)`},
		// The results outbox keeps only the erased event, which holds no
		// record (the stream's side: relay and erasure tests).
		{"results_outbox", `SELECT count(*) FROM results_outbox WHERE message_id = $1 AND (type <> 'erased' OR record IS NOT NULL)`},
	}
	var left []string
	for _, c := range checks {
		var n int
		if err := db.QueryRow(ctx, c.sql, id).Scan(&n); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n > 0 {
			left = append(left, c.name)
		}
	}
	return left
}

func TestMessagesErase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A schema of its own: an erasure sets extractq.erasing for the rest of
	// its transaction, and the test checks the audit log is append-only
	// again once that transaction has ended.
	st := outboxStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)

	// A result, an approved triage item (its audit entry holds the
	// record), an open triage item, a queued run.
	// Its first delivery was nak'ed after a reply that could not be
	// decoded: that call is in the ledger with the raw body, which may
	// echo the text.
	done := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.LLMCallInsertSuperseded(ctx, st.Pool, undecodableCall(done)); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(done)); err != nil {
		t.Fatal(err)
	}
	approvedItem, approved := triageItemFixture(ctx, t, st, st.Pool, batch)
	if _, err := st.TriageItemApprove(ctx, st.Pool, store.TriageItemApproveParams{
		ItemID: approvedItem, Reviewer: "alice", Via: store.ViaUI, Data: []byte(`{"order_id":"48213"}`), SchemaVersion: "1",
		Overridden:     extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/order_id", Keyword: "grounded", Message: "value does not appear in the message"}},
		OverrideReason: "the customer wrote 48213 on the phone",
	}); err != nil {
		t.Fatal(err)
	}
	openItem, open := triageItemFixture(ctx, t, st, st.Pool, batch)
	queued := messageFixture(ctx, t, st, st.Pool, batch)
	keep := messageFixture(ctx, t, st, st.Pool, batch)

	var failuresBefore int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM failure_events`).Scan(&failuresBefore); err != nil {
		t.Fatal(err)
	}
	key := func(r store.Run) store.MessageKey {
		var k store.MessageKey
		if err := st.Pool.QueryRow(ctx, `SELECT source, external_id FROM messages WHERE id = $1`, r.MessageID).Scan(&k.Source, &k.ExternalID); err != nil {
			t.Fatal(err)
		}
		return k
	}
	keys := []store.MessageKey{key(done), key(approved), key(open), key(queued), {Source: "fixture", ExternalID: "nobody"}}
	p := store.ErasureParams{Actor: "dpo", Via: store.ViaCLI, Reason: "request 2026-118"}

	// A dry run says what would happen and changes nothing.
	dry := p
	dry.DryRun = true
	got, err := st.MessagesErase(ctx, st.Pool, keys, dry)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(keys) || got[0].Status != store.ErasureWouldErase || got[0].ErasedAt != nil || got[3].Status != store.ErasureQueued {
		t.Errorf("dry run = %+v", got)
	}
	for _, r := range []store.Run{done, approved, open} {
		if left := textLeft(ctx, t, st.Pool, r.MessageID); !slices.Contains(left, "messages.body") {
			t.Fatalf("a dry run erased message %d", r.MessageID)
		}
	}

	if _, err := st.MessagesErase(ctx, st.Pool, keys, store.ErasureParams{Via: store.ViaCLI}); err == nil {
		t.Error("erase without an actor: no error")
	}
	// A key given twice counts once.
	got, err = st.MessagesErase(ctx, st.Pool, append(keys, keys[0]), p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{store.ErasureErased, store.ErasureErased, store.ErasureErased, store.ErasureQueued, store.ErasureNotFound}
	for i, r := range got {
		if r.Status != want[i] || r.MessageKey != keys[i] {
			t.Errorf("result %d = %+v, want status %s for %+v", i, r, want[i], keys[i])
		}
		if (r.Status == store.ErasureErased) != (r.ErasedAt != nil) {
			t.Errorf("result %d: status %s with erased_at %v", i, r.Status, r.ErasedAt)
		}
	}
	if len(got) != len(keys) || got[3].QueuedRun != 1 {
		t.Fatalf("results = %+v", got)
	}

	// A delivery that ran beside the one that finished the run, and whose
	// nak comes after the erasure, books its paid call without the text.
	if err := st.LLMCallInsertSuperseded(ctx, st.Pool, undecodableCall(done)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Run{done, approved, open} {
		if left := textLeft(ctx, t, st.Pool, r.MessageID); len(left) > 0 {
			t.Errorf("message %d: text left in %v", r.MessageID, left)
		}
	}
	for _, r := range []store.Run{queued, keep} {
		if left := textLeft(ctx, t, st.Pool, r.MessageID); !slices.Contains(left, "messages.body") {
			t.Errorf("message %d, not erased, lost its text: left only %v", r.MessageID, left)
		}
	}

	// Each erased message has its erased event, for the results stream
	// to purge the message's earlier events.
	for _, r := range []store.Run{done, approved, open} {
		var n int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM results_outbox WHERE message_id = $1 AND type = 'erased'`, r.MessageID).Scan(&n); err != nil || n != 1 {
			t.Errorf("message %d: %d erased events (%v), want 1", r.MessageID, n, err)
		}
	}

	// What is kept: runs and their status, call tokens and cost, the
	// failure analytics, the audit trail of who did what.
	var status string
	var tokens int
	if err := st.Pool.QueryRow(ctx, `SELECT r.status, sum(c.prompt_tokens) FROM runs r JOIN llm_calls c USING (message_id, run_no)
		WHERE r.message_id = $1 GROUP BY r.status`, done.MessageID).Scan(&status, &tokens); err != nil || status != "succeeded" || tokens != 100+2*70 {
		t.Errorf("erased run: status %q, prompt tokens %d, %v; want succeeded, 240 (its call and two superseded)", status, tokens, err)
	}
	var failuresAfter int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM failure_events`).Scan(&failuresAfter); err != nil || failuresAfter != failuresBefore {
		t.Errorf("failure_events: %d after erasure, %d before (%v)", failuresAfter, failuresBefore, err)
	}
	var itemStatus, decidedBy string
	if err := st.Pool.QueryRow(ctx, `SELECT status, decided_by FROM triage_items WHERE id = $1`, openItem).Scan(&itemStatus, &decidedBy); err != nil ||
		itemStatus != store.TriageRejected || decidedBy != "dpo" {
		t.Errorf("open item after erasure: %s by %s (%v); want rejected by dpo", itemStatus, decidedBy, err)
	}
	// Each item's history shows the erasure after what it had.
	if got := auditActions(ctx, t, st, st.Pool, approvedItem); !slices.Equal(got, []string{store.AuditApprove, store.AuditErase}) {
		t.Errorf("approved item's audit actions = %v, want the approval kept, then the erasure", got)
	}
	if got := auditActions(ctx, t, st, st.Pool, openItem); !slices.Equal(got, []string{store.AuditErase}) {
		t.Errorf("open item's audit actions = %v, want the erasure", got)
	}
	var erasures int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'erase' AND actor = 'dpo' AND via = 'cli'
		AND reason = 'request 2026-118' AND triage_item_id IS NULL`).Scan(&erasures); err != nil || erasures != 3 {
		t.Errorf("erase audit entries of messages = %d (%v), want 3", erasures, err)
	}
	if _, err := st.CurrentResultGet(ctx, st.Pool, store.CurrentResultGetParams{MessageID: approved.MessageID}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("current result of an erased message: %v, want not found", err)
	}

	// Result lines say which messages were erased, with no result.
	lines, err := st.BatchResultList(ctx, st.Pool, store.BatchResultListParams{BatchID: batch})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		erased := l.MessageID == done.MessageID || l.MessageID == approved.MessageID || l.MessageID == open.MessageID
		if (l.ErasedAt != nil) != erased || (erased && l.Result != nil) {
			t.Errorf("result line of message %d: erased_at %v, result %v; erased %v", l.MessageID, l.ErasedAt, l.Result, erased)
		}
	}

	// Erased stays erased: asking again changes nothing, an ingest of the
	// key is refused, and no run can be made for it.
	again, err := st.MessagesErase(ctx, st.Pool, keys[:1], p)
	if err != nil || again[0].Status != store.ErasureAlreadyErased || !again[0].ErasedAt.Equal(*got[0].ErasedAt) {
		t.Errorf("erase again = %+v, %v; want already_erased at the first time", again, err)
	}
	res, err := st.MessageIngest(ctx, st.Pool, ingestParams(batch, keys[0].ExternalID, "my parcel never arrived, order "+keys[0].ExternalID))
	if !errors.Is(err, store.ErrErased) || res.Status != store.IngestErased {
		t.Errorf("ingest of an erased key = %s, %v; want erased, ErrErased", res.Status, err)
	}
	if _, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{
		Source: keys[0].Source, ExternalID: keys[0].ExternalID, Body: "x", ContentHash: []byte{1}, BatchID: batch, SchemaID: "another_schema",
	}); !errors.Is(err, store.ErrErased) {
		t.Errorf("ingest of an erased key with another schema: %v, want ErrErased", err)
	}
	_, err = st.Pool.Exec(ctx, `INSERT INTO runs (message_id, run_no, batch_id, schema_id, dedup_id) VALUES ($1, 9, $2, 'support_ticket', 'x-9')`, done.MessageID, batch)
	if err == nil {
		t.Error("a run was made for an erased message")
	}

	// The audit log is still append-only outside an erasure; inside one
	// an entry may only be blanked.
	if _, err := st.Pool.Exec(ctx, `UPDATE audit_log SET reason = 'changed'`); err == nil {
		t.Error("audit rows could be updated")
	}
	err = st.InTx(ctx, func(tx store.DBTX) error {
		if _, err := tx.Exec(ctx, `SET LOCAL extractq.erasing = 'on'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE audit_log SET reason = 'forged' WHERE action = 'erase'`)
		return err
	})
	if err == nil {
		t.Error("an erasing transaction could write an audit entry's reason")
	}
	if _, err := st.Pool.Exec(ctx, `DELETE FROM audit_log`); err == nil {
		t.Error("audit rows could be deleted")
	}
}

// undecodableCall is the call of a delivery of r nak'ed after a reply
// that could not be decoded, its raw body quoting the message.
func undecodableCall(r store.Run) store.LLMCallInsertSupersededParams {
	return store.LLMCallInsertSupersededParams{MessageID: r.MessageID, RunNo: r.RunNo, SchemaID: "support_ticket", SchemaVersion: "1",
		Calls: []store.LLMCall{{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			PromptTokens: 70, CompletionTokens: 12, UsageEstimated: true, CostUSD: 0.0001, LatencyMS: 30,
			FinishReason: "undecodable", HTTPStatus: 200, ReplyBytes: 48, Reply: `{"choices":[{"message":{"content":{"order":"48213"}}}]}`}}}
}

func TestMessagesPurge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A schema of its own: MessagesPurge commits each chunk on the pool.
	st := outboxStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)

	var old []store.Run
	for i := range 5 {
		r := messageFixture(ctx, t, st, st.Pool, batch)
		if i == 0 {
			// One had a delivery nak'ed after an undecodable reply.
			if err := st.LLMCallInsertSuperseded(ctx, st.Pool, undecodableCall(r)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(r)); err != nil {
			t.Fatal(err)
		}
		old = append(old, r)
	}
	_, openOld := triageItemFixture(ctx, t, st, st.Pool, batch)
	queuedOld := messageFixture(ctx, t, st, st.Pool, batch)
	recent := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(recent)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool.Exec(ctx, `UPDATE messages SET received_at = now() - interval '100 days' WHERE id <> $1`, recent.MessageID); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-90 * 24 * time.Hour)
	p := store.PurgeParams{ErasureParams: store.ErasureParams{Actor: "retention", Via: store.ViaCLI, Reason: "older than 90d"},
		ReceivedBefore: cutoff, Chunk: 2}

	dry := p
	dry.DryRun = true
	counted, err := st.MessagesPurge(ctx, dry)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.PurgeResult{Erased: 5, KeptQueued: 1, KeptOpenItem: 1}); counted != want {
		t.Errorf("dry run = %+v, want %+v", counted, want)
	}
	if left := textLeft(ctx, t, st.Pool, old[0].MessageID); !slices.Contains(left, "messages.body") {
		t.Fatal("a dry run erased a message")
	}

	var chunks []int
	p.Progress = func(n int) { chunks = append(chunks, n) }
	res, err := st.MessagesPurge(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.PurgeResult{Erased: 5, KeptQueued: 1, KeptOpenItem: 1}); res != want {
		t.Errorf("purge = %+v, want %+v", res, want)
	}
	if !slices.Equal(chunks, []int{2, 4, 5}) {
		t.Errorf("progress = %v, want 2, 4, 5 (chunks of 2)", chunks)
	}
	for _, r := range old {
		if left := textLeft(ctx, t, st.Pool, r.MessageID); len(left) > 0 {
			t.Errorf("old message %d: text left in %v", r.MessageID, left)
		}
	}
	for _, r := range []store.Run{openOld, queuedOld, recent} {
		if left := textLeft(ctx, t, st.Pool, r.MessageID); !slices.Contains(left, "messages.body") {
			t.Errorf("message %d should be kept; left only %v", r.MessageID, left)
		}
	}
	var purges int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'purge' AND actor = 'retention'`).Scan(&purges); err != nil || purges != 5 {
		t.Errorf("purge audit entries = %d (%v), want 5", purges, err)
	}
	if _, err := st.MessagesPurge(ctx, store.PurgeParams{ErasureParams: p.ErasureParams}); err == nil {
		t.Error("purge without a cutoff: no error")
	}
	// A second purge finds nothing more to erase.
	if again, err := st.MessagesPurge(ctx, p); err != nil || again.Erased != 0 {
		t.Errorf("second purge = %+v, %v; want nothing erased", again, err)
	}
}

// TestMessagesEraseRacesRerun: an erasure and a reviewer's re-run of the
// same message, at the same time, never leave a queued run on an erased
// message: either the re-run comes first and the erasure refuses
// (queued), or the erasure closes the item first and the re-run finds it
// closed.
func TestMessagesEraseRacesRerun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A schema of its own: the erasure and the re-run race on two
	// connections.
	st := storetest.NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)
	erasedFirst, rerunFirst := 0, 0
	for range 20 {
		item, r := triageItemFixture(ctx, t, st, st.Pool, batch)
		var k store.MessageKey
		if err := st.Pool.QueryRow(ctx, `SELECT source, external_id FROM messages WHERE id = $1`, r.MessageID).Scan(&k.Source, &k.ExternalID); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		rerunErr := make(chan error, 1)
		go func() {
			<-start
			_, err := st.TriageItemRerun(ctx, st.Pool, store.TriageItemRerunParams{ItemID: item, Reviewer: "alice", Via: store.ViaUI})
			rerunErr <- err
		}()
		close(start)
		res, err := st.MessagesErase(ctx, st.Pool, []store.MessageKey{k}, store.ErasureParams{Actor: "dpo", Via: store.ViaCLI})
		if err != nil {
			t.Fatal(err)
		}
		rerr := <-rerunErr
		var closed *store.ItemClosedError
		switch {
		case res[0].Status == store.ErasureQueued && rerr == nil:
			rerunFirst++
		case res[0].Status == store.ErasureErased && errors.As(rerr, &closed):
			erasedFirst++
		default:
			t.Fatalf("erase %s, re-run %v: want one of them refused", res[0].Status, rerr)
		}
		var bad int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM runs r JOIN messages m ON m.id = r.message_id
			WHERE m.erased_at IS NOT NULL AND r.status = 'queued'`).Scan(&bad); err != nil || bad != 0 {
			t.Fatalf("%d queued runs of erased messages (%v)", bad, err)
		}
	}
	t.Logf("erasure first %d times, re-run first %d times", erasedFirst, rerunFirst)
}
