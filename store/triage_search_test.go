package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestTriageSearch: the queue's text search finds items by the words of
// their message, in any script, with phrases and exclusions, combined
// with the other filters, through the index of migration 000019.
func TestTriageSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	db := st.Pool
	batch := batchFixture(ctx, t, st, db)
	other := batchFixture(ctx, t, st, db)
	item := func(batch, text string) int64 {
		t.Helper()
		res, err := st.MessageIngest(ctx, db, ingestParams(batch, uniqueID("m"), text))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.RunOutcomeInsert(ctx, db, triageFailedOutcome(res.Run)); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := db.QueryRow(ctx, `SELECT id FROM triage_items WHERE message_id = $1`, res.Run.MessageID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	parcel := item(batch, "My PARCEL 1Z999AA10123456784 never arrived, order 48213.")
	refund := item(batch, "Please refund order 48213 to my card.")
	arabic := item(batch, "العميل يقول: لم يصل الطلب 48213")
	greek := item(other, "Το δέμα μου δεν έφτασε ποτέ, παραγγελία 77001.")
	emoji := item(other, "🎉 Müller's parcel arrived damaged")

	search := func(f store.TriageFilter) []int64 {
		t.Helper()
		items, err := st.TriageQueueList(ctx, db, store.TriageQueueListParams{Filter: f, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		c, err := st.TriageQueueCounts(ctx, db, f)
		if err != nil {
			t.Fatal(err)
		}
		if c.Total != len(ids) {
			t.Errorf("search %+v: counts say %d, the list has %d", f, c.Total, len(ids))
		}
		return ids
	}
	for _, tc := range []struct {
		name string
		f    store.TriageFilter
		want []int64
	}{
		{"word, any case", store.TriageFilter{Search: "parcel"}, []int64{parcel, emoji}},
		{"id", store.TriageFilter{Search: "1z999aa10123456784"}, []int64{parcel}},
		{"every word", store.TriageFilter{Search: "order 48213"}, []int64{parcel, refund}},
		{"phrase", store.TriageFilter{Search: `"refund order"`}, []int64{refund}},
		{"or", store.TriageFilter{Search: "refund or damaged"}, []int64{refund, emoji}},
		{"not", store.TriageFilter{Search: "48213 -refund"}, []int64{parcel, arabic}},
		{"arabic", store.TriageFilter{Search: "الطلب"}, []int64{arabic}},
		{"greek, lower-cased", store.TriageFilter{Search: "ΔΈΜΑ"}, []int64{greek}},
		{"after an emoji", store.TriageFilter{Search: "müller's"}, []int64{emoji}},
		{"with a batch", store.TriageFilter{Search: "parcel", BatchID: other}, []int64{emoji}},
		{"with a status", store.TriageFilter{Search: "parcel", Status: store.TriageRejected}, nil},
		{"no word", store.TriageFilter{Search: "?!"}, nil},
		{"unknown", store.TriageFilter{Search: "zanzibar"}, nil},
	} {
		if got := search(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: search %+v = %v, want %v", tc.name, tc.f, got, tc.want)
		}
	}

	// The planner can answer it from the index (a small table is
	// scanned otherwise, so sequential scans are off for the check).
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	rows, err := tx.Query(ctx, `EXPLAIN SELECT m.id FROM messages m WHERE `+strings.ReplaceAll(store.TriageSearchSQL, "%s", "$1"), "parcel")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "messages_body_search_idx") {
		t.Errorf("the search does not use the index:\n%s", plan.String())
	}
}
