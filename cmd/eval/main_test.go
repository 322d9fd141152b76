package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// seedBatch records a batch of customer_message ingested from source
// with one message per text, each succeeded with its record (nil: left
// queued).
func seedBatch(ctx context.Context, t *testing.T, st *store.Store, id, source, prompt string, texts, records []string) {
	t.Helper()
	seedBatchOf(ctx, t, st, "customer_message", id, source, prompt, texts, records)
}

// seedBatchOf is seedBatch for a batch of schema schemaID.
func seedBatchOf(ctx context.Context, t *testing.T, st *store.Store, schemaID, id, source, prompt string, texts, records []string) {
	t.Helper()
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: id, SchemaID: schemaID, SourceName: source}); err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		sum := sha256.Sum256([]byte(text))
		in, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: id, ExternalID: "m" + string(rune('1'+i)), Body: text,
			ContentHash: sum[:], BatchID: id, SchemaID: schemaID})
		if err != nil {
			t.Fatal(err)
		}
		if records[i] == "" {
			continue
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{
			MessageID: in.Run.MessageID, RunNo: in.Run.RunNo, SchemaID: schemaID, SchemaVersion: "1", Status: store.RunSucceeded,
			Calls:      []store.LLMCall{{Attempt: 1, Model: "extractq-sim-1", PromptVersion: prompt, RequestMode: "response_format", Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(records[i])},
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	cfg := config.Default()
	dir := t.TempDir()
	labels := filepath.Join(dir, "labels.jsonl")
	if err := os.WriteFile(labels, []byte(
		`{"id":"m1","expected":{"order_id":"1234567890","intent":"refund_status","full_name":"albert sanders"}}`+"\n"+
			`{"id":"m2","expected":{"order_id":"5555555555","intent":"refund_status"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	texts := []string{"order 1234567890 from Albert Sanders", "where is my refund"}
	seedBatch(ctx, t, st, "b-one", labels, "extract.v1", texts,
		[]string{`{"order_id":"1234567890","intent":"refund_status","full_name":"Albert Sanders"}`, ""})
	seedBatch(ctx, t, st, "b-two", "other.jsonl", "extract.v2", texts,
		[]string{`{"order_id":null,"intent":"refund_status","full_name":"Albert Sanders"}`, `{"order_id":null,"intent":"refund_status"}`})

	var out strings.Builder
	// The newest batch ingested from the labels file, by default.
	if err := run(ctx, &out, st, cfg, options{labels: labels, ignoreSource: true}); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	for _, want := range []string{
		"Eval of batch b-one: 2 label lines, 2 matched, 1 without a model record",
		"SIMULATOR FIGURES (model extractq-sim-1, prompt extract.v1",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	// order_id: m1 TP; m2 expected-null (not in the text), no record: TN.
	// full_name: exact comparison without a spec: wrong (FP and FN).
	rows := map[string]string{}
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	if got := rows["order_id"]; !strings.HasPrefix(got, "order_id g 2 1 0 0 1 100.0 [20.7–100.0] 100.0 [20.7–100.0]") {
		t.Errorf("order_id row = %q", got)
	}
	if got := rows["full_name"]; !strings.HasPrefix(got, "full_name g 1 0 1 1 0") {
		t.Errorf("full_name row = %q, want a wrong value (fp 1, fn 1)", got)
	}
	if got := rows["intent"]; !strings.HasPrefix(got, "intent 2 1 0 1 0") {
		t.Errorf("intent row = %q, want one TP and the queued message's miss", got)
	}
	runs, err := st.EvalRunList(ctx, st.Pool, store.EvalRunListParams{BatchID: "b-one"})
	if err != nil || len(runs) != 1 || !runs[0].Simulated || runs[0].LabelsName != "labels.jsonl" || len(runs[0].Fields) != 3 {
		t.Fatalf("recorded: %+v, %v; want one simulated evaluation of 3 fields", runs, err)
	}

	// A spec normalises the name: TP. JSON, not saved.
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte("fields:\n  full_name: {normalize: [case]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, &out, st, cfg, options{labels: labels, batch: "b-one", spec: spec, json: true, noSave: true, ignoreSource: true}); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Note   string
		Fields []struct {
			Field string
			TP    int
		}
	}
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.Note, "simulator figures") || len(rep.Fields) != 3 || rep.Fields[0].Field != "full_name" || rep.Fields[0].TP != 1 {
		t.Errorf("JSON report = %+v, want the simulator note and full_name a TP", rep)
	}
	if runs, _ := st.EvalRunList(ctx, st.Pool, store.EvalRunListParams{BatchID: "b-one"}); len(runs) != 1 {
		t.Errorf("-no-save recorded an evaluation: %d", len(runs))
	}

	// Compare: B lost order_id on m1.
	out.Reset()
	if err := run(ctx, &out, st, cfg, options{labels: labels, batch: "b-one", compare: "b-two", ignoreSource: true, noSave: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2 paired messages") || !strings.Contains(out.String(), "prompt extract.v2") {
		t.Errorf("comparison:\n%s", out.String())
	}

	// A line that gives a source matches only messages of that source.
	sourced := filepath.Join(dir, "sourced.jsonl")
	if err := os.WriteFile(sourced, []byte(`{"id":"m1","source":"abcd","expected":{"intent":"refund_status"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    options
		want string
	}{
		{options{labels: labels, source: "nope.jsonl"}, "no batch with messages was ingested from nope.jsonl"},
		{options{labels: labels, batch: "b-none"}, "batch b-none: no such batch"},
		{options{labels: sourced, batch: "b-one"}, "no label line matches one of its 2 messages"},
		{options{labels: filepath.Join(dir, "missing.jsonl"), batch: "b-one"}, "missing.jsonl"},
	} {
		if err := run(ctx, &out, st, cfg, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.o, err, c.want)
		}
	}
}

// TestBatchToScoreOfSchema: a newer batch of another schema ingested from
// the labels file (the sample extracted again as return_request) is the
// newest of any schema, but -schema picks the newest of its own, as make
// eval asks for customer_message; -schema with none of it names both.
func TestBatchToScoreOfSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	cfg := config.Default()
	labels := filepath.Join(t.TempDir(), "labels.jsonl")
	texts := []string{"order 1234567890 from Albert Sanders"}
	seedBatch(ctx, t, st, "b-customer", labels, "extract.v1", texts, []string{`{"order_id":"1234567890"}`})
	seedBatchOf(ctx, t, st, "return_request", "b-return", labels, "extract.v1", []string{"a return of order 1234567890"}, []string{`{}`})

	for _, c := range []struct{ schema, want string }{{"", "b-return"}, {"customer_message", "b-customer"}, {"return_request", "b-return"}} {
		got, err := batchToScore(ctx, st, cfg, options{labels: labels, schema: c.schema})
		if err != nil || got != c.want {
			t.Errorf("-schema %q: %q, %v; want %q", c.schema, got, err, c.want)
		}
	}
	_, err := batchToScore(ctx, st, cfg, options{labels: labels, schema: "invoice"})
	if err == nil || !strings.Contains(err.Error(), "of schema invoice") || !strings.Contains(err.Error(), labels) {
		t.Errorf("-schema invoice: %v; want an error naming the schema and the file", err)
	}
}
