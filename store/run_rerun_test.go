package store_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestRunRerun(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		st      *store.Store
		db      store.DBTX // the test's transaction
		batchID string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		st, tx := storetest.TestTx(t.Context(), t)
		return &testBundle{st: st, db: tx, batchID: batchFixture(t.Context(), t, st, tx)}
	}

	t.Run("SingleItem", func(t *testing.T) {
		t.Parallel()
		ctx, b := t.Context(), setup(t)
		id, r := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		run, err := b.st.TriageItemRerun(ctx, b.db, store.TriageItemRerunParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI, Note: "prompt v2"})
		if err != nil {
			t.Fatal(err)
		}
		if run.MessageID != r.MessageID || run.RunNo != 2 || run.Status != store.RunQueued || run.BatchID != b.batchID ||
			!randomDedupID.MatchString(run.DedupID) || run.DedupID == r.DedupID || run.PublishedAt != nil {
			t.Fatalf("new run = %+v", run)
		}
		d, err := b.st.TriageItemGet(ctx, b.db, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Item.Status != store.TriageRerun || d.Item.RerunNo == nil || *d.Item.RerunNo != 2 || d.Item.DecisionReason != "prompt v2" || len(d.Runs) != 2 {
			t.Errorf("item = %+v, runs = %d", d.Item, len(d.Runs))
		}
		// Not published yet: the sweeper would find it.
		unpub, err := b.st.RunListUnpublished(ctx, b.db, store.RunListUnpublishedParams{OlderThan: run.CreatedAt.Add(time.Second)})
		if err != nil || !slices.ContainsFunc(unpub, func(u store.Run) bool { return u.DedupID == run.DedupID }) {
			t.Errorf("unpublished = %+v, %v", unpub, err)
		}
		n, err := b.st.RunMarkPublishedMany(ctx, b.db, []store.RunMarkPublishedParams{{MessageID: run.MessageID, RunNo: 2}, {MessageID: 424242, RunNo: 1}})
		if err != nil || n != 1 {
			t.Fatalf("mark published = %d, %v", n, err)
		}
		if _, err := b.st.TriageItemRerun(ctx, b.db, store.TriageItemRerunParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI}); !errors.Is(err, store.ErrItemClosed) {
			t.Errorf("second re-run: %v", err)
		}
		if got := auditActions(ctx, t, b.st, b.db, id); !slices.Equal(got, []string{store.AuditRerun}) {
			t.Errorf("audit = %v", got)
		}
	})

	t.Run("BulkConfirmsCountAndSkipsOthersLeases", func(t *testing.T) {
		t.Parallel()
		ctx, b := t.Context(), setup(t)
		id1, _ := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		id2, _ := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		id3, _ := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		other := batchFixture(ctx, t, b.st, b.db)
		idOther, _ := triageItemFixture(ctx, t, b.st, b.db, other)
		if _, err := b.st.TriageItemClaim(ctx, b.db, store.TriageItemClaimParams{ItemID: id3, Reviewer: "bob", Via: store.ViaUI}); err != nil {
			t.Fatal(err)
		}
		f := store.TriageFilter{BatchID: b.batchID, Kind: "rule"}
		n, err := b.st.TriageBulkRerunCount(ctx, b.db, f, "alice")
		if err != nil || n != 2 {
			t.Fatalf("count = %d, %v; want 2 (bob holds the third)", n, err)
		}
		rerunBatch := uniqueID("rerun-test")
		params := store.TriageBulkRerunParams{Filter: f, Reviewer: "alice", Via: store.ViaUI, Confirmed: 3,
			BatchID: rerunBatch, SchemaID: "support_ticket", Note: "schema v2"}
		_, err = b.st.TriageBulkRerun(ctx, b.db, params)
		var cc *store.CountChangedError
		if !errors.As(err, &cc) || cc.Now != 2 || !errors.Is(err, store.ErrCountChanged) {
			t.Fatalf("wrong confirmation: %v", err)
		}
		params.Confirmed = 2
		runs, err := b.st.TriageBulkRerun(ctx, b.db, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 2 || runs[0].BatchID != rerunBatch || runs[0].RunNo != 2 || runs[0].Status != store.RunQueued {
			t.Fatalf("runs = %+v", runs)
		}
		sum, err := b.st.BatchSummary(ctx, b.db, rerunBatch)
		if err != nil || sum.Messages != 2 || sum.Queued != 2 {
			t.Errorf("new batch = %+v, %v", sum, err)
		}
		for id, want := range map[int64]string{id1: store.TriageRerun, id2: store.TriageRerun, id3: store.TriageOpen, idOther: store.TriageOpen} {
			d, err := b.st.TriageItemGet(ctx, b.db, id)
			if err != nil || d.Item.Status != want {
				t.Errorf("item %d: status %q, %v; want %s", id, d.Item.Status, err, want)
			}
		}
		if got := auditActions(ctx, t, b.st, b.db, id1); !slices.Equal(got, []string{store.AuditRerun}) {
			t.Errorf("audit of item = %v", got)
		}
		all, _ := b.st.AuditList(ctx, b.db, store.AuditListParams{Actor: "alice"})
		if len(all) != 3 || all[0].Action != store.AuditBulkRerun {
			t.Errorf("alice's audit = %+v", all)
		}
		if n, _ := b.st.TriageBulkRerunCount(ctx, b.db, f, "alice"); n != 0 {
			t.Errorf("count after = %d", n)
		}
	})
}
