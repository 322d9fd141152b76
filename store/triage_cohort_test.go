package store_test

import (
	"slices"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// The queue filters and counts items by the cohort of their run's last
// LLM call: a superseded call written later does not change it, and an
// item whose run made no call is in no cohort.
func TestTriageQueueCohorts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch := batchFixture(ctx, t, st, tx)

	v1a, _ := triageItemFixture(ctx, t, st, tx, batch) // extract.v1, schema 1, sim-1
	v1b, _ := triageItemFixture(ctx, t, st, tx, batch)

	r := messageFixture(ctx, t, st, tx, batch)
	out := triageFailedOutcome(r)
	out.SchemaVersion = "2"
	for i := range out.Calls {
		out.Calls[i].PromptVersion, out.Calls[i].Model = "extract.v2@abc123", "sim-2"
	}
	if err := st.RunOutcomeInsert(ctx, tx, out); err != nil {
		t.Fatal(err)
	}
	// A late delivery's call, superseded: not the run's cohort.
	if err := st.LLMCallInsertSuperseded(ctx, tx, store.LLMCallInsertSupersededParams{
		MessageID: r.MessageID, RunNo: r.RunNo, SchemaID: "support_ticket", SchemaVersion: "9",
		Calls: []store.LLMCall{{Attempt: 1, Model: "sim-late", PromptVersion: "extract.v9", RequestMode: "response_format"}},
	}); err != nil {
		t.Fatal(err)
	}
	var v2 int64
	if err := tx.QueryRow(ctx, `SELECT id FROM triage_items WHERE message_id = $1`, r.MessageID).Scan(&v2); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		f    store.TriageFilter
		want []int64
	}{
		{"prompt v1", store.TriageFilter{BatchID: batch, PromptVersion: "extract.v1"}, []int64{v1a, v1b}},
		{"prompt v2", store.TriageFilter{BatchID: batch, PromptVersion: "extract.v2@abc123"}, []int64{v2}},
		{"schema 2", store.TriageFilter{BatchID: batch, SchemaVersion: "2"}, []int64{v2}},
		{"model sim-1", store.TriageFilter{BatchID: batch, Model: "sim-1"}, []int64{v1a, v1b}},
		{"v2 on sim-1", store.TriageFilter{BatchID: batch, PromptVersion: "extract.v2@abc123", Model: "sim-1"}, nil},
		{"superseded call's", store.TriageFilter{BatchID: batch, Model: "sim-late"}, nil},
	} {
		items, err := st.TriageQueueList(ctx, tx, store.TriageQueueListParams{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(items); !slices.Equal(got, tc.want) {
			t.Errorf("%s: items %v, want %v", tc.name, got, tc.want)
		}
	}

	c, err := st.TriageQueueCounts(ctx, tx, store.TriageFilter{BatchID: batch})
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.TriageFacet{{Value: "extract.v1", Count: 2}, {Value: "extract.v2@abc123", Count: 1}}; !slices.Equal(c.PromptVersions, want) {
		t.Errorf("prompt version facets = %+v, want %+v", c.PromptVersions, want)
	}
	if want := []store.TriageFacet{{Value: "1", Count: 2}, {Value: "2", Count: 1}}; !slices.Equal(c.SchemaVersions, want) {
		t.Errorf("schema version facets = %+v, want %+v", c.SchemaVersions, want)
	}
	if want := []store.TriageFacet{{Value: "sim-1", Count: 2}, {Value: "sim-2", Count: 1}}; !slices.Equal(c.Models, want) {
		t.Errorf("model facets = %+v, want %+v", c.Models, want)
	}
	c, err = st.TriageQueueCounts(ctx, tx, store.TriageFilter{BatchID: batch, Model: "sim-2"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Total != 1 || !slices.Equal(c.Models, []store.TriageFacet{{Value: "sim-2", Count: 1}}) {
		t.Errorf("counts of sim-2 = %+v", c)
	}
	n, err := st.TriageBulkRerunCount(ctx, tx, store.TriageFilter{BatchID: batch, PromptVersion: "extract.v1"}, "alice")
	if err != nil || n != 2 {
		t.Errorf("bulk re-run count of extract.v1 = %d, %v; want 2", n, err)
	}

	known, err := st.TriageCohortValues(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		list []string
		v    string
	}{{known.PromptVersions, "extract.v1"}, {known.PromptVersions, "extract.v2@abc123"}, {known.SchemaVersions, "2"},
		{known.Models, "sim-2"}} {
		if !slices.Contains(want.list, want.v) {
			t.Errorf("cohort values %+v lack %q", known, want.v)
		}
	}
	if slices.Contains(known.Models, "sim-late") || slices.Contains(known.Models, "") {
		t.Errorf("cohort values %+v hold a superseded call's model or an empty one", known)
	}
}
