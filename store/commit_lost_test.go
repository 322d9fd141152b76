package store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/extractq/extractq/internal/tcpproxy"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestMaybeCommitted: a COMMIT whose reply is lost (the connection fails
// after Postgres committed) is an error MaybeCommitted reports, and the
// row is there; an error of the transaction's own statements, or one
// Postgres answered, is not.
func TestMaybeCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, via, p := proxiedStore(t)
	insert := func(id string) func(tx store.DBTX) error {
		return func(tx store.DBTX) error {
			_, err := tx.Exec(ctx, `INSERT INTO batches (id, schema_id) VALUES ($1, 'customer_message')`, id)
			return err
		}
	}

	p.LoseReplyAfter(func(chunk []byte) bool { return bytes.Contains(chunk, []byte("commit")) })
	err := via.InTx(ctx, insert("b1"))
	if err == nil || !store.MaybeCommitted(err) || !store.Transient(err) {
		t.Fatalf("COMMIT with its reply lost: %v (MaybeCommitted %v, Transient %v), want a transient error that may have committed",
			err, store.MaybeCommitted(err), store.Transient(err))
	}
	// Postgres acts on the COMMIT after the client saw its connection fail.
	testsignal.Eventually(t, 10*time.Second, "the row of the COMMIT whose reply was lost", func() bool {
		var n int
		err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM batches WHERE id = 'b1'`).Scan(&n)
		return err == nil && n == 1
	})

	if err := via.InTx(ctx, insert("b1")); err == nil || store.MaybeCommitted(err) {
		t.Fatalf("a unique violation in the transaction: %v, MaybeCommitted %v; want an error that did not commit", err, store.MaybeCommitted(err))
	}
	failed := errors.New("fn failed")
	if err := via.InTx(ctx, func(store.DBTX) error { return failed }); !errors.Is(err, failed) || store.MaybeCommitted(err) {
		t.Fatalf("fn's own error: %v, MaybeCommitted %v", err, store.MaybeCommitted(err))
	}
	if err := via.InTx(ctx, insert("b2")); err != nil || store.MaybeCommitted(nil) {
		t.Fatalf("a plain commit: %v", err)
	}
}

// proxiedStore returns a store, the same schema opened through a proxy
// that can lose Postgres's replies, and the proxy.
func proxiedStore(t *testing.T) (st, via *store.Store, p *tcpproxy.Proxy) {
	t.Helper()
	st = storetest.NewStore(t)
	// One connection, so that the statements prepared on it are the
	// ones a test's chunks name.
	via, p = storetest.Proxied(t, st, 1)
	return st, via, p
}

// TestRunWriteBatchReplyLost: the worker's batched write sends its BEGIN
// with its statements; a reply lost before the COMMIT wrote nothing and
// is an error MaybeCommitted does not report, and one lost after it is,
// with the outcomes there; written again, each is ErrOutcomeExists.
func TestRunWriteBatchReplyLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, via, p := proxiedStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)
	var outs []store.RunOutcomeParams
	for range 3 {
		outs = append(outs, failedOutcome(messageFixture(ctx, t, st, st.Pool, batch)))
	}
	// Each statement prepared first, on a round trip of its own.
	warm := failedOutcome(messageFixture(ctx, t, st, st.Pool, batch))
	if errs := via.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{warm}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	failed := func() int {
		var n int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE batch_id = $1 AND status = 'failed'`, batch).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The chunk that ends the batch with its Sync message ('S', length 4).
	p.LoseReplyAfter(func(chunk []byte) bool { return bytes.HasSuffix(chunk, []byte{'S', 0, 0, 0, 4}) })
	for i, err := range via.RunOutcomeInsertMany(ctx, outs) {
		if err == nil || store.MaybeCommitted(err) || !store.Transient(err) {
			t.Fatalf("outcome %d with the batch's reply lost: %v (MaybeCommitted %v, Transient %v), want a transient error that did not commit",
				i, err, store.MaybeCommitted(err), store.Transient(err))
		}
	}
	if n := failed(); n != 1 {
		t.Fatalf("%d runs failed after the batch's reply was lost, want the warm-up's 1", n)
	}

	p.LoseReplyAfter(func(chunk []byte) bool { return bytes.Contains(chunk, []byte("commit")) })
	for i, err := range via.RunOutcomeInsertMany(ctx, outs) {
		if err == nil || !store.MaybeCommitted(err) || !store.Transient(err) {
			t.Fatalf("outcome %d with the COMMIT's reply lost: %v (MaybeCommitted %v, Transient %v), want a transient error that may have committed",
				i, err, store.MaybeCommitted(err), store.Transient(err))
		}
	}
	testsignal.Eventually(t, 10*time.Second, "the outcomes of the batch whose COMMIT's reply was lost", func() bool {
		return failed() == len(outs)+1
	})
	for i, err := range via.RunOutcomeInsertMany(ctx, outs) {
		if !errors.Is(err, store.ErrOutcomeExists) || store.MaybeCommitted(err) {
			t.Errorf("outcome %d written again: %v, want ErrOutcomeExists", i, err)
		}
	}
}
