package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// Without a batch of the labels file, eval runs one: it ingests the
// labelled messages onto the stream and waits until each has a worker
// outcome, then scores that batch. Here the test stands in for the
// worker, writing each queued run's outcome once the ingest queued it.
func TestRunIngests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	cfg := config.Default()
	cfg.NATS = q.NATS
	labels := filepath.Join(t.TempDir(), "labels.jsonl")
	if err := os.WriteFile(labels, []byte(
		`{"id":"r1","text":"order 1234567890 never came","expected":{"order_id":"1234567890","intent":"missing"}}`+"\n"+
			`{"id":"r2","text":"where is my refund","expected":{"order_id":null,"intent":"refund_status"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(q.JS, q.NATS)
	var ingested string
	o := options{labels: labels, noSave: true, timeout: 2 * time.Minute,
		ingest: func(ctx context.Context, file, schemaID string) (string, error) {
			b, err := ingestAndWait(ctx, st, pub, cfg, file, schemaID, 2*time.Minute, io.Discard)
			ingested = b
			return b, err
		}}
	done := make(chan error, 1)
	var out strings.Builder
	go func() { done <- run(ctx, &out, st, cfg, o) }()

	records := map[string]string{
		"r1": `{"order_id":"1234567890","intent":"missing"}`,
		"r2": `{"order_id":null,"intent":"refund_initiate"}`,
	}
	var queued []store.RunRef
	testsignal.Eventually(t, time.Minute, "the ingest queues both labelled messages", func() bool {
		rows, err := st.Pool.Query(ctx, `SELECT r.message_id, r.run_no FROM runs r JOIN messages m ON m.id = r.message_id
WHERE r.status = 'queued' AND r.published_at IS NOT NULL AND m.external_id IN ('r1', 'r2')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		queued = queued[:0]
		for rows.Next() {
			var r store.RunRef
			if err := rows.Scan(&r.MessageID, &r.RunNo); err != nil {
				t.Fatal(err)
			}
			queued = append(queued, r)
		}
		return len(queued) == 2
	})
	for _, r := range queued {
		var ext string
		if err := st.Pool.QueryRow(ctx, `SELECT external_id FROM messages WHERE id = $1`, r.MessageID).Scan(&ext); err != nil {
			t.Fatal(err)
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{
			MessageID: r.MessageID, RunNo: r.RunNo, SchemaID: "customer_message", SchemaVersion: "1", Status: store.RunSucceeded,
			Calls:      []store.LLMCall{{Attempt: 1, Model: "extractq-sim-1", PromptVersion: "extract.v1", RequestMode: "response_format", Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(records[ext])},
		}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("eval did not return once every run had its outcome")
	}
	if ingested == "" || !strings.Contains(out.String(), "Eval of batch "+ingested+": 2 label lines, 2 matched, 0 without a model record") {
		t.Fatalf("eval of the batch it ran (%q):\n%s", ingested, out.String())
	}
	// A second eval of the file scores the batch already run: nothing
	// is ingested.
	o.ingest = func(context.Context, string, string) (string, error) {
		t.Error("eval ingested again though a batch of the file was run")
		return "", nil
	}
	out.Reset()
	if err := run(ctx, &out, st, cfg, o); err != nil || !strings.Contains(out.String(), "Eval of batch "+ingested+":") {
		t.Fatalf("second eval: %v\n%s", err, out.String())
	}
}

// eval -qa scores a batch against its QA reviews: a field marked right
// is labelled with the record's value, one marked wrong with the fix.
func TestRunQA(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	cfg := config.Default()
	texts := []string{"order 1234567890 never came", "where is my refund"}
	seedBatch(ctx, t, st, "b-qa", "sample.jsonl", "extract.v1", texts, []string{"", ""})
	rows, err := st.Pool.Query(ctx, `SELECT message_id FROM runs WHERE batch_id = 'b-qa' ORDER BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	records := []string{`{"order_id":"1234567890","intent":"missing"}`, `{"order_id":null,"intent":"refund_initiate"}`}
	for i, id := range ids {
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{
			MessageID: id, RunNo: 1, SchemaID: "customer_message", SchemaVersion: "1", Status: store.RunSucceeded,
			Calls:      []store.LLMCall{{Attempt: 1, Model: "extractq-sim-1", PromptVersion: "extract.v1", RequestMode: "response_format", Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(records[i])},
			QA:         &store.QASampleParams{Draw: 0, Share: 0.05},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// m1 right on both fields; m2's intent wrong (refund_status).
	for _, vs := range [][]store.QAVerdict{
		{{Path: "/intent", Correct: true}, {Path: "/order_id", Correct: true}},
		{{Path: "/intent", Correct: false, Fixed: []byte(`"refund_status"`)}, {Path: "/order_id", Correct: true}},
	} {
		id, err := st.QASampleClaimNext(ctx, st.Pool, store.QASampleClaimNextParams{Reviewer: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.QASampleReview(ctx, st.Pool, store.QASampleReviewParams{ID: id, Reviewer: "alice", Via: store.ViaUI, Verdicts: vs}); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := run(ctx, &out, st, cfg, options{qa: true, batch: "b-qa"}); err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			fields[f[0]] = strings.Join(f, " ")
		}
	}
	// intent: m1 TP, m2 wrong value (FP and FN). order_id: m1 TP, m2 TN.
	if got := fields["intent"]; !strings.HasPrefix(got, "intent 2 1 1 1 0") {
		t.Errorf("intent row %q, want tp 1 fp 1 fn 1:\n%s", got, out.String())
	}
	if got := fields["order_id"]; !strings.HasPrefix(got, "order_id g 2 1 0 0 1") {
		t.Errorf("order_id row %q, want tp 1 tn 1:\n%s", got, out.String())
	}
	// Then the weighted estimate: intent wrong in 1 of 2 samples of one
	// share, 50.0%, Wilson at n = 2 [9.5–90.5].
	if !strings.Contains(out.String(), "SIMULATOR FIGURES (schema customer_message v1, prompt extract.v1, model extractq-sim-1)") ||
		!strings.HasPrefix(fields["/intent"], "/intent 2 1 50.0 [9.5–90.5] 2.0") {
		t.Errorf("false-accept table:\n%s", out.String())
	}
	runs, err := st.EvalRunList(ctx, st.Pool, store.EvalRunListParams{BatchID: "b-qa"})
	if err != nil || len(runs) != 1 || runs[0].LabelsName != "qa:b-qa" || runs[0].Matched != 2 {
		t.Fatalf("recorded: %+v, %v; want one evaluation with labels qa:b-qa, 2 matched", runs, err)
	}
}
