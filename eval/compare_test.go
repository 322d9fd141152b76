package eval_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/devtools/llmsim"
	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// compareLines is how many lines of the bundled sample the comparison
// runs: enough for a planted 30% value error rate to be found.
const compareLines = 200

// plantedPhrase is the system-turn phrase of the test's prompt v2, to
// which the simulator ties its value errors.
const plantedPhrase = "- Prefer null to a value you are not sure of."

type harness struct {
	st     *store.Store
	db     store.DBTX
	ext    *pipeline.Extractor
	schema *pipeline.Schema
	lines  []sampleLine
}

type sampleLine struct {
	ID, Text string
}

func newHarness(t *testing.T, rate float64) *harness {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	sim := config.Default().Simulator
	sim.PromptErrors = []config.SimPromptErrors{{Match: plantedPhrase, ValueErrorRate: rate}}
	srv := httptest.NewServer(llmsim.New(sim, log))
	t.Cleanup(srv.Close)
	oc := openai.DefaultConfig("test")
	oc.BaseURL = srv.URL + "/v1"
	ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
		Model: llmsim.DefaultModel, MaxCompletionTokens: 1024, ContextWindowTokens: 32768, Logger: log,
	})
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	st, tx := storetest.TestTx(t.Context(), t)
	h := &harness{st: st, db: tx, ext: ext, schema: schema}
	f, err := os.Open("../testdata/abcd/messages.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(h.lines) < compareLines {
		var l sampleLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		h.lines = append(h.lines, l)
	}
	return h
}

func prompts(t *testing.T) (v1, v2 *pipeline.Prompt) {
	t.Helper()
	v1, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../pipeline/prompts/extract.v1.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), "Rules:\n", "Rules:\n"+plantedPhrase+"\n", 1)
	if text == string(src) {
		t.Fatal("extract.v1.tmpl has no \"Rules:\" line to plant the phrase after")
	}
	v2, err = pipeline.ParsePrompt("test.v2", text)
	if err != nil {
		t.Fatal(err)
	}
	return v1, v2
}

// run ingests the sample lines under source (a batch of their own, as a
// second version's run of the same messages is), extracts each with
// prompt as the worker does, and records the outcomes; it returns the
// batch id.
func (h *harness) run(t *testing.T, source string, prompt *pipeline.Prompt) string {
	t.Helper()
	ctx := t.Context()
	batch := "b-" + source
	if err := h.st.BatchInsert(ctx, h.db, store.BatchInsertParams{ID: batch, SchemaID: "customer_message", SourceName: source}); err != nil {
		t.Fatal(err)
	}
	for _, l := range h.lines {
		sum := sha256.Sum256([]byte(l.Text))
		in, err := h.st.MessageIngest(ctx, h.db, store.MessageIngestParams{
			Source: source, ExternalID: l.ID, Body: l.Text, ContentHash: sum[:], BatchID: batch, SchemaID: "customer_message",
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.ext.Process(context.Background(), pipeline.Input{Text: l.Text, Schema: h.schema, Prompt: prompt, Repair: pipeline.RepairRegenerate})
		if err != nil {
			t.Fatal(err)
		}
		if res.Data == nil {
			continue // failed: left queued, no record, as eval reads a failed run
		}
		calls := make([]store.LLMCall, len(res.Calls))
		for i, c := range res.Calls {
			calls[i] = store.LLMCall{Attempt: c.Attempt, Purpose: c.Purpose, Model: c.Model, PromptVersion: c.PromptVersion,
				SchemaVersion: c.SchemaVersion, RequestMode: c.RequestMode, RepairStrategy: c.RepairStrategy, Valid: c.Valid()}
		}
		if err := h.st.RunOutcomeInsert(ctx, h.db, store.RunOutcomeParams{
			MessageID: in.Run.MessageID, RunNo: in.Run.RunNo, SchemaID: "customer_message", SchemaVersion: h.schema.Version,
			Status: res.Outcome, Calls: calls, Extraction: &store.ExtractionParams{Data: res.Data},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return batch
}

func (h *harness) report(t *testing.T, batch string) *eval.Report {
	t.Helper()
	f, err := os.Open("../testdata/abcd/messages.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	labels, err := eval.ReadLabels(f)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.Open("../testdata/abcd/eval.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer spec.Close()
	sp, err := eval.ReadSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := eval.Fields(h.schema, sp)
	if err != nil {
		t.Fatal(err)
	}
	b, preds, err := eval.LoadBatch(t.Context(), h.st, h.db, batch)
	if err != nil {
		t.Fatal(err)
	}
	opt := eval.Options{IgnoreSource: true}
	sc, err := eval.Score(h.schema, fields, labels, preds, opt)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Matched != len(h.lines) {
		t.Fatalf("batch %s: %d label lines matched, want %d", batch, sc.Matched, len(h.lines))
	}
	return eval.NewReport(b, sc, opt)
}

// A prompt version the simulator makes worse (value errors at 30%, tied
// to a phrase of its system turn) is found worse on the same messages,
// outside the noise; two runs of one version give identical records and
// nothing is flagged.
func TestComparePlantedDifference(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 0.3)
	v1, v2 := prompts(t)
	a := h.report(t, h.run(t, "v1", v1))
	again := h.report(t, h.run(t, "v1-again", v1))
	b := h.report(t, h.run(t, "v2", v2))
	if !a.Simulated || len(b.PromptVersions) != 1 || b.PromptVersions[0] != "test.v2" {
		t.Fatalf("batches: %+v and %+v, want simulated, B with prompt test.v2", a.Batch, b.Batch)
	}

	same := eval.Compare(a, again)
	for _, d := range same.Fields {
		if d.Significant || d.OnlyA != 0 || d.OnlyB != 0 || d.CountsA != d.CountsB {
			t.Errorf("same version, field %s: %+v, want identical outcomes and nothing flagged", d.Field, d)
		}
	}

	c := eval.Compare(a, b)
	if c.Paired != compareLines {
		t.Fatalf("paired %d, want %d", c.Paired, compareLines)
	}
	flagged := map[string]eval.FieldDiff{}
	for _, d := range c.Fields {
		if d.Significant {
			flagged[d.Field] = d
		}
		if d.OnlyB > d.OnlyA {
			t.Errorf("field %s: v2 right where v1 is wrong %d times, v1 only %d: value errors made it better", d.Field, d.OnlyB, d.OnlyA)
		}
	}
	// intent carries the planted difference; flow's planted errors are
	// mostly caught by the schema's intent→flow rules and repaired, so
	// flow is no witness.
	for _, f := range []string{"intent"} {
		d, ok := flagged[f]
		if !ok {
			t.Errorf("field %s not flagged: %+v", f, c.Fields)
			continue
		}
		if d.ExactDiff >= 0 || !d.F1Diff.Defined || d.F1Diff.High >= 0 {
			t.Errorf("field %s: exact diff %+.3f, F1 diff %+v, want both below 0 (B worse), the F1 interval too", f, d.ExactDiff, d.F1Diff)
		}
	}
	var sb strings.Builder
	if err := c.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "SIMULATOR FIGURES") {
		t.Errorf("comparison table does not label the simulator's figures:\n%s", sb.String())
	}
	t.Logf("\n%s", sb.String())
}
