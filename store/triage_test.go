package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestTriageQueue(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		st      *store.Store
		db      store.DBTX // the test's transaction, or its own store's pool
		batchID string
	}
	// setup gives the test a transaction on the shared schema.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		st, tx := storetest.TestTx(t.Context(), t)
		return &testBundle{st: st, db: tx, batchID: batchFixture(t.Context(), t, st, tx)}
	}
	// setupPool gives the test a schema of its own, for claims racing on
	// several connections (FOR UPDATE SKIP LOCKED skips only the rows
	// other transactions hold).
	setupPool := func(t *testing.T) *testBundle {
		t.Helper()
		st := storetest.NewStore(t)
		return &testBundle{st: st, db: st.Pool, batchID: batchFixture(t.Context(), t, st, st.Pool)}
	}

	t.Run("ListFiltersAndCounts", func(t *testing.T) {
		t.Parallel()
		ctx, b := t.Context(), setup(t)
		id1, _ := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		id2, _ := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		other := batchFixture(ctx, t, b.st, b.db)
		id3, _ := triageItemFixture(ctx, t, b.st, b.db, other)

		all, err := b.st.TriageQueueList(ctx, b.db, store.TriageQueueListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(all); !slices.Equal(got, []int64{id1, id2, id3}) {
			t.Fatalf("oldest first = %v, want %v", got, []int64{id1, id2, id3})
		}
		newest, err := b.st.TriageQueueList(ctx, b.db, store.TriageQueueListParams{NewestFirst: true, Limit: 2})
		if err != nil || !slices.Equal(ids(newest), []int64{id3, id2}) {
			t.Fatalf("newest first = %v, %v", ids(newest), err)
		}
		if all[0].Snippet == "" || all[0].ExternalID == "" || len(all[0].Errors) != 2 || all[0].BatchID != b.batchID {
			t.Errorf("item = %+v", all[0])
		}

		for name, f := range map[string]store.TriageFilter{
			"batch":          {BatchID: other},
			"kind":           {Kind: "rule", BatchID: other},
			"exact path":     {Path: "/order_id", BatchID: other},
			"folded path":    {Path: "/items/*/sku", BatchID: other},
			"kind with path": {Kind: "schema", Path: "/items/2/sku", BatchID: other},
			"schema":         {SchemaID: "support_ticket", BatchID: other},
			"newer":          {NewerThan: time.Now().Add(-time.Hour), BatchID: other},
		} {
			got, err := b.st.TriageQueueList(ctx, b.db, store.TriageQueueListParams{Filter: f})
			if err != nil || !slices.Equal(ids(got), []int64{id3}) {
				t.Errorf("filter %s: %v, %v; want [%d]", name, ids(got), err, id3)
			}
		}
		for name, f := range map[string]store.TriageFilter{
			"kind and path of different errors": {Kind: "rule", Path: "/items/2/sku"},
			"unknown path":                      {Path: "/nope"},
			"older":                             {OlderThan: time.Now().Add(-time.Hour)},
			"status":                            {Status: store.TriageApproved},
			"mine":                              {ClaimedBy: "alice"},
		} {
			got, err := b.st.TriageQueueList(ctx, b.db, store.TriageQueueListParams{Filter: f})
			if err != nil || len(got) != 0 {
				t.Errorf("filter %s: %v, %v; want none", name, ids(got), err)
			}
		}
		if _, err := b.st.TriageQueueList(ctx, b.db, store.TriageQueueListParams{Filter: store.TriageFilter{Status: "bogus"}}); err == nil {
			t.Error("bogus status: no error")
		}

		c, err := b.st.TriageQueueCounts(ctx, b.db, store.TriageFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Total != 3 || c.ByStatus[store.TriageOpen] != 3 || c.Claimed != 0 {
			t.Errorf("counts = %+v", c)
		}
		wantPaths := []store.TriageFacet{{Value: "/items/*/sku", Count: 3}, {Value: "/order_id", Count: 3}}
		if !slices.Equal(c.Paths, wantPaths) {
			t.Errorf("path facets = %+v, want %+v", c.Paths, wantPaths)
		}
		if !slices.Equal(c.Kinds, []store.TriageFacet{{Value: "rule", Count: 3}, {Value: "schema", Count: 3}}) {
			t.Errorf("kind facets = %+v", c.Kinds)
		}
		if len(c.Batches) != 2 || c.Batches[0] != (store.TriageFacet{Value: b.batchID, Count: 2}) {
			t.Errorf("batch facets = %+v", c.Batches)
		}

		prev, next, err := b.st.TriageQueueNeighbors(ctx, b.db, store.TriageFilter{}, id2)
		if err != nil || prev != id1 || next != id3 {
			t.Errorf("neighbors of %d = %d, %d, %v; want %d, %d", id2, prev, next, err, id1, id3)
		}
		prev, next, err = b.st.TriageQueueNeighbors(ctx, b.db, store.TriageFilter{BatchID: b.batchID}, id2)
		if err != nil || prev != id1 || next != 0 {
			t.Errorf("neighbors in batch = %d, %d, %v", prev, next, err)
		}

		v1, err := b.st.TriageQueueVersion(ctx, b.db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.TriageItemClaim(ctx, b.db, store.TriageItemClaimParams{ItemID: id1, Reviewer: "alice", Via: store.ViaAPI}); err != nil {
			t.Fatal(err)
		}
		v2, _ := b.st.TriageQueueVersion(ctx, b.db)
		if v1 == v2 {
			t.Error("queue version did not change on a claim")
		}
	})

	t.Run("ClaimIsExclusiveAndLeaseExpires", func(t *testing.T) {
		t.Parallel()
		ctx, b := t.Context(), setup(t)
		id, _ := triageItemFixture(ctx, t, b.st, b.db, b.batchID)

		c, err := b.st.TriageItemClaim(ctx, b.db, store.TriageItemClaimParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI, Lease: time.Minute})
		if err != nil || c.Renewed || c.ClaimedBy != "alice" || time.Until(c.Expires) < 50*time.Second {
			t.Fatalf("claim = %+v, %v", c, err)
		}
		_, err = b.st.TriageItemClaim(ctx, b.db, store.TriageItemClaimParams{ItemID: id, Reviewer: "bob", Via: store.ViaUI})
		var ce *store.ItemClaimedError
		if !errors.Is(err, store.ErrClaimed) || !errors.As(err, &ce) || ce.By != "alice" {
			t.Fatalf("bob's claim: %v, want claimed by alice", err)
		}
		if _, err := b.st.TriageItemClaimNext(ctx, b.db, store.TriageItemClaimNextParams{Reviewer: "bob", Via: store.ViaUI}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("bob's claim next: %v, want not found", err)
		}
		c, err = b.st.TriageItemClaim(ctx, b.db, store.TriageItemClaimParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI})
		if err != nil || !c.Renewed {
			t.Fatalf("renewal = %+v, %v", c, err)
		}
		c, err = b.st.TriageItemClaimNext(ctx, b.db, store.TriageItemClaimNextParams{Reviewer: "alice", Via: store.ViaUI})
		if err != nil || !c.Renewed || c.ItemID != id {
			t.Fatalf("claim next of a held item = %+v, %v", c, err)
		}
		// A decision by bob is refused while alice holds the lease.
		if _, err := b.st.TriageItemReject(ctx, b.db, store.TriageItemRejectParams{ItemID: id, Reviewer: "bob", Via: store.ViaUI, Reason: "spam"}); !errors.Is(err, store.ErrClaimed) {
			t.Fatalf("bob's reject: %v, want claimed", err)
		}

		// The lease runs out: bob may claim.
		if _, err := b.db.Exec(ctx, `UPDATE triage_items SET claim_expires = now() - interval '1 second' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		items, _ := b.st.TriageQueueList(ctx, b.db, store.TriageQueueListParams{})
		if items[0].ClaimedBy != "" || items[0].ClaimExpires != nil {
			t.Errorf("expired lease still listed: %+v", items[0])
		}
		c, err = b.st.TriageItemClaimNext(ctx, b.db, store.TriageItemClaimNextParams{Reviewer: "bob", Via: store.ViaUI})
		if err != nil || c.ItemID != id || c.Renewed {
			t.Fatalf("bob's claim after expiry = %+v, %v", c, err)
		}
		released, err := b.st.TriageItemRelease(ctx, b.db, store.TriageItemReleaseParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI})
		if ce, ok := errors.AsType[*store.ItemClaimedError](err); !ok || ce.By != "bob" || released {
			t.Fatalf("alice releases bob's item: %v, %v; want an *ItemClaimedError naming bob", released, err)
		}
		released, err = b.st.TriageItemRelease(ctx, b.db, store.TriageItemReleaseParams{ItemID: id, Reviewer: "bob", Via: store.ViaUI})
		if err != nil || !released {
			t.Fatalf("bob releases: %v, %v", released, err)
		}
		want := []string{store.AuditClaim, store.AuditClaim, store.AuditRelease}
		if got := auditActions(ctx, t, b.st, b.db, id); !slices.Equal(got, want) {
			t.Errorf("audit = %v, want %v", got, want)
		}
		if _, err := b.st.TriageItemClaim(ctx, b.db, store.TriageItemClaimParams{ItemID: 999999, Reviewer: "bob", Via: store.ViaUI}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown item: %v", err)
		}
	})

	t.Run("ConcurrentClaimNextGivesDistinctItems", func(t *testing.T) {
		t.Parallel()
		ctx, b := t.Context(), setupPool(t)
		const n = 6
		for range n {
			triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		}
		var mu sync.Mutex
		got := map[int64]string{}
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				who := string(rune('a' + i))
				c, err := b.st.TriageItemClaimNext(ctx, b.db, store.TriageItemClaimNextParams{Reviewer: who, Via: store.ViaAPI})
				if err != nil {
					t.Errorf("%s: %v", who, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if prev, dup := got[c.ItemID]; dup {
					t.Errorf("item %d claimed by %s and %s", c.ItemID, prev, who)
				}
				got[c.ItemID] = who
			}()
		}
		wg.Wait()
		if len(got) != n {
			t.Errorf("%d distinct items claimed, want %d", len(got), n)
		}
	})

	t.Run("ApproveWritesHumanResult", func(t *testing.T) {
		t.Parallel()
		ctx, b := t.Context(), setup(t)
		id, r := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		if _, err := b.st.TriageItemClaim(ctx, b.db, store.TriageItemClaimParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.CurrentResultGet(ctx, b.db, store.CurrentResultGetParams{MessageID: r.MessageID}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("current result before approval: %v", err)
		}
		overridden := extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/order_id", Keyword: "grounded", Message: "value does not appear in the message"}}
		if _, err := b.st.TriageItemApprove(ctx, b.db, store.TriageItemApproveParams{
			ItemID: id, Reviewer: "alice", Via: store.ViaUI, Data: []byte(`{"order_id":"1"}`), SchemaVersion: "2",
			Overridden: overridden,
		}); err == nil {
			t.Fatal("override without a reason: no error")
		}
		ap, err := b.st.TriageItemApprove(ctx, b.db, store.TriageItemApproveParams{
			ItemID: id, Reviewer: "alice", Via: store.ViaUI, Data: []byte(`{"order_id":"48213"}`), SchemaVersion: "2",
			Evidence: []byte(`[{"path":"/order_id","start":1,"end":6}]`), Overridden: overridden, OverrideReason: "typed on the phone",
		})
		if err != nil || ap.DecidedBy != "alice" || ap.MessageID != r.MessageID {
			t.Fatalf("approve = %+v, %v", ap, err)
		}
		cur, err := b.st.CurrentResultGet(ctx, b.db, store.CurrentResultGetParams{MessageID: r.MessageID})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Outcome != "approved" || cur.CreatedBy != "alice" || cur.RunNo != 1 || cur.SchemaVersion != "2" || string(cur.Data) != `{"order_id": "48213"}` {
			t.Errorf("current result = %+v (data %s)", cur, cur.Data)
		}
		var human bool
		if err := b.db.QueryRow(ctx, `SELECT human_made FROM current_results WHERE message_id = $1`, r.MessageID).Scan(&human); err != nil || !human {
			t.Errorf("human_made = %v, %v", human, err)
		}
		d, err := b.st.TriageItemGet(ctx, b.db, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Item.Status != store.TriageApproved || d.Item.DecidedBy != "alice" || d.Item.DecidedAt == nil ||
			d.Item.DecisionReason != "typed on the phone" || d.Item.ClaimedBy != "" || d.Current == nil {
			t.Errorf("item after approval = %+v", d.Item)
		}
		if len(d.Calls) != 2 || d.Calls[1].Purpose != "repair" || d.Calls[0].CostUSD == 0 || len(d.Runs) != 1 {
			t.Errorf("calls = %+v, runs = %+v", d.Calls, d.Runs)
		}
		entries, _ := b.st.AuditList(ctx, b.db, store.AuditListParams{TriageItemID: id})
		if len(entries) != 2 || entries[0].Action != store.AuditApprove || entries[0].Actor != "alice" || entries[0].Reason != "typed on the phone" {
			t.Fatalf("audit = %+v", entries)
		}
		var before, after map[string]any
		if err := json.Unmarshal(entries[0].Before, &before); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(entries[0].After, &after); err != nil {
			t.Fatal(err)
		}
		if before["status"] != "open" || before["claimed_by"] != "alice" || after["status"] != "approved" || after["overridden_errors"] == nil {
			t.Errorf("before = %v, after = %v", before, after)
		}
		// Decided once only.
		_, err = b.st.TriageItemReject(ctx, b.db, store.TriageItemRejectParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI, Reason: "x"})
		var closed *store.ItemClosedError
		if !errors.As(err, &closed) || closed.Status != store.TriageApproved {
			t.Errorf("reject after approve: %v", err)
		}
		// The audit log is append-only.
		if _, err := b.db.Exec(ctx, `DELETE FROM audit_log`); err == nil {
			t.Error("audit rows could be deleted")
		}
	})

	t.Run("RejectNeedsReason", func(t *testing.T) {
		t.Parallel()
		ctx, b := t.Context(), setup(t)
		id, r := triageItemFixture(ctx, t, b.st, b.db, b.batchID)
		if _, err := b.st.TriageItemReject(ctx, b.db, store.TriageItemRejectParams{ItemID: id, Reviewer: "alice", Via: store.ViaAPI, Reason: "  "}); err == nil {
			t.Fatal("blank reason: no error")
		}
		if _, err := b.st.TriageItemReject(ctx, b.db, store.TriageItemRejectParams{ItemID: id, Reviewer: "alice", Via: store.ViaAPI, Reason: "not a customer message"}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.CurrentResultGet(ctx, b.db, store.CurrentResultGetParams{MessageID: r.MessageID}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a rejection made a result: %v", err)
		}
		if got := auditActions(ctx, t, b.st, b.db, id); !slices.Equal(got, []string{store.AuditReject}) {
			t.Errorf("audit = %v", got)
		}
	})
}

func ids(items []store.TriageQueueItem) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}
