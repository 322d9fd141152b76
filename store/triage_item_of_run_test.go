package store_test

import (
	"errors"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestTriageItemOfRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batchID := batchFixture(ctx, t, st, tx)
	failed := messageFixture(ctx, t, st, tx, batchID)
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(failed)); err != nil {
		t.Fatal(err)
	}
	ok := messageFixture(ctx, t, st, tx, batchID)
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(ok)); err != nil {
		t.Fatal(err)
	}
	ref, err := st.TriageItemOfRun(ctx, tx, failed.MessageID, failed.RunNo)
	if err != nil {
		t.Fatal(err)
	}
	items, err := st.TriageItemList(ctx, tx, store.TriageItemListParams{BatchID: batchID})
	if err != nil || len(items) != 1 || items[0].ID != ref.ID || !items[0].CreatedAt.Equal(ref.CreatedAt) {
		t.Fatalf("TriageItemOfRun = %+v; items %+v, %v", ref, items, err)
	}
	if _, err := st.TriageItemOfRun(ctx, tx, ok.MessageID, ok.RunNo); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a succeeded run's item: %v, want ErrNotFound", err)
	}
}
