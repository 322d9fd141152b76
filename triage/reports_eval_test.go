package triage_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
)

// The reports page shows the newest recorded evaluation per field, as the
// store has it, labels simulator figures, and charts each field over the
// evaluations, one bar per prompt version.
func TestReportsEval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newAliceBundle(t)

	r := c.get("/reports")
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="eval-none"`) {
		t.Fatalf("no evaluation yet: %d, want the page saying so", r.status)
	}

	f := func(x float64) *float64 { return &x }
	for i, p := range []struct {
		prompt, model string
		f1            float64
	}{{"extract.v1", "extractq-sim-1", 0.5}, {"extract.v2", "gpt-4o-mini", 0.75}} {
		if _, err := b.st.EvalRunInsert(ctx, b.st.Pool, store.EvalRunInsertParams{
			BatchID: b.batch, SchemaID: "customer_message", SchemaVersion: "1", PromptVersion: p.prompt, Model: p.model,
			Simulated: i == 0, LabelsName: "messages.jsonl", LabelsSHA256: "00", Labels: 10, Matched: 10,
			Fields: []store.EvalField{{Field: "order_id", Grounded: true, N: 10, TP: 3, FP: 1, FN: 1, TN: 5,
				Precision: f(0.75), PrecisionLow: f(0.3), PrecisionHigh: f(0.95), F1: f(p.f1), F1Low: f(p.f1 - 0.2), F1High: f(p.f1 + 0.1),
				Exact: f(0.8), ExactLow: f(0.49), ExactHigh: f(0.94)}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	r = c.get("/reports")
	if r.status != http.StatusOK {
		t.Fatalf("GET /reports: %d", r.status)
	}
	table := section(r.body, `id="eval-table"`, "</table>")
	row := section(table, `data-field="order_id"`, "</tr>")
	for _, want := range []string{"<code>order_id</code>", "<td>g</td>", `<td class="r">10</td>`, "75.0 [30.0–95.0]", `"r f1">75.0 [55.0–85.0]`, "80.0 [49.0–94.0]"} {
		if !strings.Contains(row, want) {
			t.Errorf("the order_id row lacks %q: %s", want, row)
		}
	}
	latest := section(r.body, `id="eval-latest"`, "</p>")
	if !strings.Contains(latest, "<code>extract.v2</code>") || strings.Contains(latest, `id="eval-simulated"`) {
		t.Errorf("the newest evaluation (a model's) is not described as such: %s", latest)
	}
	chart := section(r.body, `<figure class="evalchart" data-field="order_id">`, "</figure>")
	if strings.Count(chart, "<rect") != 2 || !strings.Contains(chart, ">v1</text>") || !strings.Contains(chart, ">v2</text>") {
		t.Errorf("the order_id chart lacks a bar per version: %s", chart)
	}
	if !strings.Contains(chart, "F1 50.0% [30.0–60.0], n 10 (simulator figures, not a model)") || strings.Count(chart, "simulator figures") != 1 {
		t.Errorf("the simulator's bar is not labelled (and only it): %s", chart)
	}
	if !strings.Contains(r.body, "Bars of simulator runs describe the simulator") {
		t.Error("the charts' caption does not say simulator bars describe the simulator")
	}
}

// section returns s from the first occurrence of start to the next end
// after it, or "".
func section(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i:]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j+len(end)]
	}
	return s
}
